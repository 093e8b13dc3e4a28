"""The reproducibility record: git state of a real temporary repository (dirty flag and diff
hash change with the tree), redacted argv and hyperparameters, software versions."""

from __future__ import annotations

import importlib.metadata
import json
import math
import platform
import subprocess
from pathlib import Path

import pytest

from computewatch.analysis.repro import record_changes, with_repro
from computewatch.sampling.repro import read_configs, write_config
from computewatch.sources.environment import (
    Capture,
    capture_environment,
    git_state,
    redact_config,
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text("lr = 0.1\n")
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_git_state_follows_the_tree(repo: Path) -> None:
    clean = git_state(str(repo))
    assert not isinstance(clean, str)
    assert clean["commit"] == _git(repo, "rev-parse", "HEAD")
    assert clean["branch"] == "main"
    assert clean["dirty"] is False and clean["diff_sha256"] is None
    assert clean["root"] == str(repo)

    (repo / "train.py").write_text("lr = 0.2\n")
    one = git_state(str(repo / "."))
    assert not isinstance(one, str) and one["dirty"] is True
    assert one["diff_sha256"] is not None and len(one["diff_sha256"]) == 64

    (repo / "train.py").write_text("lr = 0.3\n")
    two = git_state(str(repo))
    assert not isinstance(two, str) and two["diff_sha256"] != one["diff_sha256"]

    (repo / "train.py").write_text("lr = 0.2\n")  # the same change again: the same hash
    again = git_state(str(repo))
    assert not isinstance(again, str) and again["diff_sha256"] == one["diff_sha256"]

    _git(repo, "checkout", "-q", "--detach")
    detached = git_state(str(repo))
    assert not isinstance(detached, str) and detached["branch"] is None


def test_untracked_files_make_the_tree_dirty(repo: Path) -> None:
    (repo / "notes.txt").write_text("x")
    state = git_state(str(repo))
    assert not isinstance(state, str)
    assert state["dirty"] is True and state["untracked"] == 1
    assert state["diff_sha256"] is None  # no change to a tracked file


def test_outside_a_repository_says_why(tmp_path: Path) -> None:
    why = git_state(str(tmp_path))
    assert isinstance(why, str) and "not a git work tree" in why
    env = capture_environment(["x"], str(tmp_path))
    assert env["git"] is None and env["git_why"] == why


def test_the_record_redacts_argv_and_lists_software(repo: Path) -> None:
    env = capture_environment(
        ["python", "train.py", "--password=hunter2", "--api-token", "abc", "WANDB_API_KEY=k"],
        str(repo),
        facts={"cpu_model": "EPYC", "logical_cpus": 4, "gpus": [{"index": 0, "name": "H100"}]},
    )
    assert env["argv"] == [
        "python", "train.py", "--password=***", "--api-token", "***", "WANDB_API_KEY=***",
    ]  # fmt: skip
    assert env["python"] == platform.python_version()
    assert env["packages"]["pytest"] == importlib.metadata.version("pytest")
    assert env["frameworks"]["torch"] == importlib.metadata.version("torch")
    assert env["accelerators"]["cuda"] is None  # the CPU build of PyTorch
    assert env["hardware"]["gpus"] == [
        {"index": 0, "name": "H100", "model": None, "memory_total_bytes": None,
         "power_limit_watts": None, "simulated": None},
    ]  # fmt: skip
    json.dumps(env)  # stored as JSON as it is


def test_capture_runs_on_a_thread_and_takes_the_facts_at_the_end(repo: Path) -> None:
    cap = Capture(["python"], str(repo))
    env = cap.result({"cpu_model": "Xeon"})
    assert env is not None and env["hardware"] == {"cpu_model": "Xeon"}
    assert cap.error is None


def test_hyperparameters_are_redacted_and_made_json() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    got = redact_config(
        {
            "lr": 1e-3,
            "hf_token": "hf_abc",
            "optim": {"name": "adam", "api_key": "x", "betas": [0.9, 0.99]},
            "db": "postgres://me:pw@host/db",
            "obj": Opaque(),
            "nan": math.nan,
            "cmd": "--password=x",
        }
    )
    assert got == {
        "lr": 1e-3,
        "hf_token": "***",
        "optim": {"name": "adam", "api_key": "***", "betas": [0.9, 0.99]},
        "db": "postgres://me:***@host/db",
        "obj": "Opaque()",
        "nan": "nan",
        "cmd": "--password=***",
    }


def test_configs_of_several_processes_merge_lowest_pid_first(tmp_path: Path) -> None:
    write_config(tmp_path, {"lr": 0.1, "token": "t"})
    mine = (tmp_path / f"config-{__import__('os').getpid()}.json").read_text()
    assert json.loads(mine) == {"lr": 0.1, "token": "***"}
    (tmp_path / "config-1.json").write_text(json.dumps({"lr": 0.2, "rank": 0}))
    (tmp_path / "config-x.json").write_text("{}")  # not a pid: read last
    (tmp_path / "config-2.json").write_text("not json")  # skipped
    assert read_configs(tmp_path) == {"lr": 0.2, "rank": 0, "token": "***"}
    assert read_configs(tmp_path / "missing") == {}


def test_compare_lists_what_differs() -> None:
    a = {"lr": 0.1, "optim": {"name": "adam", "wd": 0.0}, "seed": 1}
    b = {"lr": 0.2, "optim": {"name": "adam"}, "seed": 1, "warmup": 100}
    assert record_changes(a, b, "config") == [
        {"key": "lr", "a": 0.1, "b": 0.2},
        {"key": "optim.wd", "a": 0.0, "b": None},
        {"key": "warmup", "a": None, "b": 100},
    ]
    env_a = {"git": {"commit": "aaa", "dirty": False}, "python": "3.11.7", "packages": {"x": "1"}}
    env_b = {"git": {"commit": "bbb", "dirty": False}, "python": "3.11.7", "packages": {"x": "2"}}
    assert record_changes(env_a, env_b, "environment") == [
        {"key": "git.commit", "a": "aaa", "b": "bbb"}
    ]  # the package list is not compared, the frameworks are
    s = with_repro({"id": "r"}, {"config": a, "governance": {}})  # type: ignore[typeddict-item]
    assert s["config"] == a and "environment" not in s


def test_a_cuda_build_of_torch_is_read_from_its_version_file() -> None:
    from computewatch.sources.environment import _VERSION_LINE

    text = "cuda: Optional[str] = '12.4'\nhip: Optional[str] = None\ncudnn = \"9.1.0\"\n"
    got = {k: v for k, v in _VERSION_LINE.findall(text) if v and v != "None"}
    assert got == {"cuda": "12.4", "cudnn": "9.1.0"}


def test_the_package_list_matches_importlib_metadata() -> None:
    from computewatch.sources.environment import _packages

    want = {
        str(d.metadata["Name"]).replace("_", "-").lower(): d.version
        for d in importlib.metadata.distributions()
    }
    assert _packages() == dict(sorted(want.items()))
