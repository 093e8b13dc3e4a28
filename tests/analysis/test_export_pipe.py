"""``computewatch export | head``: the reader going away ends the export quietly."""

from __future__ import annotations

import subprocess
import sys


def test_export_into_a_closed_pipe_ends_quietly(cw) -> None:
    cw.ok("run", "--quiet", "--", sys.executable, "-c", "import time; time.sleep(1.2)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "computewatch", "export", "last"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cw.env(),
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=60)
    assert first.startswith(b"run_id,")
    assert b"Traceback" not in err and b"Exception ignored" not in err
