"""A run started in a directory that was deleted is still monitored and stored (without its
working directory), by `computewatch run` and by `track()`."""

from __future__ import annotations

import subprocess
from typing import Any

from tests.conftest import CW, PY, TIMEOUT

TRACK = "import computewatch\nwith computewatch.track('in-track') as r:\n    r.step()\n"


def test_a_deleted_working_directory(cw: Any) -> None:
    argv = " ".join([*CW, "run", "--quiet", "--name", "in-run", "--", "true"])
    script = (
        f'mkdir gone && cd gone && rmdir ../gone && {argv} && '
        f'{PY} -c "$0"'
    )  # fmt: skip
    r = subprocess.run(["sh", "-c", script, TRACK], cwd=cw.tmp, env=cw.env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    runs = {x["name"]: x for x in cw.json("runs")}
    assert runs["in-run"]["status"] == "completed"
    assert cw.show("in-run")["cwd"] is None
    assert runs["in-track"]["status"] == "completed"
