"""The run's cgroup against a fake cgroup-v2 tree under tmp_path: interface files the test
writes, and a fake procfs whose ``self/cgroup`` says where we are. The kernel's side (the files
of a new cgroup, rmdir of one with only interface files) is covered for real by
tests/faults/test_cgroup_e2e.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewatch.readings import Kind
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.cgroup import (
    CgroupCpuSource,
    RunCgroup,
    open_run_cgroup,
    own_cgroup,
    read_cpu_stat,
)

STAT = "usage_usec {u}\nuser_usec {us}\nsystem_usec {sy}\nnice_usec 0\n"


def _cgroup(d: Path, *, subtree: str = "", usage: int = 0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.procs").write_text("")
    (d / "cgroup.subtree_control").write_text(subtree + "\n" if subtree else "")
    (d / "cpu.stat").write_text(STAT.format(u=usage, us=usage, sy=0))
    return d


def _tree(tmp_path: Path, own: str = "/job", *, subtree: str = "") -> tuple[Path, Path]:
    """A cgroup-v2 root with our cgroup at ``own``, and a procfs that puts us there."""
    root = tmp_path / "cg"
    _cgroup(root, subtree="cpu memory")
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    _cgroup(root / own.lstrip("/"), subtree=subtree)
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(f"0::{own}\n")
    return root, tmp_path / "proc"


def _prepare_child(root: Path, own: str, run_id: str) -> Path:
    # The kernel fills a new cgroup with its interface files; the fake one is made beforehand.
    return _cgroup(root / own.lstrip("/") / f"computewatch-{run_id}")


def test_usable_and_delegated(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path)
    child = _prepare_child(root, "/job", "r1")
    rc = open_run_cgroup("r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(rc, RunCgroup), rc
    assert rc.path == child and rc.home == root / "job"


def test_our_cgroup_from_procfs(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("4:memory:/x\n1:cpu:/\n0::/a/b.scope\n")
    assert own_cgroup(str(proc), 42) == "/a/b.scope"
    assert own_cgroup(str(proc), 43) is None


def test_not_v2_no_unified_line(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path)
    (proc / "self" / "cgroup").write_text("4:memory:/x\n1:cpu,cpuacct:/\n")  # v1 only
    why = open_run_cgroup("r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "no cgroup v2" in why


def test_not_v2_mounted_there(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path)
    (root / "cgroup.controllers").unlink()  # a v1 tmpfs, as /sys/fs/cgroup on a hybrid host
    why = open_run_cgroup("r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "no cgroup v2 mounted" in why


def test_our_cgroup_outside_the_mount(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path)
    (proc / "self" / "cgroup").write_text("0::/elsewhere\n")
    why = open_run_cgroup("r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "not under" in why


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory we cannot write: a read-only bind mount as root (CI), chmod otherwise."""
    d = tmp_path / "ro"
    d.mkdir()
    yield d
    if os.geteuid() == 0:
        subprocess.run(["umount", str(d)], check=False)
    d.chmod(0o755)


def _make_read_only(d: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(d), str(d)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(d)], check=True)
    else:
        for p in [d, *d.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)


def test_not_writable(tmp_path: Path, read_only: Path) -> None:
    root, proc = _tree(read_only)
    _make_read_only(read_only)
    why = open_run_cgroup("r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "not writable" in why, why
    assert not (root / "job" / "computewatch-r1").exists()


def test_no_internal_processes(tmp_path: Path) -> None:
    # Our cgroup enables controllers for its children: it may not take processes itself (the
    # kernel's "no internal process" rule), so the job goes into the new leaf, which enables
    # none, and neither cgroup's subtree_control is written.
    root, proc = _tree(tmp_path, "/svc/job", subtree="cpu memory")
    child = _prepare_child(root, "/svc/job", "r2")
    rc = open_run_cgroup("r2", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(rc, RunCgroup), rc
    assert rc.move(4321) is None
    assert (child / "cgroup.procs").read_text() == "4321\n"
    assert (root / "svc" / "job" / "cgroup.procs").read_text() == ""
    assert (root / "svc" / "job" / "cgroup.subtree_control").read_text() == "cpu memory\n"
    assert (child / "cgroup.subtree_control").read_text() == ""
    assert rc.join() is None and (child / "cgroup.procs").read_text() == f"{os.getpid()}\n"
    assert rc.leave() is None
    assert (root / "svc" / "job" / "cgroup.procs").read_text() == f"{os.getpid()}\n"


def test_cpu_stat_unreadable_is_a_reason(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path)
    (root / "job" / "cpu.stat").write_text("nice_usec 0\n")  # no usage_usec
    why = open_run_cgroup("r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "cpu.stat" in why


def test_reading_and_counting(tmp_path: Path) -> None:
    d = _cgroup(tmp_path / "run")
    (d / "cpu.stat").write_text(STAT.format(u=1_500_000, us=1_200_000, sy=300_000))
    assert read_cpu_stat(d) == {
        "usage_usec": 1_500_000,
        "user_usec": 1_200_000,
        "system_usec": 300_000,
    }
    src = CgroupCpuSource(d)
    first = {r.name: r for r in src.read()}
    assert first["run_cgroup_cpu_seconds_total"].value == 1.5
    assert first["run_cgroup_cpu_user_seconds_total"].value == 1.2
    assert first["run_cgroup_cpu_system_seconds_total"].value == 0.3
    assert all(r.kind is Kind.COUNTER for r in first.values())
    (d / "cpu.stat").write_text(STAT.format(u=4_000_000, us=3_000_000, sy=1_000_000))
    again = {r.name: r.value for r in src.read()}
    assert again["run_cgroup_cpu_seconds_total"] == 4.0
    (d / "cpu.stat").unlink()  # the cgroup removed at the end: the last figures stand
    assert {r.name: r.value for r in src.read()} == again


def test_source_unavailable_without_cpu_stat(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(SourceUnavailable, match=r"cpu\.stat"):
        CgroupCpuSource(d)


def test_removal_left_when_processes_remain(tmp_path: Path) -> None:
    d = _cgroup(tmp_path / "cg" / "computewatch-r3")
    (d / "cgroup.procs").write_text("101\n102\n")
    rc = RunCgroup(d, tmp_path / "cg")
    note = rc.remove()
    assert note is not None and "2 process(es)" in note and "101 102" in note
    assert d.is_dir()


def test_removal_failures_are_reasons(tmp_path: Path) -> None:
    # A real cgroup's directory holds only interface files, which rmdir(2) ignores (the real
    # removal is in tests/faults/test_cgroup_e2e.py); a plain directory with files is not empty.
    d = _cgroup(tmp_path / "cg" / "computewatch-r4")
    rc = RunCgroup(d, tmp_path / "cg")
    assert rc.pids() == []
    note = rc.remove()
    assert note is not None and "not removed" in note and d.is_dir()
    for f in list(d.iterdir()):
        f.unlink()
    d.rmdir()
    assert rc.remove() is None  # already gone
