"""Job, user and team attribution over recorded procfs trees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from computewatch.fleet.attribution import (
    Attributor,
    CgroupJob,
    TeamMap,
    parse_cgroup,
    parse_environ,
    parse_tags,
)

POD = "6f1c7a3e-2b4d-4e8f-9a0b-1c2d3e4f5a6b"
CID = "a" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # Slurm, cgroup v1 (task/cgroup plugin): job in some controllers only
            "12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n11:cpuset:/\n",
            CgroupJob("slurm", job_id="4242", uid=1000),
        ),
        (  # Slurm with several slurmd per node
            "4:cpuacct,cpu:/slurm_node7/uid_501/job_17/step_batch/task_0\n",
            CgroupJob("slurm", job_id="17", uid=501),
        ),
        (  # Slurm, cgroup v2 (22.05+)
            "0::/system.slice/node1_slurmstepd.scope/job_99/step_0/user/task_0\n",
            CgroupJob("slurm", job_id="99"),
        ),
        (  # Kubernetes, systemd driver, burstable pod, containerd
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            + POD.replace("-", "_")
            + f".slice/cri-containerd-{CID}.scope\n",
            CgroupJob("k8s", pod_uid=POD, container=CID),
        ),
        (  # Kubernetes, systemd driver, guaranteed pod (no QoS part), CRI-O
            f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope\n",
            CgroupJob("k8s", pod_uid=POD, container=CID),
        ),
        (  # Kubernetes, cgroupfs driver
            f"0::/kubepods/burstable/pod{POD}/{CID}\n",
            CgroupJob("k8s", pod_uid=POD, container=CID),
        ),
        (f"0::/kubepods/besteffort/pod{POD}\n", CgroupJob("k8s", pod_uid=POD)),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/\n", None),
        ("", None),
    ],
)
def test_parse_cgroup(text: str, expected: CgroupJob | None) -> None:
    assert parse_cgroup(text) == expected


def test_parse_tags_keeps_wellformed_entries() -> None:
    assert parse_tags("team=nlp, project = llm ,bad, =x,9no=1,empty=") == {
        "team": "nlp",
        "project": "llm",
        "empty": "",
    }
    assert parse_tags("") == {}
    assert len(parse_tags("k=" + "v" * 1000)["k"]) == 128


def test_parse_environ_keeps_only_the_attribution_variables() -> None:
    raw = b"PATH=/bin\0AWS_SECRET_ACCESS_KEY=xyz\0SLURM_JOB_ID=12\0COMPUTEWATCH_TAGS=team=a\0"
    assert parse_environ(raw) == {"SLURM_JOB_ID": "12", "COMPUTEWATCH_TAGS": "team=a"}


def names(uid: int) -> str:
    return {0: "root", 1000: "alice", 1001: "bob"}.get(uid, str(uid))


def attributor(root: Path, teams: TeamMap | None = None, **kw: Any) -> Attributor:
    return Attributor(str(root), teams, user_name=names, **kw)


def test_slurm_job_from_cgroup_with_account_team(proc_tree: Any) -> None:
    proc_tree.add(
        10,
        uid=1000,
        cgroup="0::/system.slice/n1_slurmstepd.scope/job_77/step_0/user/task_0\n",
        environ={"SLURM_JOB_ID": "77", "SLURM_JOB_ACCOUNT": "proj_llm", "HOME": "/home/a"},
    )
    teams = TeamMap(users={"alice": "vision"}, accounts={"proj_llm": "nlp"})
    ident = attributor(proc_tree.root, teams).identify(10, 100, 1000)
    assert (ident.job, ident.kind, ident.user, ident.team) == ("77", "slurm", "alice", "nlp")
    assert ident.slurm_account == "proj_llm"
    info = dict(ident.info_labels("n1"))
    assert info["kind"] == "slurm" and info["slurm_account"] == "proj_llm" and info["node"] == "n1"


def test_slurm_job_from_environment_when_cgroup_says_nothing(proc_tree: Any) -> None:
    proc_tree.add(11, uid=1001, environ={"SLURM_JOB_ID": "5"})
    ident = attributor(proc_tree.root, TeamMap(users={"bob": "infra"})).identify(11, 100, 1001)
    assert (ident.job, ident.kind, ident.user, ident.team) == ("5", "slurm", "bob", "infra")


def test_k8s_pod_namespace_from_kubelet_log_dirs(proc_tree: Any, tmp_path: Path) -> None:
    logs = tmp_path / "pods"
    (logs / f"ml-train_bert-0_{POD}").mkdir(parents=True)
    (logs / "other_x_00000000-0000-0000-0000-000000000000").mkdir()
    slice_ = f"kubepods-besteffort-pod{POD.replace('-', '_')}.slice"
    cg = f"0::/kubepods.slice/kubepods-besteffort.slice/{slice_}/cri-containerd-{CID}.scope\n"
    proc_tree.add(12, uid=0, cgroup=cg)
    proc_tree.add(
        13, uid=0, cgroup=cg.replace(POD.replace("-", "_"), "1" * 8 + "_1111" * 3 + "_" + "1" * 12)
    )
    att = attributor(
        proc_tree.root, TeamMap(namespaces={"ml-train": "nlp"}), pod_logs_root=str(logs)
    )
    ident = att.identify(12, 100, 0)
    assert (ident.job, ident.kind, ident.namespace, ident.pod, ident.team) == (
        "ml-train/bert-0",
        "k8s",
        "ml-train",
        "bert-0",
        "nlp",
    )
    unknown = att.identify(13, 100, 0)  # a pod whose log directory is not there
    assert unknown.job.startswith("pod:11111111-1111") and unknown.team == ""


def test_computewatch_run_and_tags(proc_tree: Any) -> None:
    proc_tree.add(
        20, uid=1000, environ={"COMPUTEWATCH_RUN_ID": "abc123", "COMPUTEWATCH_TAGS": "project=llm"}
    )
    proc_tree.add(21, uid=1000, environ={"COMPUTEWATCH_TAGS": "team=nlp,job=sweep-3"})
    proc_tree.add(22, uid=1000, environ={"COMPUTEWATCH_TAGS": "team=speech"})
    att = attributor(proc_tree.root, TeamMap(users={"alice": "vision"}))
    run = att.identify(20, 100, 1000)
    assert (run.job, run.kind, run.team, run.project) == ("abc123", "computewatch", "vision", "llm")
    tagged = att.identify(21, 100, 1000)
    assert (tagged.job, tagged.kind, tagged.team, tagged.tagged) == (
        "sweep-3",
        "process",
        "nlp",
        True,
    )
    team_only = att.identify(22, 100, 1000)
    assert (team_only.job, team_only.team) == ("process:alice", "speech")


def test_unreadable_environment_degrades_to_cgroup_and_user(proc_tree: Any) -> None:
    proc_tree.add(30, uid=1001, environ_readable=False)
    att = attributor(proc_tree.root, TeamMap(users={"bob": "infra"}, default="unassigned"))
    ident = att.identify(30, 100, 1001)
    assert (ident.job, ident.kind, ident.team) == ("process:bob", "process", "infra")
    assert att.environ_denied == 1
    proc_tree.add(31, uid=4242)
    other = att.identify(31, 100, 4242)
    assert (other.user, other.team) == ("4242", "unassigned")


def test_identity_cached_per_pid_and_start_time(proc_tree: Any) -> None:
    proc_tree.add(40, uid=1000, environ={"COMPUTEWATCH_TAGS": "team=a"})
    att = attributor(proc_tree.root)
    first = att.identify(40, 100, 1000)
    (proc_tree.root / "40" / "environ").write_bytes(b"COMPUTEWATCH_TAGS=team=b\0")
    assert att.identify(40, 100, 1000) is first  # environment read once per process
    assert att.identify(40, 555, 1000).team == "b"  # same PID, new start time: a new process
    att.forget(40, 100)
    att.forget(40, 555)
    assert att.cached == 0


def test_read_environ_off_reads_no_environment(proc_tree: Any) -> None:
    proc_tree.add(50, uid=1000, environ={"COMPUTEWATCH_TAGS": "team=nlp"})
    att = attributor(proc_tree.root, read_environ=False)
    assert att.identify(50, 100, 1000).team == ""
    assert att.environ_read == 0
