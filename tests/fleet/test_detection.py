"""Training detection in the agent: the node sampler over a recorded procfs tree and the package's
fake NVML with scripted GPU series, the detector's windows, verdicts, flags and families."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from computewatch.fleet.agent import Agent
from computewatch.fleet.attribution import Attributor, JobIdentity, TeamMap
from computewatch.fleet.detection import (
    MAX_SAMPLES,
    CheckAnswer,
    CheckError,
    CheckRequest,
    DetectOptions,
    TrainingDetector,
    projected_hours,
)
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.metrics.exposition import LatestSamples
from computewatch.metrics.model import MetricSample
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import ManualClock, from_preset

SLURM = "0::/system.slice/n1_slurmstepd.scope/job_7/step_0/user/task_0\n"
GIB = 2**30
INTERVAL = 5.0


def training_util(t: float) -> int:
    """A training loop's rhythm: busy at 97% with a 5 s dip to 30% every minute (data loading,
    an evaluation), what the model's periodicity and saturation features reward."""
    return 30 if t % 60 < 5 else 97


def inference_util(t: float) -> int:
    """A served model: load that follows requests, mostly between 30% and 60%."""
    return round(30 + 30 * math.sin(t / 37.0) ** 2)


class RecordingChecker:
    """An account check that answers from a table and records what it was asked."""

    def __init__(self, allow: bool = False) -> None:
        self.allow = allow
        self.asked: list[tuple[str, CheckRequest]] = []
        self.fail: CheckError | None = None

    def check(self, account: str, request: CheckRequest) -> CheckAnswer:
        self.asked.append((account, request))
        if self.fail is not None:
            raise self.fail
        return CheckAnswer(self.allow, () if self.allow else ("GPU-hour cap: 9 + 1 > 5",))


class Cluster:
    """Four fake H100s on a manual clock, four jobs in a fake /proc:

    - Slurm job 7 of account ``acme``, training on GPU 0, no model declared;
    - ``idle-job`` holding GPU 1 without using it;
    - ``declared``, a ``computewatch run --model acme-7b`` training on GPU 2;
    - ``serving`` (team ``web``), inference on GPU 3.
    """

    def __init__(self, tree: Any, tmp: Path, checker: RecordingChecker | None, **det: Any) -> None:
        self.clock = ManualClock(0.0)
        self.fake = from_preset("4xH100-SXM", clock=self.clock)
        scripts = (training_util, lambda t: 0, training_util, inference_util)
        for d, util in zip(self.fake.devices, scripts, strict=True):
            d.script("gpu_util_percent", util)
            d.script("memory_used_bytes", 60 * GIB)
        self.fake.devices[3].script("memory_used_bytes", lambda t: (20 + (t % 100) / 10) * GIB)
        tree.add(100, "train", uid=1000, cgroup=SLURM, environ={"SLURM_JOB_ACCOUNT": "acme"})
        tree.add(200, "idle", uid=1000, environ={"COMPUTEWATCH_TAGS": "job=idle-job"})
        tree.add(
            300,
            "run",
            uid=1001,
            environ={"COMPUTEWATCH_RUN_ID": "declared", "COMPUTEWATCH_MODEL": "acme-7b"},
        )
        tree.add(400, "serve", uid=1001, environ={"COMPUTEWATCH_TAGS": "job=serving,team=web"})
        for d, pid in zip(self.fake.devices, (100, 200, 300, 400), strict=True):
            d.add_process(pid, 40 * GIB)
        names = {1000: "alice", 1001: "bob"}
        att = Attributor(
            str(tree.root), TeamMap(), user_name=lambda u: names.get(u, str(u)), pod_logs_root=None
        )
        options = NodeOptions(node="n1", procfs_root=str(tree.root), filesystems=())
        self.node = NodeSampler(options, att, clock=self.clock)
        self.node.gpus = [
            NvidiaSource(
                self.fake, pids=self.node.pids_view, all_gpus=True, procfs_root=str(tree.root)
            )
        ]
        opts = {"every": 60.0, "min_seconds": 600.0, "window": 3600.0, **det}
        self.checker = checker
        self.said: list[str] = []
        self.detector = TrainingDetector(
            DetectOptions(**opts),
            "n1",
            checker=checker,
            background=False,
            say=self.said.append,
        )
        self.latest = LatestSamples()
        self.agent = Agent(
            self.node, [self.latest], INTERVAL, wall=self.clock, detector=self.detector
        )

    def run(self, seconds: float) -> list[MetricSample]:
        samples: list[MetricSample] = []
        for _ in range(round(seconds / INTERVAL)):
            self.clock.advance(INTERVAL)
            samples = self.agent.tick()
        return samples


@pytest.fixture
def cluster(proc_tree: Any, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(proc_tree, tmp_path, RecordingChecker())
    yield c
    c.detector.close()
    c.node.close()


def value(samples: list[MetricSample], name: str, **labels: str) -> float:
    hits = [
        s for s in samples if s.name == name and all(s.label(k) == v for k, v in labels.items())
    ]
    assert len(hits) == 1, f"{name} {labels}: {hits}"
    return hits[0].value


def names_of(samples: list[MetricSample]) -> set[str]:
    return {s.name for s in samples}


def test_training_is_flagged_idle_is_other_declared_is_not_undeclared(cluster: Cluster) -> None:
    early = cluster.run(590)  # under detect_min_seconds: nothing classified yet
    assert "computewatch_job_training_probability" not in names_of(early)
    assert cluster.detector.rounds >= 9  # rounds ran, with no job old enough
    s = cluster.run(60)
    r = cluster.detector.results()
    assert r["7"].label == "training" and r["7"].undeclared
    assert r["idle-job"].label == "other" and not r["idle-job"].undeclared
    assert r["declared"].label == "training" and not r["declared"].undeclared
    assert r["serving"].label == "inference"
    job7 = {"job": "7", "node": "n1", "user": "alice"}
    assert value(s, "computewatch_job_training_probability", **job7) >= 0.5
    assert value(s, "computewatch_job_detected_training", **job7) == 1
    assert value(s, "computewatch_job_undeclared_training", **job7) == 1
    assert value(s, "computewatch_job_cap_breach", account="acme", **job7) == 1
    assert value(s, "computewatch_job_detected_training", job="declared") == 1
    assert value(s, "computewatch_job_undeclared_training", job="declared") == 0
    assert value(s, "computewatch_job_detected_training", job="idle-job") == 0
    assert value(s, "computewatch_job_undeclared_training", job="serving") == 0
    p_idle = value(s, "computewatch_job_training_probability", job="idle-job")
    assert 0 <= p_idle <= 1
    # Only the undeclared training job's account was checked: its GPU, its hours so far.
    assert cluster.checker is not None
    accounts = {a for a, _ in cluster.checker.asked}
    assert accounts == {"acme"}
    req = cluster.checker.asked[-1][1]
    assert req.gpus == 1 and req.gpu_model == "NVIDIA H100 80GB HBM3"
    assert req.hours == pytest.approx(600 / 3600, abs=1e-3)  # the round at 605 s: seen from 5 s
    # The FLOP estimate of the window: H100 bf16 dense peak x busy GPU-seconds x 35%.
    flop = r["7"].flop
    assert flop is not None and 1e17 < flop < 1e18
    assert "util_" in r["7"].evidence
    # The agent's log says it once per job, with the account's reason.
    flagged = [t for t in cluster.said if "job 7 " in t]
    assert len(flagged) == 2, cluster.said
    assert "declares no model" in flagged[0] and "p_training" in flagged[0]
    assert "account acme denies 1 GPU(s)" in flagged[1] and "GPU-hour cap" in flagged[1]
    assert not any("declared" in t and "job declared" in t for t in cluster.said)
    # The /metrics sink saw the same samples (the tick added them before the sinks).
    exported = cluster.latest.get()[1]
    assert value(list(exported), "computewatch_job_undeclared_training", job="7") == 1


def test_an_allowed_account_exports_no_breach_and_rechecks_each_round(
    proc_tree: Any, tmp_path: Path
) -> None:
    c = Cluster(proc_tree, tmp_path, RecordingChecker(allow=True))
    try:
        s = c.run(720)
        assert value(s, "computewatch_job_cap_breach", job="7", account="acme") == 0
        assert c.checker is not None
        n = len(c.checker.asked)
        assert 2 <= n <= 3  # rounds at 600 (+/-), 660, 720: never more than one per round
        c.run(60)
        assert len(c.checker.asked) == n + 1
        assert c.checker.asked[-1][1].hours > c.checker.asked[0][1].hours
    finally:
        c.detector.close()
        c.node.close()


def test_accounts_mapping_from_team_or_user(proc_tree: Any, tmp_path: Path) -> None:
    """No Slurm account: the [agent] accounts table maps the team, else the user."""
    c = Cluster(proc_tree, tmp_path, RecordingChecker(), accounts={"bob": "bobs-lab"})
    try:
        # The declared job's process becomes undeclared training of user bob.
        proc_tree.exit(300)
        proc_tree.add(301, "run", uid=1001, environ={"COMPUTEWATCH_TAGS": "job=sneaky"}, start=200)
        c.fake.devices[2].remove_process(300).add_process(301, 40 * GIB)
        c.run(660)
        assert c.checker is not None
        assert {a for a, _ in c.checker.asked} == {"acme", "bobs-lab"}
        assert c.detector.results()["sneaky"].account == "bobs-lab"
    finally:
        c.detector.close()
        c.node.close()


def test_no_checker_no_breach_family(proc_tree: Any, tmp_path: Path) -> None:
    c = Cluster(proc_tree, tmp_path, None)
    try:
        s = c.run(660)
        assert value(s, "computewatch_job_undeclared_training", job="7") == 1
        assert "computewatch_job_cap_breach" not in names_of(s)
    finally:
        c.detector.close()
        c.node.close()


def test_a_failing_check_keeps_the_last_answer_and_says_so_once(cluster: Cluster) -> None:
    cluster.run(660)
    assert cluster.checker is not None
    cluster.checker.fail = CheckError("cannot reach the server at http://x: refused")
    s = cluster.run(300)
    assert value(s, "computewatch_job_cap_breach", job="7", account="acme") == 1  # last answer
    notes = [t for t in cluster.said if "account check failed" in t]
    assert len(notes) == 1 and "refused" in notes[0]
    assert cluster.agent.ticks == round(960 / INTERVAL)


def test_window_and_memory_are_bounded(cluster: Cluster) -> None:
    cluster.detector.options = DetectOptions(every=60, min_seconds=60, window=600)
    cluster.run(1800)
    # 4 jobs x 1 GPU x (600 s / 5 s + 1) samples at most
    assert cluster.detector.samples_kept() <= 4 * (600 / INTERVAL + 1)
    assert MAX_SAMPLES == 3600


def test_a_short_interval_is_thinned_to_the_sample_bound(proc_tree: Any, tmp_path: Path) -> None:
    c = Cluster(proc_tree, tmp_path, None, window=36.0, min_seconds=10.0, every=5.0)
    try:
        for _ in range(1000):  # 0.005 s ticks: 5 s of data, one kept per 0.01 s
            c.clock.advance(0.005)
            c.agent.tick()
        kept = c.detector.samples_kept()
        assert 4 * 300 <= kept <= 4 * (5 / (36.0 / MAX_SAMPLES) + 2)
    finally:
        c.detector.close()
        c.node.close()


def test_ended_jobs_are_forgotten(cluster: Cluster) -> None:
    cluster.run(660)
    assert "idle-job" in cluster.detector.results()
    assert cluster.node.options.job_expiry_seconds == 300
    # The idle job ends: after the node's expiry it is no longer exported, nor classified.
    cluster.fake.devices[1].remove_process(200)
    proc = Path(cluster.node.options.procfs_root)
    (proc / "200" / "stat").write_text("")
    s = cluster.run(400)
    assert "idle-job" not in cluster.detector.results()
    assert not [x for x in s if x.label("job") == "idle-job"]


def test_background_rounds_do_not_hold_the_tick(proc_tree: Any, tmp_path: Path) -> None:
    c = Cluster(proc_tree, tmp_path, RecordingChecker())
    c.detector.background = True
    try:
        c.run(600)
        assert c.detector.wait_idle(60)
        s = c.run(60)
        assert c.detector.wait_idle(60)
        s = c.run(5)
        assert value(s, "computewatch_job_undeclared_training", job="7") == 1
        assert c.detector.rounds >= 1
        assert value(s, "computewatch_agent_detection_duration_seconds", node="n1") > 0
    finally:
        c.detector.close()
        c.node.close()


def test_projected_hours() -> None:
    ident = JobIdentity("7", "slurm", "alice", "")
    assert projected_hours(ident, 7200, 1.0) == (2.0, "elapsed 2.00 h × 1")
    assert projected_hours(ident, 3600, 3.0)[0] == 3.0
    assert projected_hours(ident, 0, 1.0)[0] == pytest.approx(1 / 3600)
    assert projected_hours(ident, 1e9, 1.0)[0] == 8784.0
    limited = JobIdentity("7", "slurm", "alice", "", time_limit_seconds=48 * 3600)
    assert projected_hours(limited, 60, 1.0) == (48.0, "the Slurm time limit")


def test_attribution_keeps_the_declaration_and_the_slurm_time_limit(proc_tree: Any) -> None:
    proc_tree.add(
        500,
        uid=1000,
        cgroup=SLURM,
        environ={
            "COMPUTEWATCH_MODEL": "acme-7b",
            "COMPUTEWATCH_STAGE": "finetune",
            "SLURM_JOB_START_TIME": "1790000000",
            "SLURM_JOB_END_TIME": "1790172800",
            "HF_TOKEN": "hf_secret",
        },
    )
    proc_tree.add(501, uid=1000, environ={"SLURM_JOB_END_TIME": "soon", "COMPUTEWATCH_TAGS": "a=b"})
    att = Attributor(str(proc_tree.root), user_name=lambda u: "alice", pod_logs_root=None)
    ident = att.identify(500, 100, 1000)
    assert (ident.model, ident.stage, ident.time_limit_seconds) == ("acme-7b", "finetune", 172800)
    other = att.identify(501, 100, 1000)
    assert (other.model, other.stage, other.time_limit_seconds) == ("", "", None)
    assert "hf_secret" not in repr(ident)
