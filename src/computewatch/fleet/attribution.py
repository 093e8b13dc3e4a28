"""Which job, user and team a process belongs to (docs/agent.md, "Attribution").

A process's job comes, in this order, from:

1. its cgroup path: a Slurm job (``/slurm/uid_N/job_ID/...`` under cgroup v1,
   ``.../slurmstepd.scope/job_ID/...`` under v2) or a Kubernetes pod
   (``kubepods-<qos>-pod<UID>.slice/cri-containerd-<ID>.scope`` with the systemd driver,
   ``/kubepods/<qos>/pod<UID>/<ID>`` with cgroupfs);
2. its environment, when readable: ``SLURM_JOB_ID`` (with ``SLURM_JOB_ACCOUNT`` and the
   job's ``SLURM_JOB_START_TIME``/``SLURM_JOB_END_TIME``, its time limit), then
   ``COMPUTEWATCH_RUN_ID`` (a ``computewatch run``), then a ``job`` tag in ``COMPUTEWATCH_TAGS``;
3. otherwise the process is part of the catch-all job ``process:<user>`` of its owner, so the
   number of series grows with the users of a node, not with its processes.

The team is, first match wins: a ``team`` tag in ``COMPUTEWATCH_TAGS``; the Slurm account's
team; the namespace's team; the user's team; else ``default_team`` (``""``: unknown).

A ``computewatch run --model NAME [--stage S]`` declares what it trains in its command's
environment (``COMPUTEWATCH_MODEL``, ``COMPUTEWATCH_STAGE``): the identity keeps them, so that
the agent's training detection (computewatch.fleet.detection) tells declared from undeclared.

The environment is read once per process (keyed by PID and start time, so a reused PID is a
new process) and only the variables above are kept: no other value leaves this module.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from computewatch.escape import decode_text
from computewatch.readings import Labels
from computewatch.sampling.channel import ENV_MODEL, ENV_RUN_ID, ENV_STAGE
from computewatch.sources.procfs import environ_values, read_environ, read_file

__all__ = [
    "Attributor",
    "CgroupJob",
    "JobIdentity",
    "TeamMap",
    "parse_cgroup",
    "parse_environ",
    "parse_tags",
]

TAGS_VAR = "COMPUTEWATCH_TAGS"
RUN_ID_VAR = ENV_RUN_ID
MODEL_VAR = ENV_MODEL  # what `computewatch run --model/--stage` set in its command's environment
STAGE_VAR = ENV_STAGE
_ENV_NAMES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_USER",
    "SLURM_JOB_START_TIME",
    "SLURM_JOB_END_TIME",
    RUN_ID_VAR,
    TAGS_VAR,
    MODEL_VAR,
    STAGE_VAR,
)
_MAX_LABEL = 128  # tag values are cut here: a label value is not a place for a document
_TAG_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")

# Slurm: cgroup v1 "/slurm[_<node>]/uid_<uid>/job_<id>/step_<s>/task_<t>" (task/cgroup plugin);
# cgroup v2 (Slurm >= 22.05) "/system.slice/<node>_slurmstepd.scope/job_<id>/step_<s>/...".
_SLURM_V1 = re.compile(r"/slurm[^/]*/uid_(\d+)/job_(\d+)(?:/|$)")
_SLURM_V2 = re.compile(r"slurmstepd\.scope/job_(\d+)(?:/|$)")
# Kubernetes: the pod UID in "kubepods[-<qos>]-pod<uid with _>.slice" (systemd cgroup driver)
# or "/kubepods/[<qos>/]pod<uid>/" (cgroupfs driver); the container ID in
# "<runtime>-<id>.scope" or as the directory under the pod.
_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_K8S_SYSTEMD = re.compile(r"kubepods(?:-[a-z]+)?-pod(" + _UUID + r")\.slice")
_K8S_CGROUPFS = re.compile(r"/kubepods(?:/[a-z]+)?/pod(" + _UUID + r")(?:/([0-9a-f]{12,64}))?")
_CONTAINER_SCOPE = re.compile(r"(?:cri-containerd|crio|docker|containerd)-([0-9a-f]{12,64})\.scope")


@dataclass(frozen=True, slots=True)
class CgroupJob:
    """What a cgroup path says: a Slurm job or a Kubernetes pod (and container)."""

    kind: str  # "slurm" or "k8s"
    job_id: str = ""  # Slurm job id
    uid: int | None = None  # the Slurm job's owner (cgroup v1 path)
    pod_uid: str = ""
    container: str = ""


def parse_cgroup(text: str) -> CgroupJob | None:
    """The job named by a ``/proc/PID/cgroup`` file (every hierarchy line is looked at: under
    cgroup v1 the job may show in some controllers only), or None for a process in no job."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "slurm" in path:
            m = _SLURM_V1.search(path)
            if m:
                return CgroupJob("slurm", job_id=m.group(2), uid=int(m.group(1)))
            m2 = _SLURM_V2.search(path)
            if m2:
                return CgroupJob("slurm", job_id=m2.group(1))
        if "kubepods" in path:
            m = _K8S_SYSTEMD.search(path)
            container = ""
            if m:
                c = _CONTAINER_SCOPE.search(path)
                container = c.group(1) if c else ""
            else:
                m = _K8S_CGROUPFS.search(path)
                if m and m.lastindex and m.lastindex >= 2 and m.group(2):
                    container = m.group(2)
            if m:
                return CgroupJob("k8s", pod_uid=m.group(1).replace("_", "-"), container=container)
    return None


def parse_tags(text: str) -> dict[str, str]:
    """``"team=nlp,project=llm"`` → ``{"team": "nlp", "project": "llm"}``. Malformed entries
    (no ``=``, a key that is not a plain identifier) are left out; values are cut to 128
    characters."""
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if sep and _TAG_KEY.match(key):
            out[key] = value.strip()[:_MAX_LABEL]
    return out


def parse_environ(raw: bytes) -> dict[str, str]:
    """The variables attribution uses, from a ``/proc/PID/environ`` image; nothing else."""
    return _kept(environ_values(raw, _ENV_NAMES))


def _kept(env: Mapping[str, str]) -> dict[str, str]:
    """Attribution's variables with each value cut to a bounded length."""
    return {k: v[: _MAX_LABEL * 8] for k, v in env.items()}


def _time_limit(env: Mapping[str, str]) -> float | None:
    """A Slurm job's time limit in seconds from its start and (projected) end time (Unix
    seconds, sbatch(1) output environment variables), or None when not both are numbers."""
    try:
        start = int(env.get("SLURM_JOB_START_TIME", ""))
        end = int(env.get("SLURM_JOB_END_TIME", ""))
    except ValueError:
        return None
    if not 0 < start < end < 1 << 40:  # Unix seconds: anything past year 36000 is not one
        return None
    return float(end - start)


@dataclass(frozen=True, slots=True)
class TeamMap:
    """The config's ``[teams]``: user, Slurm account and namespace → team."""

    users: Mapping[str, str] = field(default_factory=dict)
    accounts: Mapping[str, str] = field(default_factory=dict)
    namespaces: Mapping[str, str] = field(default_factory=dict)
    default: str = ""

    def team(self, *, tag: str | None, user: str, account: str, namespace: str) -> str:
        if tag:
            return tag
        if account and account in self.accounts:
            return self.accounts[account]
        if namespace and namespace in self.namespaces:
            return self.namespaces[namespace]
        return self.users.get(user, self.default)


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """A job as exported: ``job``, ``user``, ``team`` label the job's series; the rest goes on
    ``computewatch_job_info`` only."""

    job: str
    kind: str  # slurm | k8s | computewatch | process
    user: str
    team: str
    slurm_account: str = ""
    namespace: str = ""
    pod: str = ""
    project: str = ""
    tagged: bool = False  # the process carried COMPUTEWATCH_TAGS: always exported
    model: str = ""  # COMPUTEWATCH_MODEL: the model the job declares it trains ("" none)
    stage: str = ""  # COMPUTEWATCH_STAGE
    time_limit_seconds: float | None = None  # Slurm: SLURM_JOB_END_TIME - SLURM_JOB_START_TIME

    def labels(self, node: str) -> Labels:
        """The labels of the job's series (sorted)."""
        return (("job", self.job), ("node", node), ("team", self.team), ("user", self.user))

    def info_labels(self, node: str) -> Labels:
        """The labels of ``computewatch_job_info``."""
        pairs = {
            "job": self.job,
            "node": node,
            "team": self.team,
            "user": self.user,
            "kind": self.kind,
            "slurm_account": self.slurm_account,
            "namespace": self.namespace,
            "pod": self.pod,
            "project": self.project,
        }
        return tuple(sorted(pairs.items()))


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


class Attributor:
    """Attributes processes to jobs from procfs; caches per (PID, start time).

    ``pod_logs_root`` is the kubelet's log directory (``/var/log/pods``), whose entries are
    named ``<namespace>_<pod>_<uid>``: it gives a pod UID's namespace and name without asking
    the API server (no network call is made). ``user_name`` maps a uid to a name (default: the
    password database, else the number).
    """

    def __init__(
        self,
        procfs_root: str = "/proc",
        teams: TeamMap | None = None,
        *,
        pod_logs_root: str | None = "/var/log/pods",
        user_name: Callable[[int], str] | None = None,
        read_environ: bool = True,
    ) -> None:
        self._root = procfs_root
        self.teams = teams or TeamMap()
        self._pod_logs = pod_logs_root
        self._user_name = user_name or _user_name
        self._read_environ = read_environ
        self._users: dict[int, str] = {}
        self._cache: dict[tuple[int, int], JobIdentity] = {}
        self._pods: dict[str, tuple[str, str]] = {}
        self._pods_listed_at = -1e18
        self.environ_denied = 0  # processes whose environment could not be read
        self.environ_read = 0

    # -- public -------------------------------------------------------------------------------
    def identify(self, pid: int, start: int, uid: int) -> JobIdentity:
        """The job of process ``pid`` started at ``start`` (clock ticks after boot, stat field
        22) and owned by ``uid``; computed once per process."""
        key = (pid, start)
        ident = self._cache.get(key)
        if ident is None:
            ident = self._cache[key] = self._identify(pid, uid)
        return ident

    def forget(self, pid: int, start: int) -> None:
        """Drop a process that has exited from the cache."""
        self._cache.pop((pid, start), None)

    def user(self, uid: int) -> str:
        name = self._users.get(uid)
        if name is None:
            if len(self._users) > 65536:
                self._users.clear()
            name = self._users[uid] = self._user_name(uid)
        return name

    @property
    def cached(self) -> int:
        return len(self._cache)

    # -- internals ----------------------------------------------------------------------------
    def _read(self, pid: int, name: str, limit: int = 65536) -> bytes | None:
        return read_file(os.path.join(self._root, str(pid), name), limit)

    def _environ(self, pid: int) -> dict[str, str]:
        if not self._read_environ:
            return {}
        env = read_environ(self._root, pid, _ENV_NAMES)
        if env is None:
            self.environ_denied += 1
            return {}
        self.environ_read += 1
        return _kept(env)

    def _identify(self, pid: int, uid: int) -> JobIdentity:
        cg_raw = self._read(pid, "cgroup")
        cg = parse_cgroup(decode_text(cg_raw)) if cg_raw else None
        env = self._environ(pid)
        tags = parse_tags(env.get(TAGS_VAR, ""))
        user = self.user(uid)
        if user == str(uid) and env.get("SLURM_JOB_USER"):
            user = env["SLURM_JOB_USER"][:_MAX_LABEL]
        account = env.get("SLURM_JOB_ACCOUNT", "")[:_MAX_LABEL]
        namespace = tags.get("namespace", "")
        pod = ""
        kind = "process"
        job = ""
        if cg is not None and cg.kind == "slurm":
            kind, job = "slurm", cg.job_id
        elif cg is not None and cg.kind == "k8s":
            kind = "k8s"
            ns_pod = self._pod(cg.pod_uid)
            if ns_pod is not None:
                namespace, pod = ns_pod
                job = f"{namespace}/{pod}"
            else:
                job = f"pod:{cg.pod_uid}"
        elif env.get("SLURM_JOB_ID", "").isdigit():
            kind, job = "slurm", env["SLURM_JOB_ID"]
        elif env.get(RUN_ID_VAR):
            kind, job = "computewatch", env[RUN_ID_VAR][:_MAX_LABEL]
        elif tags.get("job"):
            job = tags["job"]
        if not job:
            job = f"process:{user}"
        team = self.teams.team(
            tag=tags.get("team"), user=user, account=account, namespace=namespace
        )
        return JobIdentity(
            job=job,
            kind=kind,
            user=user,
            team=team,
            slurm_account=account,
            namespace=namespace,
            pod=pod,
            project=tags.get("project", ""),
            tagged=bool(tags),
            model=env.get(MODEL_VAR, "").strip()[:_MAX_LABEL],
            stage=env.get(STAGE_VAR, "").strip()[:_MAX_LABEL],
            time_limit_seconds=_time_limit(env),
        )

    def _pod(self, uid: str) -> tuple[str, str] | None:
        """(namespace, pod name) of a pod UID from the kubelet's log directory names."""
        hit = self._pods.get(uid)
        if hit is not None or self._pod_logs is None:
            return hit
        now = time.monotonic()
        if now - self._pods_listed_at < 5.0:  # list at most every 5 s for unknown pods
            return None
        self._pods_listed_at = now
        try:
            entries = os.listdir(self._pod_logs)
        except OSError:
            return None
        pods: dict[str, tuple[str, str]] = {}
        for entry in entries:
            parts = entry.split("_")
            if len(parts) == 3:  # namespaces and pod names cannot contain "_" (DNS labels)
                pods[parts[2]] = (parts[0], parts[1])
        self._pods = pods
        return pods.get(uid)
