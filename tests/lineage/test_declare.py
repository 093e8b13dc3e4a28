"""What a run trains, declared by `run --model ...`, by `track(model=...)` or by the
configuration, is recorded with the run as its governance document (the flags win)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.conftest import PY


def _declared(db: Path) -> dict[str, dict[str, Any]]:
    with closing(sqlite3.connect(db)) as c:
        rows = c.execute(
            "SELECT r.name, m.value FROM run_meta m JOIN runs r ON r.key = m.run_key "
            "WHERE m.kind = 'governance'"
        ).fetchall()
    return {name: json.loads(v) for name, v in rows}


JOB = """
import computewatch
with computewatch.track(model="inner", base_model="base", stage="rl") as r:
    r.step()
"""


def test_flags_track_and_configuration_declare_the_model(cw: Any, tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    cw.ok("run", "--quiet", "--name", "flags", "--model", "m", "--parameters", "7B", "--", "true")
    cw.ok("run", "--quiet", "--name", "inside", "--", PY, job)
    cw.ok("run", "--quiet", "--name", "both", "--model", "outer", "--", PY, job)
    config = tmp_path / "config.toml"
    config.write_text('[governance]\nmodel = "from-config"\nstage = "eval"\n')
    cw.ok("run", "--quiet", "--name", "config", "--config", config, "--", "true")
    d = _declared(cw.db)
    assert d["flags"] == {"model": "m", "base_model": None, "stage": "pretrain",
                          "parameters": 7e9}  # fmt: skip
    assert d["inside"] == {"model": "inner", "base_model": "base", "stage": "rl",
                           "parameters": None}  # fmt: skip
    assert d["both"]["model"] == "outer"
    assert d["config"]["model"] == "from-config" and d["config"]["stage"] == "eval"
    bad = cw("run", "--base-model", "x", "--", "true")
    assert bad.returncode == 2 and "needs a model" in bad.stderr
    bad = cw("run", "--model", "m", "--parameters", "lots", "--", "true")
    assert bad.returncode == 2 and "not a count" in bad.stderr
