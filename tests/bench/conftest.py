"""The benchmark tests' helpers: the target module copied where the CLI runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

TARGETS = Path(__file__).with_name("bench_targets.py")


@pytest.fixture
def bench_cw(cw):  # type: ignore[no-untyped-def]
    """The ``cw`` CLI fixture, with ``bench_targets.py`` in its working directory (the CLI and
    its point processes import ``bench_targets:NAME`` from there)."""
    shutil.copy(TARGETS, cw.tmp / TARGETS.name)
    return cw
