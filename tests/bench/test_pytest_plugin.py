"""The pytest plugin on a small model repository's test: a baseline written with
``--computewatch-update``, the same test within limits, a slower one failing, and nothing at
all without ``--computewatch``. Each runs a real pytest in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_TEST = """
import os, time

def test_train_step(computewatch):
    delay = float(os.environ.get("STEP_DELAY", "0.01"))
    for _ in range(20):
        time.sleep(delay)
        computewatch.step(samples=8)

def test_without_the_fixture():
    pass
"""
# The gated runs sleep at their own moments under their own load: a few ms of late wake-ups
# must stay far inside the +30% limit (15 ms on a 50 ms step), while the slow run's steps are
# twice as long (20 step times a side: the 2x shift is significant far beyond alpha 0.01).
BASE_DELAY = 0.05
SLOW_DELAY = 0.1


def _pytest(repo: Path, *args: str, delay: float = 0.01) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["STEP_DELAY"] = str(delay)
    # the plugin by name (the entry point may or may not be installed where this runs)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "computewatch.bench.pytest_plugin",
         "-p", "no:cacheprovider", "-q", *args],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "test_model.py").write_text(REPO_TEST)
    return repo


@pytest.mark.slow
def test_baseline_then_ok_then_regression(repo: Path) -> None:
    limits = ["--computewatch-max", "step_time_p50=+30%"]
    r = _pytest(repo, "--computewatch", "--computewatch-update", delay=BASE_DELAY)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((repo / "computewatch-baseline.json").read_text())
    entry = doc["tests"]["test_model.py::test_train_step"]
    assert entry["metrics"]["step_time_p50"] >= BASE_DELAY
    assert len(entry["step_times_seconds"]) == 20
    assert "test_model.py::test_without_the_fixture" not in doc["tests"]
    r = _pytest(repo, "--computewatch", *limits, delay=BASE_DELAY)
    assert r.returncode == 0, r.stdout + r.stderr  # the same work: noise is not flagged
    r = _pytest(repo, "--computewatch", *limits, delay=SLOW_DELAY)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "resources regressed in test_model.py::test_train_step" in r.stdout
    assert "step_time_p50" in r.stdout


def test_nothing_without_the_flag(repo: Path) -> None:
    r = _pytest(repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (repo / "computewatch-baseline.json").exists()


def test_missing_baseline_fails_clearly(repo: Path) -> None:
    r = _pytest(repo, "--computewatch", "-k", "train_step")
    assert r.returncode == 1
    assert "no baseline file" in r.stdout and "--computewatch-update" in r.stdout
