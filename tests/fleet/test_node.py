"""The node sampler over a recorded procfs tree and the package's fake NVML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from computewatch.fleet.attribution import Attributor, TeamMap
from computewatch.fleet.node import UNSETTLED_TICKS, NodeOptions, NodeSampler
from computewatch.metrics.exposition import render
from computewatch.metrics.model import MetricSample
from computewatch.sources.host import HostSource
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import ManualClock, from_preset

SLURM = "0::/system.slice/n1_slurmstepd.scope/job_7/step_0/user/task_0\n"


def find(samples: list[MetricSample], name: str, **labels: str) -> list[MetricSample]:
    return [
        s for s in samples if s.name == name and all(s.label(k) == v for k, v in labels.items())
    ]


def value(samples: list[MetricSample], name: str, **labels: str) -> float:
    hits = find(samples, name, **labels)
    assert len(hits) == 1, f"{name} {labels}: {hits}"
    return hits[0].value


def write_host(root: Path, user: int, idle: int) -> None:
    (root / "stat").write_text(
        f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {user} 0 0 {idle} 0 0 0 0 0 0\nintr 0\n"
    )
    (root / "meminfo").write_text(
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n"
        "SwapTotal:       200 kB\nSwapFree:        150 kB\n"
    )


class Node:
    """A sampler over ``proc_tree`` with two fake H100s sharing the test's manual clock."""

    def __init__(self, tree: Any, tmp: Path, **opts: Any) -> None:
        self.tree = tree
        self.clock = ManualClock(0.0)
        self.fake = from_preset("2xH100-SXM", clock=self.clock)
        self.fake.devices[1].script("gpu_util_percent", 0)
        write_host(tree.root, 0, 0)
        host = HostSource(str(tree.root), str(tmp / "sys"), str(tmp / "cg"), pid=1)
        options = NodeOptions(node="n1", procfs_root=str(tree.root), filesystems=(), **opts)
        teams = TeamMap(users={"alice": "vision"})
        names = {0: "root", 1000: "alice", 1001: "bob"}
        att = Attributor(str(tree.root), teams, user_name=lambda u: names.get(u, str(u)))
        self.node = NodeSampler(options, att, host=host, clock=self.clock)
        self.node.gpus = [
            NvidiaSource(
                self.fake, pids=self.node.pids_view, all_gpus=True, procfs_root=str(tree.root)
            )
        ]
        self.uuid0 = self.fake.devices[0].uuid
        self.uuid1 = self.fake.devices[1].uuid

    def tick(self, advance: float = 0.0) -> list[MetricSample]:
        if advance:
            self.clock.advance(advance)
        return self.node.sample()


@pytest.fixture
def node(proc_tree: Any, tmp_path: Path) -> Any:
    n = Node(proc_tree, tmp_path)
    yield n
    n.node.close()


def ticks(seconds: float) -> int:
    import os

    return round(seconds * os.sysconf("SC_CLK_TCK"))


def test_jobs_cpu_memory_gpu_and_hosts(node: Node) -> None:
    t = node.tree
    t.add(
        100, "train", uid=1000, cgroup=SLURM, utime=ticks(50)
    )  # CPU before the agent: not counted
    t.add(101, "worker", ppid=100, uid=1000, cgroup=SLURM)
    t.add(200, "nb", uid=1000, environ={"COMPUTEWATCH_TAGS": "team=nlp"})
    t.add(300, "sshd", uid=0)  # idle daemon: aggregated, never exported
    t.add(2, "kthreadd", ppid=0, uid=0, flags=0x00200000)
    node.fake.devices[0].add_process(100, 10 << 30, sm_util=80)
    node.fake.devices[1].add_process(200, 2 << 30, sm_util=0)
    first = node.tick()
    assert not find(first, "computewatch_job_info", user="root")
    t.set_cpu(100, ticks(52))
    t.set_cpu(101, ticks(1), ppid=100, name="worker")
    t.set_cpu(200, ticks(1), name="nb")
    write_host(t.root, ticks(4), ticks(16))
    s = node.tick(2.0)
    job = {"job": "7", "node": "n1"}
    assert value(s, "computewatch_job_cpu_seconds_total", **job) == pytest.approx(3.0)
    assert value(s, "computewatch_job_processes", **job) == 2
    assert value(s, "computewatch_job_memory_bytes", **job) == 2 * 256 * 4096
    assert value(s, "computewatch_job_gpu_seconds_total", **job) == pytest.approx(2.0)
    util0 = value(s, "computewatch_gpu_utilization_ratio", gpu=node.uuid0)
    assert value(s, "computewatch_job_gpu_busy_seconds_total", **job) == pytest.approx(2 * util0)
    assert value(s, "computewatch_job_gpu_idle_seconds_total", **job) == 0
    assert value(s, "computewatch_job_gpu_memory_used_bytes", **job) == 10 << 30
    assert value(s, "computewatch_job_info", **job) == 1
    info = find(s, "computewatch_job_info", **job)[0]
    assert (info.label("kind"), info.label("user"), info.label("team")) == (
        "slurm",
        "alice",
        "vision",
    )
    nlp = {"job": "process:alice", "team": "nlp"}
    assert value(s, "computewatch_job_cpu_seconds_total", **nlp) == pytest.approx(1.0)
    assert value(s, "computewatch_job_gpu_idle_seconds_total", **nlp) == pytest.approx(2.0)
    assert not find(s, "computewatch_job_info", user="root")  # sshd: below the threshold
    assert value(s, "computewatch_gpu_allocated", gpu=node.uuid0) == 1
    gpu = find(s, "computewatch_gpu_memory_total_bytes", gpu=node.uuid0)[0]
    assert gpu.value == node.fake.devices[0].memory_total
    assert (gpu.label("gpu_index"), gpu.label("gpu_model"), gpu.label("simulated")) == (
        "0",
        "NVIDIA H100 80GB HBM3",
        "true",
    )
    # Energy: the whole of GPU 0's energy over the tick (one holder) plus modeled CPU energy
    e0 = value(s, "computewatch_gpu_energy_joules_total", gpu=node.uuid0)
    e0_first = value(first, "computewatch_gpu_energy_joules_total", gpu=node.uuid0)
    cpu_j = node.node.cpu_power_model.watts(0.2) * 2.0 * (3.0 / 4.0)
    assert value(s, "computewatch_job_energy_joules_total", **job) == pytest.approx(
        e0 - e0_first + cpu_j
    )
    assert value(s, "computewatch_host_cpu_utilization_ratio") == pytest.approx(0.2)
    assert value(s, "computewatch_host_memory_used_bytes") == 600 * 1024
    assert value(s, "computewatch_host_swap_used_bytes") == 50 * 1024
    assert not find(s, "computewatch_process_cpu_seconds_total")  # no per-PID series by default
    assert node.node.processes == 4  # kthreadd skipped


def test_exits_keep_counters_once_and_jobs_expire(proc_tree: Any, tmp_path: Path) -> None:
    n = Node(proc_tree, tmp_path, job_expiry_seconds=30.0)
    t = proc_tree
    t.add(100, "train", uid=1000, cgroup=SLURM)
    t.add(101, "worker", ppid=100, uid=1000, cgroup=SLURM)
    t.add(500, "helper", ppid=100, uid=1000, environ={"COMPUTEWATCH_TAGS": "team=x"})
    n.tick()
    t.set_cpu(100, ticks(1))
    t.set_cpu(101, ticks(2), ppid=100)
    t.set_cpu(500, ticks(3), ppid=100)
    s = n.tick(1.0)
    assert value(s, "computewatch_job_cpu_seconds_total", job="7") == pytest.approx(3.0)
    # 101 (same job) and 500 (another job) are reaped by 100: both land in its cutime.
    t.exit(101)
    t.exit(500)
    t.set_cpu(100, ticks(1), cutime=ticks(5))
    s = n.tick(1.0)
    assert value(s, "computewatch_job_cpu_seconds_total", job="7") == pytest.approx(3.0)
    assert value(s, "computewatch_job_cpu_seconds_total", team="x") == pytest.approx(3.0)
    assert value(s, "computewatch_job_processes", team="x") == 0
    t.set_cpu(100, ticks(2), cutime=ticks(5))
    s = n.tick(1.0)
    assert value(s, "computewatch_job_cpu_seconds_total", job="7") == pytest.approx(4.0)
    s = n.tick(26.0)  # last seen alive at t=1, now t=29: still within the 30 s expiry
    assert find(s, "computewatch_job_info", team="x")
    s = n.tick(5.0)
    assert not find(s, "computewatch_job_info", team="x")
    assert find(s, "computewatch_job_info", job="7")
    n.node.close()


def test_a_process_read_in_the_middle_of_its_exec_is_adopted_once_it_is_done(
    proc_tree: Any, tmp_path: Path
) -> None:
    """Read mid-exec, a process's command line and environment are empty; its job, found once
    for its life, would be the user's catch-all. It waits (at most UNSETTLED_TICKS ticks) and
    is attributed by its own environment, with all its CPU time."""
    n = Node(proc_tree, tmp_path)
    t = proc_tree
    n.tick()
    t.add(200, "python", uid=1000)
    (t.root / "200" / "cmdline").write_bytes(b"")  # the exec under way
    t.set_cpu(200, ticks(1))
    s = n.tick(1.0)
    assert not find(s, "computewatch_job_info", job="process:alice")
    assert not find(s, "computewatch_job_info", job="run-abc")
    (t.root / "200" / "cmdline").write_bytes(b"python\0train.py\0")
    (t.root / "200" / "environ").write_bytes(b"COMPUTEWATCH_RUN_ID=run-abc\0")
    t.set_cpu(200, ticks(2))
    s = n.tick(1.0)
    assert value(s, "computewatch_job_cpu_seconds_total", job="run-abc") == pytest.approx(2.0)
    assert not find(s, "computewatch_job_info", job="process:alice")
    # A process whose command line stays empty (an exec with no arguments) is adopted after
    # the wait, as it is.
    t.add(201, "odd", uid=1000)
    (t.root / "201" / "cmdline").write_bytes(b"")
    t.set_cpu(201, ticks(1), name="odd")
    for _ in range(UNSETTLED_TICKS):
        s = n.tick(1.0)
        assert not find(s, "computewatch_job_processes", job="process:alice")
    s = n.tick(1.0)
    assert value(s, "computewatch_job_cpu_seconds_total", job="process:alice") == pytest.approx(1.0)
    n.node.close()


def test_identities_with_the_same_series_labels_are_one_job(proc_tree: Any, tmp_path: Path) -> None:
    """Processes whose identities differ only off the series labels (a ``project`` tag, a tag
    at all) are one job: one series each, holding all their counters. As two jobs they exported
    each series twice and the exposition kept the first, so a GPU job's GPU-seconds could read 0
    for as long as a same-labelled job without a GPU was there (its 300 s expiry included)."""
    n = Node(proc_tree, tmp_path)
    t = proc_tree
    t.add(100, "notebook", uid=1000, environ={"COMPUTEWATCH_TAGS": "team=nlp,project=llm"})
    t.add(200, "train", uid=1000, environ={"COMPUTEWATCH_TAGS": "team=nlp"})
    t.add(300, "bash", uid=1001)  # bob: untagged, idle, first; then a tagged process of his
    t.add(400, "eval", uid=1001, environ={"COMPUTEWATCH_TAGS": "project=bench"})
    n.fake.devices[0].add_process(200, 1 << 30)
    n.tick()
    t.exit(100)  # the GPU job's counters stay its own once the other process has ended
    s = n.tick(1.0)
    nlp = {"job": "process:alice", "team": "nlp"}
    assert value(s, "computewatch_job_gpu_seconds_total", **nlp) == pytest.approx(1.0)
    assert value(s, "computewatch_job_processes", **nlp) == 1
    assert value(s, "computewatch_job_info", **nlp) == 1
    body = render(s)[0].decode()
    line = 'computewatch_job_gpu_seconds_total{job="process:alice",node="n1",team="nlp",'
    assert f'{line}user="alice"}} 1.0' in body.splitlines()
    # A tagged process describes the job it joins (an untagged one says nothing of it).
    bob = find(s, "computewatch_job_info", job="process:bob")
    assert len(bob) == 1 and bob[0].label("project") == "bench"
    assert value(s, "computewatch_job_processes", job="process:bob") == 2
    n.node.close()


def test_shared_gpu_split_by_sm_utilization_and_per_process_option(
    proc_tree: Any, tmp_path: Path
) -> None:
    n = Node(proc_tree, tmp_path, per_process=True)
    t = proc_tree
    t.add(100, "a", uid=1000, environ={"COMPUTEWATCH_TAGS": "job=a"})
    t.add(200, "b", uid=1001, environ={"COMPUTEWATCH_TAGS": "job=b"})
    dev = n.fake.devices[0]
    dev.add_process(100, 1 << 30, sm_util=60)
    dev.add_process(200, 3 << 30, sm_util=20)
    n.tick()
    s = n.tick(1.0)
    util = value(s, "computewatch_gpu_utilization_ratio", gpu=n.uuid0)
    busy_a = value(s, "computewatch_job_gpu_busy_seconds_total", job="a")
    busy_b = value(s, "computewatch_job_gpu_busy_seconds_total", job="b")
    assert busy_a == pytest.approx(util * 0.75)
    assert busy_b == pytest.approx(util * 0.25)
    assert value(s, "computewatch_job_gpu_seconds_total", job="a") == pytest.approx(1.0)
    assert value(s, "computewatch_job_gpu_seconds_total", job="b") == pytest.approx(1.0)
    p = find(s, "computewatch_process_gpu_memory_used_bytes", pid="200")
    assert p and p[0].value == 3 << 30 and p[0].label("job") == "b"
    assert "cmdline" not in dict(p[0].labels)  # command lines only when enabled
    n.node.close()


def test_many_processes_come_and_go_without_leaking_state(proc_tree: Any, tmp_path: Path) -> None:
    n = Node(proc_tree, tmp_path, job_expiry_seconds=0.0)
    for i in range(50):
        pid = 1000 + i
        proc_tree.add(pid, uid=1000, environ={"COMPUTEWATCH_TAGS": f"job=j{i}"})
        n.tick(1.0)
        proc_tree.exit(pid)
        n.tick(1.0)
    n.tick(1.0)
    assert n.node.processes == 0
    assert n.node.jobs == 0
    assert n.node.attributor.cached == 0
    n.node.close()
