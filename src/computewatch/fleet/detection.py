"""Training-run detection in the agent: follow each job's GPU series, classify the jobs every
``every`` seconds, and flag undeclared training on accounts whose caps it would break
(docs/detection.md, "Continuous detection in the agent").

The agent hands :meth:`TrainingDetector.observe` every tick's jobs (:meth:`NodeSampler.job_gpus
<computewatch.fleet.node.NodeSampler.job_gpus>`). Per job and GPU a rolling window of the
readings named in :data:`computewatch.traces.METRICS` is kept: at most ``window`` seconds and
at most :data:`MAX_SAMPLES` samples per GPU (a shorter interval keeps one sample per
``window / MAX_SAMPLES`` seconds). A sample is a tuple of floats, at most 432 bytes
(benchmarks/bench_agent_detection.py): 1 h at the default 5 s interval is 720 samples, about
0.3 MiB per GPU of a job; the bound, 3600 samples, about 1.5 MiB per GPU of a job.

Every ``every`` seconds the jobs with at least ``min_seconds`` of data are classified by
:func:`computewatch.detect.classify_series` on a thread of their own (a round never delays a
tick; while a round runs, the next one is skipped). A job classified training that declares no
model (no ``COMPUTEWATCH_MODEL`` in its environment: ``computewatch run --model``) is
*undeclared*; when it has an account (the Slurm account, else the ``[agent] accounts`` mapping
of its team or user) and a server URL and token are configured, the server's
``POST /api/v1/accounts/{account}/check`` is asked whether the account may use the job's GPUs
for its projected hours (:func:`projected_hours`). Answers are cached per job until the next
round; an unreachable or slow server (``check_timeout``) leaves the last answer and a note.

What is exported per classified job (labels ``job, user, team, node``): its training
probability, whether it was detected as training and whether that is undeclared, and, once a
check answered, ``computewatch_job_cap_breach{account}``. No command line, code or series leaves
the node: only these aggregates.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from computewatch.errors import ComputewatchError
from computewatch.fleet.attribution import JobIdentity
from computewatch.fleet.node import JobGpus
from computewatch.metrics.model import MetricSample
from computewatch.readings import Labels
from computewatch.redact import redact_urls
from computewatch.traces.records import METRICS

__all__ = [
    "MAX_SAMPLES",
    "AccountChecker",
    "CheckAnswer",
    "CheckError",
    "CheckRequest",
    "DetectOptions",
    "DetectionUnavailable",
    "HttpAccountChecker",
    "JobDetection",
    "TrainingDetector",
    "parse_check_answer",
    "projected_hours",
    "require_numpy",
]

MAX_SAMPLES = 3600
"""Samples kept per GPU of a job, whatever the interval (the memory bound)."""
MAX_HOURS = 8784.0
"""The check endpoint's largest request (366 days)."""
_METRICS: tuple[str, ...] = tuple(METRICS)
CHECK_PATH = "/api/v1/accounts/{account}/check"


class DetectionUnavailable(ComputewatchError):
    """Detection is switched on but cannot run here (numpy missing)."""


class CheckError(ComputewatchError):
    """An account check that got no usable answer (server unreachable, slow, refusing)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DetectOptions:
    """The ``[agent]`` keys of detection (docs/agent.md)."""

    every: float = 300.0
    """Seconds between classification rounds (``detect_every``)."""
    min_seconds: float = 600.0
    """Seconds of data a job needs before it is classified (``detect_min_seconds``)."""
    window: float = 3600.0
    """Seconds of series kept per job (``detect_window``)."""
    accounts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Team or user -> account, for jobs without a Slurm account (``accounts``; team first)."""
    hours_factor: float = 1.0
    """Projected hours = elapsed × this, without a Slurm time limit (``detect_hours_factor``)."""
    check_timeout: float = 5.0
    """Seconds an account check may take (``detect_check_timeout``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CheckRequest:
    """What the check endpoint is asked: the job's GPUs, its projected hours, its GPU model."""

    gpus: int
    hours: float
    gpu_model: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CheckAnswer:
    """The server's decision (docs/accounts.md): allow or deny, with its reasons."""

    allow: bool
    reasons: tuple[str, ...]


class AccountChecker(Protocol):
    """Asks whether ``account`` may use what ``request`` says; raises :class:`CheckError`."""

    def check(self, account: str, request: CheckRequest) -> CheckAnswer: ...


class HttpAccountChecker:
    """``POST {url}/api/v1/accounts/{account}/check`` with a bearer token (an admin token: the
    endpoint's requirement), the standard library alone and a timeout on every request. The
    token is in no message or ``repr``."""

    def __init__(self, url: str, token: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"HttpAccountChecker({redact_urls(self.url)!r})"

    def check(self, account: str, request: CheckRequest) -> CheckAnswer:
        path = CHECK_PATH.format(account=urllib.parse.quote(account, safe=""))
        body: dict[str, object] = {"gpus": request.gpus, "hours": request.hours}
        if request.gpu_model:
            body["gpu_model"] = request.gpu_model[:200]
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self._token}",
            },
            method="POST",
        )
        where = redact_urls(self.url)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read(1 << 20)
        except urllib.error.HTTPError as e:
            e.close()
            raise CheckError(
                f"the account check at {where} answered HTTP {e.code}"
                + (" (the agent's token must be an admin token)" if e.code in (401, 403) else "")
            ) from None
        except urllib.error.URLError as e:
            why = e.reason
            text = why.strerror if isinstance(why, OSError) and why.strerror else str(why)
            raise CheckError(f"cannot reach the server at {where}: {text}") from None
        except TimeoutError:
            raise CheckError(
                f"the server at {where} did not answer within {self.timeout:g} s"
            ) from None
        except OSError as e:
            raise CheckError(f"the connection to {where} failed: {e}") from None
        return parse_check_answer(raw, where)


def parse_check_answer(raw: bytes, where: str) -> CheckAnswer:
    """The check endpoint's JSON (docs/accounts.md: ``decision``, ``reasons``) as a
    :class:`CheckAnswer`; :class:`CheckError` for anything else."""
    try:
        doc = json.loads(raw)
        decision = doc["decision"]
        reasons = doc.get("reasons") or []
        if not isinstance(reasons, list):
            raise TypeError("reasons")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise CheckError(f"the account check at {where} gave an unreadable answer") from None
    if decision not in ("allow", "deny"):
        shown = repr(decision)[:80]
        raise CheckError(f"the account check at {where} answered {shown}")
    return CheckAnswer(decision == "allow", tuple(str(r)[:1000] for r in reasons[:20]))


def projected_hours(ident: JobIdentity, elapsed: float, factor: float) -> tuple[float, str]:
    """The hours a job is checked for, and how they were projected: its Slurm time limit when
    its environment gives one, else the elapsed time the agent saw × ``factor``; within the
    endpoint's range (at least one second, at most 8784 h)."""
    if ident.time_limit_seconds:
        hours, how = ident.time_limit_seconds / 3600, "the Slurm time limit"
    else:
        hours = elapsed * factor / 3600
        how = f"elapsed {elapsed / 3600:.2f} h × {factor:g}"
    return min(max(hours, 1 / 3600), MAX_HOURS), how


@dataclasses.dataclass(frozen=True, slots=True)
class JobDetection:
    """A job's latest classification and, when it was checked, the account's answer."""

    job: str
    label: str  # training | inference | other | uncertain
    p_training: float
    undeclared: bool
    evidence: str  # the features that decided, as "name value; ..."
    flop: float | None  # the hardware-based estimate over the window, for training
    gpu_count: int
    classified_at: float
    account: str | None = None
    answer: CheckAnswer | None = None
    hours: float | None = None
    hours_how: str = ""
    flag: bool = False  # the hardware ceiling could reach [governance] detect_review_flop


def require_numpy() -> None:
    """Raise :class:`DetectionUnavailable` when numpy (the governance extra) is not installed:
    the detector's features need it."""
    try:
        import numpy  # noqa: F401  (the governance extra: loaded only when detection is on)
    except ImportError:
        raise DetectionUnavailable(
            "agent.detect = true needs numpy: pip install 'computewatch[governance]'"
        ) from None


class _Series:
    """One GPU's rolling window: a deque of (time, value per metric) tuples."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: deque[tuple[float | None, ...]] = deque(maxlen=MAX_SAMPLES)


class _JobState:
    __slots__ = ("first_seen", "gpu_names", "ident", "labels", "series")

    def __init__(self, job: JobGpus, now: float) -> None:
        self.ident = job.ident
        self.labels: Labels = job.labels
        self.first_seen = now
        self.series: dict[str, _Series] = {}
        self.gpu_names: dict[str, str] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class _Snapshot:
    """A job's windows at a round's start: per GPU, a copy of its rows (immutable tuples: the
    copy is a list of references, cheap on the tick; the columns are built on the worker)."""

    ident: JobIdentity
    first_seen: float
    rows: list[list[tuple[float | None, ...]]]
    names: list[str | None]

    def telemetry(self) -> tuple[list[list[float]], list[dict[str, list[float | None]]]]:
        """Per GPU, its times and its series by metric (metrics never read left out)."""
        times, metrics = [], []
        for rows in self.rows:
            times.append([r[0] or 0.0 for r in rows])
            cols: dict[str, list[float | None]] = {}
            for i, m in enumerate(_METRICS, 1):
                col = [r[i] for r in rows]
                if any(v is not None for v in col):
                    cols[m] = col
            metrics.append(cols)
        return times, metrics


class TrainingDetector:
    """Keeps the jobs' windows and their verdicts; :meth:`observe` once per agent tick.

    ``checker``: the account check (None: no check, ``cap_breach`` is not exported).
    ``background``: classify on a thread of its own (the agent); False runs each round inside
    :meth:`observe` (tests, benchmarks). ``say`` receives one-line notes for the agent's log.
    """

    def __init__(
        self,
        options: DetectOptions,
        node: str,
        *,
        checker: AccountChecker | None = None,
        background: bool = True,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self.node = node
        self.checker = checker
        self.background = background
        self._say = say or (lambda _text: None)
        self._step = options.window / MAX_SAMPLES
        self._jobs: dict[JobIdentity, _JobState] = {}
        self._results: dict[JobIdentity, JobDetection] = {}
        self._lock = threading.Lock()
        self._last_round: float | None = None
        self._queue: queue.Queue[tuple[float, list[_Snapshot]] | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._noted: set[str] = set()
        self._flagged: set[tuple[JobIdentity, str]] = set()
        self.rounds = 0
        self.skipped_rounds = 0
        self.last_round_seconds = 0.0
        self.last_round_jobs = 0

    # -- the agent's side -------------------------------------------------------------------
    def observe(self, now: float, jobs: Sequence[JobGpus]) -> list[MetricSample]:
        """Add one tick's readings (``now``: seconds, increasing) and return the detection
        samples of every classified job; starts a round when one is due."""
        present: set[JobIdentity] = set()
        for job in jobs:
            present.add(job.ident)
            st = self._jobs.get(job.ident)
            if st is None:
                if not job.gpus:
                    continue  # a job is followed from its first GPU on
                st = self._jobs[job.ident] = _JobState(job, now)
            for uuid, values in job.gpus.items():
                s = st.series.get(uuid)
                if s is None:
                    s = st.series[uuid] = _Series()
                    st.gpu_names[uuid] = job.gpu_names.get(uuid, "")
                rows = s.rows
                if rows and now - (rows[-1][0] or 0.0) < self._step:
                    continue  # a short interval: one sample per window / MAX_SAMPLES
                rows.append((now, *(values.get(m) for m in _METRICS)))
        cutoff = now - self.options.window
        dropped = False
        for ident in list(self._jobs):
            if ident not in present:  # the node dropped it (ended, expired)
                del self._jobs[ident]
                dropped = True
                continue
            st = self._jobs[ident]
            for uuid in list(st.series):
                rows = st.series[uuid].rows
                while rows and (rows[0][0] or 0.0) < cutoff:
                    rows.popleft()
                if not rows:
                    del st.series[uuid]
        if dropped:  # what was said about ended jobs: forgotten with them
            self._flagged = {f for f in list(self._flagged) if f[0] in self._jobs}
            jobs_left = {st.ident.job for st in self._jobs.values()}
            self._noted = {
                k for k in list(self._noted) if not k.startswith("detect:") or k[7:] in jobs_left
            }
        if self._last_round is None:
            self._last_round = now
        elif now - self._last_round >= self.options.every:
            self._last_round = now
            self._start_round(now)
        return self._samples(present)

    def _start_round(self, now: float) -> None:
        snaps = self._snapshots(now)
        if not self.background:
            self.run_round(now, snaps)
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._worker, name="computewatch-detect", daemon=True
            )
            self._thread.start()
        try:
            self._queue.put_nowait((now, snaps))
        except queue.Full:
            self.skipped_rounds += 1
            self._note(
                "training detection: a classification round was skipped, the previous one "
                "still runs (raise detect_every)",
                "skipped",
            )

    def _snapshots(self, now: float) -> list[_Snapshot]:
        out = []
        for st in self._jobs.values():
            if not st.series:
                continue
            start = min((s.rows[0][0] or 0.0) for s in st.series.values())
            if now - start < self.options.min_seconds:
                continue
            rows = [list(s.rows) for s in st.series.values()]
            names = [st.gpu_names.get(uuid) or None for uuid in st.series]
            out.append(_Snapshot(st.ident, st.first_seen, rows, names))
        return out

    def _samples(self, present: set[JobIdentity]) -> list[MetricSample]:
        out: list[MetricSample] = []
        with self._lock:
            for ident in list(self._results):
                if ident not in present:
                    del self._results[ident]
            results = list(self._results.items())
        for ident, r in results:
            st = self._jobs.get(ident)
            lbl = st.labels if st is not None else ident.labels(self.node)
            training = r.label == "training"
            out.append(MetricSample("computewatch_job_training_probability", lbl, r.p_training))
            out.append(
                MetricSample("computewatch_job_detected_training", lbl, 1.0 if training else 0.0)
            )
            out.append(
                MetricSample(
                    "computewatch_job_undeclared_training", lbl, 1.0 if r.undeclared else 0.0
                )
            )
            out.append(
                MetricSample(
                    "computewatch_job_detection_uncertain",
                    lbl,
                    1.0 if r.label == "uncertain" else 0.0,
                )
            )
            out.append(MetricSample("computewatch_job_review_flag", lbl, 1.0 if r.flag else 0.0))
            if r.account is not None and r.answer is not None:
                albl = tuple(sorted((*lbl, ("account", r.account))))
                out.append(
                    MetricSample(
                        "computewatch_job_cap_breach", albl, 0.0 if r.answer.allow else 1.0
                    )
                )
        out.append(
            MetricSample(
                "computewatch_agent_detection_duration_seconds",
                (("node", self.node),),
                self.last_round_seconds,
            )
        )
        return out

    # -- the round (on the worker thread, or inline) ----------------------------------------
    def _worker(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            try:
                self.run_round(*item)
            except Exception as e:  # never let the thread die silently
                self._note(f"training detection failed: {type(e).__name__}: {e}", "round")
            finally:
                self._queue.task_done()

    def run_round(self, now: float, snaps: Sequence[_Snapshot]) -> None:
        """Classify every snapshot and check the undeclared training ones' accounts."""
        from computewatch.detect import (  # numpy, the model file: only once detection runs
            DetectError,
            GpuTelemetry,
            classify_series,
            load_model,
        )

        t0 = time.perf_counter()
        forest = load_model()
        server_down = False
        for snap in snaps:
            ident = snap.ident
            times, metrics = snap.telemetry()
            gpus = [GpuTelemetry(t, m) for t, m in zip(times, metrics, strict=True)]
            try:
                v = classify_series(gpus, job=ident.job, gpu_names=snap.names, model=forest)
            except DetectError as e:
                self._note(f"training detection: {e}", f"detect:{ident.job}")
                continue
            undeclared = v.label == "training" and not ident.model
            evidence = "; ".join(
                f"{e.feature} {'n/a' if e.value is None else f'{e.value:.3g}'}" for e in v.evidence
            )
            flop = v.flops.flop if v.flops is not None else None
            with self._lock:
                prev = self._results.get(ident)
            account = self._account(ident) if undeclared else None
            answer = prev.answer if prev is not None and prev.account == account else None
            hours: float | None = None
            how = ""
            if undeclared and account is not None and self.checker is not None:
                hours, how = projected_hours(
                    ident, now - snap.first_seen, self.options.hours_factor
                )
                if not server_down:
                    req = CheckRequest(max(v.gpu_count, 1), round(hours, 4), snap.names[0])
                    try:
                        answer = self.checker.check(account, req)
                        self._noted.discard("check")
                    except CheckError as e:
                        server_down = True  # the rest of this round keeps its last answers
                        self._note(
                            f"training detection: account check failed: {e}; the last "
                            "answers stand, the next round tries again",
                            "check",
                        )
            result = JobDetection(
                job=ident.job,
                label=v.label,
                p_training=v.p_training,
                undeclared=undeclared,
                evidence=evidence,
                flop=flop,
                gpu_count=v.gpu_count,
                classified_at=now,
                account=account,
                answer=answer,
                hours=hours,
                hours_how=how,
                flag=v.flag,
            )
            with self._lock:
                self._results[ident] = result
            self._flag(ident, result)
        self.rounds += 1
        self.last_round_jobs = len(snaps)
        self.last_round_seconds = time.perf_counter() - t0

    def _account(self, ident: JobIdentity) -> str | None:
        if ident.slurm_account:
            return ident.slurm_account
        acc = self.options.accounts
        return acc.get(ident.team) or acc.get(ident.user) or None

    def _flag(self, ident: JobIdentity, r: JobDetection) -> None:
        """One log line when a job is first seen as undeclared training, and when its account
        check first denies."""
        if not r.undeclared:
            return
        who = f"job {ident.job} (user {ident.user}, team {ident.team or 'unknown'})"
        flop = "" if r.flop is None else f"; about {r.flop:.3g} FLOP in the window (hardware)"
        if (ident, "undeclared") not in self._flagged:
            self._flagged.add((ident, "undeclared"))
            self._say(
                f"{who} looks like training (p_training {r.p_training:.2f}: {r.evidence}{flop}) "
                "and declares no model"
            )
        if r.answer is not None and not r.answer.allow and (ident, "deny") not in self._flagged:
            self._flagged.add((ident, "deny"))
            why = "; ".join(r.answer.reasons) or "no reason given"
            self._say(
                f"{who}: account {r.account} denies {r.gpu_count} GPU(s) × {r.hours or 0:.2f} h "
                f"({r.hours_how}): {why}"
            )

    def _note(self, text: str, key: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self._say(text)

    # -- introspection, end -----------------------------------------------------------------
    def results(self) -> dict[str, JobDetection]:
        """The latest detection of every classified job, by job name."""
        with self._lock:
            return {r.job: r for r in self._results.values()}

    def samples_kept(self) -> int:
        """Samples held in every window (the memory bound's unit)."""
        return sum(len(s.rows) for st in self._jobs.values() for s in st.series.values())

    @property
    def busy(self) -> bool:
        """A background round is queued or running."""
        return self._queue.unfinished_tasks > 0

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until a background round handed over has finished (tests, benchmarks)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.busy:
                return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        """Stop the worker thread (a round in progress finishes first, within 10 s)."""
        if self._thread is not None:
            try:
                self._queue.put(None, timeout=10)
            except queue.Full:
                return
            self._thread.join(timeout=10)
            self._thread = None
