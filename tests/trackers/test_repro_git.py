"""The code's version in the reproducibility record, for runs longer than git's own time limit,
and the diff kept with it (redacted, capped)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from computewatch.sources.environment import GIT_TIMEOUT, diff_text

TRACKED = "lr = 0.1\n"
SCRIPT = """
import sys, time
import computewatch

with computewatch.track(name=sys.argv[1]) as run:
    time.sleep(float(sys.argv[2]))
    run.step(samples=1)
"""


def _dirty_repo(root: Path) -> tuple[Path, str]:
    repo = root / "proj"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "train.py").write_text(SCRIPT)
    (repo / "conf.py").write_text(TRACKED)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=repo, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    # a change with a planted secret: the diff is kept, the secret is not
    (repo / "conf.py").write_text(TRACKED + 'WANDB_API_KEY = "sk-planted-1234"\nlr = 0.2\n')
    return repo, commit


@pytest.mark.slow
def test_a_run_longer_than_gits_limit_keeps_the_commit_and_the_diff(
    cw: Any, tmp_path: Path
) -> None:
    repo, commit = _dirty_repo(tmp_path)
    seconds = f"{GIT_TIMEOUT + 1.5:g}"
    cw.ok("run", "--quiet", "--name", "long", "--", "sleep", seconds, cwd=repo)
    cw.ok("run", "--quiet", "--", sys.executable, "train.py", "tracked", seconds, cwd=repo)
    for name in ("long", "tracked"):
        env = cw.show(name)["environment"]
        assert env["git_why"] is None, env["git_why"]
        git = env["git"]
        assert git["commit"] == commit and git["dirty"] is True
        assert "+lr = 0.2" in git["diff"] and "WANDB_API_KEY = ***" in git["diff"]
        assert "sk-planted" not in git["diff"] and git["diff_truncated"] is False
        assert git["diff_bytes"] >= len(git["diff"])


def test_the_kept_diff_is_cut_at_a_line_end_and_redacted() -> None:
    raw = b"".join(b"+line %d\n" % i for i in range(100)) + b'+password = "hunter2"\n'
    text, cut = diff_text(raw, limit=50)
    assert cut is True and text.endswith("\n") and len(text.encode()) <= 50
    text, cut = diff_text(raw)
    assert cut is False and text.endswith("+password = ***\n") and "hunter2" not in text
    text, _ = diff_text(b"+url = postgres://me:pw@db/x\n+\xff\n")
    assert "pw@" not in text and "postgres://me:***@db/x" in text
