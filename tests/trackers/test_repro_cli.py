"""The reproducibility record through the CLI: ``show`` (text and ``--json``), ``compare``
(the configuration diff) and the report, for runs of a real git work tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = """
import sys
import computewatch

with computewatch.track(config={"lr": float(sys.argv[1]), "seed": 7, "hf_token": "hf_x"}) as run:
    run.config(scheduler="cosine")
    run.step(samples=1)
"""


@pytest.mark.slow
def test_show_compare_and_report_carry_the_record(cw: Any, tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "exp"], cwd=repo, check=True)
    (repo / "train.py").write_text(SCRIPT)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=repo, check=True)
    cw.ok("run", "--quiet", "--name", "a", "--", sys.executable, "train.py", "0.1",
          "--api-key=SECRET", cwd=repo)  # fmt: skip
    (repo / "train.py").write_text(SCRIPT + "\n# changed\n")
    cw.ok("run", "--quiet", "--name", "b", "--", sys.executable, "train.py", "0.3", cwd=repo)

    a = cw.show("a")
    assert a["config"] == {"lr": 0.1, "seed": 7, "hf_token": "***", "scheduler": "cosine"}
    env = a["environment"]
    assert env["argv"][-1] == "--api-key=***"
    assert env["git"]["branch"] == "exp" and env["git"]["dirty"] is False
    assert env["cwd"] == str(repo)
    assert env["python"] and env["packages"] and "hardware" in env
    b = cw.show("b")
    assert b["environment"]["git"]["dirty"] is True and b["environment"]["git"]["diff_sha256"]

    text = cw.ok("show", "a").stdout
    assert "config" in text and "lr=0.1" in text and "hf_token=***" in text
    assert "clean" in text and "SECRET" not in text

    diff = cw.json("compare", "a", "b")
    assert {"key": "lr", "a": 0.1, "b": 0.3} in diff["config"]
    changed = {c["key"] for c in diff["environment"]}
    assert {"git.dirty", "git.diff_sha256"} <= changed
    text = cw.ok("compare", "a", "b").stdout
    assert "config.lr" in text and "environment.git.dirty" in text

    page = tmp_path / "a.html"
    cw.ok("report", "a", "-o", page)
    html = page.read_text()
    assert 'id="section-repro"' in html and "scheduler=cosine" in html
    assert "SECRET" not in html and "hf_x" not in html
