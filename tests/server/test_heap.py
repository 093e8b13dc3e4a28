"""The server process's collector: start-up's objects frozen, thresholds raised, and the later
freeze of lifetime caches; an app made in another process (this one) leaves its collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys

from computewatch.server import heap


def test_settle_does_nothing_in_a_process_that_does_not_serve() -> None:
    frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
    heap.settle()
    assert gc.get_freeze_count() == frozen and gc.get_threshold() == thresholds


def test_a_serving_process_freezes_start_up_and_later_caches() -> None:
    code = (
        "import gc\n"
        "from computewatch.server import heap\n"
        "assert gc.get_freeze_count() == 0\n"
        "heap.tune_for_serving()\n"
        "first = gc.get_freeze_count()\n"
        "assert first > 1000, first\n"
        "assert gc.get_threshold() == heap.GC_THRESHOLDS\n"
        "cache = [[i] for i in range(5000)]\n"
        "heap.settle()\n"
        "assert gc.get_freeze_count() >= first + 5000, (first, gc.get_freeze_count())\n"
        "print('ok')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
