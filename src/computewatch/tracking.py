"""``computewatch.track()``: monitor a block of Python code, and report its steps.

Inside ``computewatch run`` (the supervisor sets ``COMPUTEWATCH_RUN_ID`` and
``COMPUTEWATCH_SPOOL``), ``track()`` attaches to the supervising run. Otherwise it starts a
sampler subprocess that watches this process tree from outside the interpreter; user code only
ever appends step records to a buffer.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from computewatch.escape import clean_text
from computewatch.paths import resolve_db_path
from computewatch.records import PhaseRecord, RequestRecord, StepRecord
from computewatch.sampling.channel import (
    ENV_RUN_ID,
    ENV_SPOOL,
    PHASE,
    REQUEST,
    SETTING,
    STEP,
    SpoolReader,
    StepWriter,
    warn_once,
)

if TYPE_CHECKING:  # the summary's types, for annotations only (track() imports stay light)
    from computewatch.analysis.summary_types import RunSummary
    from computewatch.profiling.artifacts import Trigger
    from computewatch.profiling.torch_window import ProfileWindow
    from computewatch.sampling.tracker_feed import StoreFeed
    from computewatch.trackers import TrackerBackend, TrackerLogger

ENV_PROFILE_STEPS = "COMPUTEWATCH_PROFILE_STEPS"
"""``A:B``: set by ``computewatch run --profile-steps``; ``track()`` arms the window."""
ENV_RUN_DB_NAME = "COMPUTEWATCH_RUN_DB"  # sampling.tracker_feed.ENV_RUN_DB, without its import

P = ParamSpec("P")
R = TypeVar("R")

SAMPLER_EXIT_TIMEOUT = 15.0
SAMPLER_DEAD_BUSY_TIMEOUT = 1.0
"""How long closing a run whose sampler died waits for another process's lock on the store."""
_mono = time.monotonic

_active: list[Run] = []
_INF = math.inf
_MAX = sys.float_info.max
_PLAIN = frozenset((int, float))  # the types step() takes on its fast path


T = TypeVar("T")


def _count(what: str, value: object) -> float:
    """``value`` as a finite count >= 0, or TypeError/ValueError naming ``what``: checked at
    the call, so a bad value never reaches the background thread that packs the records.
    Numbers of other types (NumPy scalars, a one-element tensor) are converted here."""
    if isinstance(value, str | bytes | bool) or value is None:
        raise TypeError(f"{what} must be a number, not {type(value).__name__} {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]  # anything float() takes
    except OverflowError:  # an int past the largest float (10**400)
        raise ValueError(f"{what} must be a finite number >= 0, not {_short(value)}") from None
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}") from None
    if not 0.0 <= number < _INF:
        raise ValueError(f"{what} must be a finite number >= 0, not {value!r}")
    return number


def _time(what: str, value: object) -> float:
    """A ``time.monotonic()`` reading: any finite number."""
    if isinstance(value, str | bytes | bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a time.monotonic() reading, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    return float(value)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _name(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800"): no file or database takes it
        raise ValueError(f"{what} must be valid Unicode text, not {value!r}") from None
    return value


def _flops(what: str, value: object) -> float:
    """Declared FLOPs (or FLOP/s): a finite number > 0."""
    number = _count(what, value)
    if number == 0:
        raise ValueError(f"{what}: FLOPs must be a positive number, not {value!r}")
    return number


class Phase:
    """A named phase of a step; reusable, re-entrant, also a decorator. Two appends' cost."""

    __slots__ = ("_append", "_id", "_starts")

    def __init__(self, append: Callable[[tuple[Any, ...]], None], name_id: int) -> None:
        self._append = append
        self._id = name_id
        self._starts: list[float] = []

    def __enter__(self) -> Phase:
        self._starts.append(_mono())
        return self

    def __exit__(self, *exc: object) -> None:
        end = _mono()
        if self._starts:
            self._append((PHASE, self._id, self._starts.pop(), end, None, None, None))

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return fn(*args, **kwargs)

        return wrapper


class Request:
    """One request's timing; set ``tokens_out`` (and ``tokens_in``) inside the block. An
    exception marks it failed (and propagates)."""

    __slots__ = ("_append", "_id", "_start", "_tokens_in", "_tokens_out")

    def __init__(
        self, append: Callable[[tuple[Any, ...]], None], name_id: int, tokens_in: float | None
    ) -> None:
        self._append = append
        self._id = name_id
        self._start = 0.0
        self._tokens_in = None if tokens_in is None else _count("tokens_in", tokens_in)
        self._tokens_out: float | None = None

    @property
    def tokens_in(self) -> float | None:
        """The request's input tokens (checked when set: a finite number >= 0)."""
        return self._tokens_in

    @tokens_in.setter
    def tokens_in(self, value: float | None) -> None:
        self._tokens_in = None if value is None else _count("tokens_in", value)

    @property
    def tokens_out(self) -> float | None:
        """The tokens the request produced (checked when set: a finite number >= 0)."""
        return self._tokens_out

    @tokens_out.setter
    def tokens_out(self, value: float | None) -> None:
        self._tokens_out = None if value is None else _count("tokens_out", value)

    def __enter__(self) -> Request:
        self._start = _mono()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._append(
            (
                REQUEST,
                self._id,
                self._start,
                _mono(),
                self._tokens_in,
                self._tokens_out,
                0.0 if exc_type is not None else 1.0,
            )
        )

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        append, nid = self._append, self._id

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with Request(append, nid, None):
                return fn(*args, **kwargs)

        return wrapper


def recompute_factor(recompute: float | str) -> float:
    """Hardware FLOPs per model FLOP for a declared activation recomputation."""
    if isinstance(recompute, str):
        factors = {"none": 1.0, "full": 4.0 / 3.0}
        if recompute not in factors:
            raise ValueError(f"recompute must be 'none', 'full' or a number, not {recompute!r}")
        return factors[recompute]
    if not 1.0 <= recompute <= 2.0:
        raise ValueError(f"a recompute factor is between 1 and 2, not {recompute!r}")
    return float(recompute)


class Run:
    """A monitored run as user code sees it: ``step()`` and, once closed, ``summary``."""

    def __init__(
        self,
        run_id: str,
        writer: StepWriter,
        *,
        attached: bool,
        db_path: Path | None,
        sampler: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.id = run_id
        self.attached = attached
        self.db_path = db_path
        self._writer = writer
        self._sampler = sampler
        self._append = writer.append
        self._phases: dict[str, Phase] = {}
        self._flops_rule: Callable[[float | None], float | None] | None = None
        self._closed = False
        self.summary: RunSummary | None = None
        self.status: str | None = None
        self.spool: Path | None = None
        self._config: dict[str, Any] = {}
        self._trackers: tuple[StoreFeed, TrackerLogger] | None = None
        self._window: ProfileWindow | None = None  # the PyTorch Profiler around some steps

    @property
    def sampler_pid(self) -> int | None:
        """PID of this run's sampler subprocess (None when attached to ``computewatch run``)."""
        return self._sampler.pid if self._sampler is not None else None

    def step(
        self,
        samples: float | None = None,
        tokens: float | None = None,
        flops: float | None = None,
        n: int | None = None,
    ) -> None:
        """Close one training or inference step: optional sample and token counts, and the
        step's model FLOPs (else those set by :meth:`set_flops`). An append to a buffer.
        ``n``: the global step this one is (counted across restarts), for goodput's lost
        progress (``computewatch goodput``); one more append when given.
        Each count is a finite number >= 0: TypeError or ValueError here, at the call."""
        if n is not None:
            self._setting("global_step", float(_step_number("n", n)))
        # The check costs a type lookup per count given; other types take the slow path.
        # <= _MAX: an int past the largest float (10**400) cannot be packed later
        if samples is not None and (samples.__class__ not in _PLAIN or not 0 <= samples <= _MAX):
            samples = _count("samples", samples)
        if tokens is not None and (tokens.__class__ not in _PLAIN or not 0 <= tokens <= _MAX):
            tokens = _count("tokens", tokens)
        if flops is not None and (flops.__class__ not in _PLAIN or not 0 <= flops <= _MAX):
            flops = _count("flops", flops)
        if flops is None and self._flops_rule is not None:
            flops = self._flops_rule(tokens)
        if flops is None:
            self._append((_mono(), samples, tokens))
        else:
            self._append((STEP, 0, _mono(), samples, tokens, flops, None))
        if self._window is not None and self._window.step_ended():
            self._window = None

    def profile(self, steps: int, *, first: int = 1) -> ProfileWindow | None:
        """Run the PyTorch Profiler around the next ``steps`` steps (from the ``first``-th
        step after this call): a Chrome trace and the operator table (time, memory, FLOPs)
        go to the run's artifacts directory and are linked to the run when it ends
        (docs/observability.md). Returns the window (its ``files`` once done), or None when
        the run's store is unknown (said once). A window already open is closed first."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"steps must be an int >= 1, not {steps!r}")
        if not isinstance(first, int) or isinstance(first, bool) or first < 1:
            raise ValueError(f"first must be an int >= 1, not {first!r}")
        return self._profile_window(first, first + steps - 1, "steps")

    def _poll_profile_request(self) -> None:
        """A PyTorch Profiler window the monitor asked for (on a step-time regression: see
        computewatch.profiling.anomaly), armed when no window is open. Never raises."""
        try:
            # the profiler's request file: read when the steps poll, not at `import computewatch`
            from computewatch.profiling.anomaly import read_torch_request
            from computewatch.profiling.artifacts import artifact_dir  # the same: on use

            db = self._db()
            if db is None or self._window is not None:
                return
            req = read_torch_request(artifact_dir(db, self.id, create=False))
            if req is not None:
                self._profile_window(1, req[0], "anomaly", req[1])
        except Exception as e:
            warn_once("profile", f"no PyTorch Profiler window ({type(e).__name__}: {e})")

    def _db(self) -> Path | None:
        if self.db_path is not None:
            return self.db_path
        env = os.environ.get(ENV_RUN_DB_NAME)
        return Path(env) if env else None

    def _profile_window(
        self, first: int, last: int, trigger: Trigger, reason: str = ""
    ) -> ProfileWindow | None:
        # the profiling helpers: only when a window is asked for
        from computewatch.profiling.artifacts import artifact_dir
        from computewatch.profiling.torch_window import ProfileWindow

        db = self._db()
        if db is None:
            warn_once("profile", "the run's store is unknown: no profile is taken")
            return None
        if self._window is not None:
            self._window.close()
        self._window = ProfileWindow(
            first, last, artifact_dir(db, self.id), trigger=trigger, reason=reason
        )
        return self._window

    def phase(self, name: str) -> Phase:
        """A named part of each step, as a context manager or decorator:
        ``with run.phase("forward"): ...``. The time inside is recorded against the step the
        phase ends in. Phases may nest (``comm`` inside ``backward``)."""
        ph = self._phases.get(name) if type(name) is str else None
        if ph is None:
            name = _name("phase name", name)
            ph = self._phases[name] = Phase(self._append, self._writer.name_id(name))
        return ph

    def record_phase(
        self, name: str, start: float, end: float, accel_seconds: float | None = None
    ) -> None:
        """Record a phase timed elsewhere (``time.monotonic()`` start and end), with the
        accelerator's own time for it when known (CUDA events resolved later)."""
        name = _name("phase name", name)
        start, end = _time("start", start), _time("end", end)
        if end < start:
            raise ValueError(f"a phase ends after it starts, not at {end!r} < {start!r}")
        if accel_seconds is not None:
            accel_seconds = _count("accel_seconds", accel_seconds)
        self._append((PHASE, self._writer.name_id(name), start, end, accel_seconds, None, None))

    def data(self, iterable: Iterable[T], name: str = "data") -> Iterator[T]:
        """Iterate over ``iterable`` (a DataLoader, a generator), timing each ``next()`` as
        the ``data`` phase: the time the loop waited for input."""
        it = iter(iterable)
        app = self._append
        nid = self._writer.name_id(name)
        mono = _mono
        while True:
            t0 = mono()
            try:
                item = next(it)
            except StopIteration:
                return
            app((PHASE, nid, t0, mono(), None, None, None))
            yield item

    def request(self, name: str = "", tokens_in: float | None = None) -> Request:
        """One served request, as a context manager (``with run.request() as r:`` then
        ``r.tokens_out = n``) or decorator. Its latency, tokens and outcome are recorded."""
        name = _name("request name", name)
        return Request(self._append, self._writer.name_id(name) if name else 0, tokens_in)

    def set_flops(
        self,
        per_step: float | None = None,
        per_token: float | None = None,
        recompute: float | str | None = None,
        peak_flops: float | None = None,
    ) -> None:
        """Declare the model FLOPs of each step (or per token, times each step's tokens), so
        the run's FLOPs are counted, not estimated, and its MFU known. ``recompute``:
        ``"full"`` activation recomputation (one more forward: hardware FLOPs = 4/3 of model
        FLOPs), ``"none"``, or the hardware/model ratio as a number, for HFU.
        ``peak_flops``: the peak FLOP/s of the hardware the run uses, for MFU where the
        catalog has no figure (a CPU, a new accelerator)."""
        if per_step is not None and per_token is not None:
            raise ValueError("give flops per step or per token, not both")
        for what, v in (
            ("per_step", per_step),
            ("per_token", per_token),
            ("peak_flops", peak_flops),
        ):
            if v is not None:
                _flops(what, v)
        if recompute is not None and not isinstance(recompute, str):
            recompute = _count("recompute", recompute)
        if per_step is not None:
            fps = float(per_step)
            self._flops_rule = lambda _tokens: fps
            self._setting("flops_per_step", fps)
        elif per_token is not None:
            fpt = float(per_token)
            self._flops_rule = lambda tokens: None if tokens is None else fpt * tokens
            self._setting("flops_per_token", fpt)
        if recompute is not None:
            self._setting("recompute_factor", recompute_factor(recompute))
        if peak_flops is not None:
            self._setting("peak_flops", float(peak_flops))

    def config(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> dict[str, Any]:
        """Record the run's hyperparameters (merged with those given before; secrets in keys
        such as ``api_key`` and in values are redacted before anything is written). Stored
        with the run as its ``config`` (``show``, ``compare``, the report). Returns them all.
        A value that is not JSON (an object, a tensor, NaN) is stored as its ``repr`` (at most
        200 characters), as docs/security.md says. Never raises for a write that fails: one
        warning line."""
        if values is not None and not isinstance(values, Mapping):
            raise TypeError(f"config takes a mapping, not {type(values).__name__}")
        # on use: `import computewatch` stays light
        from computewatch.sampling.repro import write_config
        from computewatch.sources.environment import redact_config

        self._config.update(redact_config({str(k): v for k, v in (values or {}).items()}))
        self._config.update(redact_config(more))
        if self.spool is not None:
            try:
                write_config(self.spool, self._config)
            except (OSError, TypeError, ValueError) as e:
                warn_once("config", f"the run's configuration could not be recorded ({e})")
        return dict(self._config)

    def _declare(self, declaration: Mapping[str, Any]) -> None:
        """Record what the run trains (``track(model=...)``), stored at the run's end."""
        from computewatch.sampling.repro import write_declaration  # on use, as config's

        if self.spool is not None:
            try:
                write_declaration(self.spool, declaration)
            except OSError as e:
                warn_once("governance", f"the run's model could not be recorded ({e})")

    def checkpoint(self, step: int, *, seconds: float | None = None) -> Checkpoint:
        """Mark a checkpoint saved at training step ``step`` (the global step), for goodput
        (``computewatch goodput``: checkpoint time, progress lost to a restart, the best
        checkpoint interval). Around the save it times it: ``with run.checkpoint(step):
        torch.save(...)``; called after the save it marks it, with the save's ``seconds`` when
        known (else its time is not measured)."""
        step = _step_number("step", step)
        if seconds is not None:
            seconds = _count("seconds", seconds)
        self._setting("checkpoint_step", float(step))
        now = _mono()
        nid = self._writer.name_id(CHECKPOINT_PHASE)
        self._append((PHASE, nid, now - (seconds or 0.0), now, None, None, None))
        return Checkpoint(self._append, nid)

    def _setting(self, key: str, value: float) -> None:
        self._append((SETTING, self._writer.name_id(key), value, None, None, None, None))

    def close(self, status: str = "completed") -> None:
        """End the run: flush the steps; a standalone run also stops its sampler, which
        stores the summary. Idempotent. Never raises: a failure here is one warning on
        standard error, and the program goes on with its own exception or exit status."""
        if self._closed:
            return
        self._closed = True
        self.status = status
        if self in _active:
            _active.remove(self)
        try:
            self._close(status)
        except Exception as e:  # the monitor's failure, not the program's
            warn_once(
                "close", f"run {self.id} could not be closed cleanly ({type(e).__name__}: {e})"
            )
        if self._trackers is not None:
            feed, logger = self._trackers
            try:  # the last points, then the accounting (None when attached: the run goes on)
                feed.stop()
                logger.finish(self.summary, status)
            except Exception as e:
                warn_once("trackers", f"trackers not finished ({type(e).__name__}: {e})")

    def _close(self, status: str) -> None:
        if self._window is not None:  # a window the run outlived: written as it is
            self._window.close()
            self._window = None
        self._writer.close()
        if self._sampler is None:
            return
        proc = self._sampler
        try:
            assert proc.stdin is not None
            proc.stdin.write(f"end {status} {time.time()!r}\n".encode())
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            proc.wait(timeout=SAMPLER_EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.summary = _finish_without_sampler(self, proc.returncode, status)

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(_status_for(exc_type))


CHECKPOINT_PHASE = "checkpoint"
"""The phase a checkpoint's save is timed as (goodput reads it)."""


def _step_number(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int (a training step), not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be at least 0, not {value}")
    return value


class Checkpoint:
    """What :meth:`Run.checkpoint` returns: entered around the save, it times it (the mark
    made at the call, with no time, is then superseded by the timed phase: goodput counts a
    mark followed at once by a timed save as one checkpoint)."""

    __slots__ = ("_append", "_id", "_start")

    def __init__(self, append: Callable[[tuple[Any, ...]], None], name_id: int) -> None:
        self._append = append
        self._id = name_id
        self._start = 0.0

    def __enter__(self) -> Checkpoint:
        self._start = _mono()
        return self

    def __exit__(self, *exc: object) -> None:
        self._append((PHASE, self._id, self._start, _mono(), None, None, None))


def _status_for(exc_type: type[BaseException] | None) -> str:
    if exc_type is None:
        return "completed"
    if issubclass(exc_type, KeyboardInterrupt | SystemExit):
        return "interrupted"
    return "failed"


class track:
    """Monitor the enclosed code as one run: ``with track(name=...) as run:`` or as a
    decorator ``@track(name=...)`` (one run per call)."""

    def __init__(
        self,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        *,
        interval: float = 1.0,
        db: str | os.PathLike[str] | None = None,
        gpu_backend: str = "auto",
        total_steps: int | None = None,
        flops_per_step: float | None = None,
        flops_per_token: float | None = None,
        recompute: float | str | None = None,
        peak_flops: float | None = None,
        log_to: Iterable[str | TrackerBackend] | None = None,
        config: Mapping[str, Any] | None = None,
        model: str | None = None,
        base_model: str | None = None,
        stage: str | None = None,
        parameters: float | None = None,
        start_step: int | None = None,
    ) -> None:
        """``gpu_backend``: auto, nvidia, amd, none, fake:PRESET or replay:FILE (as the CLI's
        ``--gpu-backend``); unused when attached to ``computewatch run``. ``total_steps``: the
        planned steps, for a forecast at completion (also when attached). The FLOPs arguments
        are :meth:`Run.set_flops`'s. ``log_to``: trackers to log the run into (``"mlflow"``,
        ``"wandb"``, ``"tensorboard"``, ``"neptune"`` or a backend object such as
        ``computewatch.trackers.MLflow(run_id=...)``; default: the configuration's
        ``[log_to] trackers``); docs/trackers.md. ``config``: the run's hyperparameters
        (:meth:`Run.config`). ``model``, ``base_model``, ``stage``, ``parameters``: what the run
        trains, as ``computewatch run --model ...`` declares it (docs/governance.md; the
        command's flags win when both are given). ``start_step``: the training step this run
        resumed from (a restart from a checkpoint; ``computewatch goodput``)."""
        # Every argument is checked here, before start() runs a sampler or writes anything: a
        # wrong type is a TypeError, a wrong value a ValueError, each naming the argument.
        # GPU backends load when a standalone run starts (`import computewatch` stays cheap)
        from computewatch.sources.gpus import check_spec

        check_spec(_name("gpu_backend", gpu_backend))
        seconds = _count("interval", interval)
        if not 0.05 <= seconds <= 3600:
            raise ValueError(f"interval must be between 0.05 and 3600 seconds, not {interval!r}")
        if name is not None:
            name = clean_text(_name("name", name))
        self.name = name
        if tags is not None and not isinstance(tags, Mapping):
            raise TypeError(f"tags must be a mapping (a dict of str), not {type(tags).__name__}")
        self.tags = {clean_text(str(k)): clean_text(str(v)) for k, v in (tags or {}).items()}
        self.interval = seconds
        if db is not None and not isinstance(db, str | os.PathLike):
            raise TypeError(f"db must be a path (str or os.PathLike), not {type(db).__name__}")
        self.db = db
        self.gpu_backend = gpu_backend
        if total_steps is not None:
            if isinstance(total_steps, bool) or not isinstance(total_steps, int):
                raise TypeError(f"total_steps must be an int, not {type(total_steps).__name__}")
            if total_steps < 1:
                raise ValueError(f"total_steps must be at least 1, not {total_steps}")
        self.total_steps = total_steps
        self.start_step = None if start_step is None else _step_number("start_step", start_step)
        if flops_per_step is not None and flops_per_token is not None:
            raise ValueError("give flops per step or per token, not both")
        for what, v in (
            ("flops_per_step", flops_per_step),
            ("flops_per_token", flops_per_token),
            ("peak_flops", peak_flops),
        ):
            if v is not None:
                _flops(what, v)
        if recompute is not None:
            recompute_factor(
                recompute if isinstance(recompute, str) else _count("recompute", recompute)
            )
        self.flops_per_step = flops_per_step
        self.flops_per_token = flops_per_token
        self.recompute = recompute
        self.peak_flops = peak_flops
        if isinstance(log_to, str | bytes) or not (log_to is None or isinstance(log_to, Iterable)):
            raise TypeError(
                f'log_to takes a list of trackers (log_to=["mlflow"]), not {type(log_to).__name__}'
            )
        self.log_to = None if log_to is None else list(log_to)
        if self.log_to is not None:  # a wrong name is an error here, at the call
            from computewatch.trackers.base import check_names  # only with trackers

            check_names([t for t in self.log_to if isinstance(t, str)], "log_to")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"config takes a mapping, not {type(config).__name__}")
        self.config = None if config is None else dict(config)
        self.declaration: dict[str, Any] | None = None
        for what, text in (("model", model), ("base_model", base_model), ("stage", stage)):
            if text is not None:
                _name(what, text)
        if parameters is not None:
            _count("parameters", parameters)
        if model is not None or base_model or stage or parameters:
            from computewatch.lineage.compute import GovernanceError, declaration  # light

            try:
                found = declaration(model, base_model, stage, parameters)
            except GovernanceError as e:
                raise ValueError(str(e)) from None
            self.declaration = None if found is None else found.to_json()
        self._run: Run | None = None

    def start(self) -> Run:
        """Start (or attach to) the run."""
        meta = {
            "name": self.name,
            "tags": self.tags,
            "started_mono": _mono(),
            "total_steps": self.total_steps,
            **_rank_meta(),
        }
        if self.start_step is not None:
            meta["start_step"] = self.start_step
        run_id = os.environ.get(ENV_RUN_ID)
        spool = os.environ.get(ENV_SPOOL)
        if run_id and spool and not self.db:
            run = Run(run_id, StepWriter(spool, meta), attached=True, db_path=None)
            run.spool = Path(spool)
        else:
            run = _start_standalone(self, meta)
        flops = (self.flops_per_step, self.flops_per_token, self.recompute, self.peak_flops)
        if any(v is not None for v in flops):
            run.set_flops(*flops)
        if self.config:
            run.config(self.config)
        if self.declaration is not None:
            run._declare(self.declaration)
        _arm_profile_steps(run)
        _start_trackers(self, run)
        _active.append(run)
        return run

    def __enter__(self) -> Run:
        self._run = self.start()
        return self._run

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._run is not None:
            self._run.close(_status_for(exc_type))
            self._run = None

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with track(
                self.name, self.tags, interval=self.interval, db=self.db,
                gpu_backend=self.gpu_backend, total_steps=self.total_steps,
                flops_per_step=self.flops_per_step, flops_per_token=self.flops_per_token,
                recompute=self.recompute, peak_flops=self.peak_flops, log_to=self.log_to,
                config=self.config, start_step=self.start_step, **_declared(self.declaration),
            ):  # fmt: skip
                return fn(*args, **kwargs)

        return wrapper


def _declared(declaration: Mapping[str, Any] | None) -> dict[str, Any]:
    """A declaration as ``track()``'s keyword arguments again (for the decorator)."""
    if declaration is None:
        return {}
    return {k: declaration.get(k) for k in ("model", "base_model", "stage", "parameters")}


def _arm_profile_steps(run: Run) -> None:
    """``computewatch run --profile-steps A:B`` (its environment): the window, armed here."""
    spec = os.environ.get(ENV_PROFILE_STEPS)
    if not spec:
        return
    try:
        a, _, b = spec.partition(":")
        run._profile_window(int(a), int(b), "steps")
    except Exception as e:  # a bad value or a profiler that cannot start: the program goes on
        warn_once("profile", f"--profile-steps {spec}: no profile ({type(e).__name__}: {e})")


def _start_trackers(cfg: track, run: Run) -> None:
    """``log_to`` (else the configuration's ``[log_to] trackers``): a store feed and the
    trackers' logger, both on threads of their own. Never raises past a warning line."""
    specs = cfg.log_to
    try:
        if specs is None:
            if not os.environ.get("COMPUTEWATCH_CONFIG") and not _default_config_exists():
                return
            from computewatch.config import load_config  # only when a configuration exists

            specs = list(load_config().log_to)
        if not specs:
            return
        # only with trackers: their modules (the tools themselves load on the logger thread)
        from computewatch.sampling.tracker_feed import ENV_RUN_DB, StoreFeed
        from computewatch.trackers import TrackerLogger, TrackerRun, backends_for

        backends = backends_for(specs, "log_to")  # finds the tools' current runs: this thread
        db = run.db_path or (Path(os.environ[ENV_RUN_DB]) if os.environ.get(ENV_RUN_DB) else None)
        if db is None:
            warn_once("trackers", "log_to: the run's store is unknown; not logging to trackers")
            return
        # loaded with log_to only: track()'s import stays light
        from computewatch.trackers.backlog import backlog_path

        logger = TrackerLogger(
            backends,
            TrackerRun(run.id, cfg.name, cfg.tags, run._config),
            keep_path=backlog_path(db, run.id),  # what a tracker does not receive: push --trackers
        )
        feed = StoreFeed(
            db, run.id, logger, interval=max(cfg.interval, 1.0), peak_flops=cfg.peak_flops
        )
        run._trackers = (feed, logger.start())
        feed.start()
    except Exception as e:  # a bad configuration or tracker: the program goes on
        warn_once("trackers", f"not logging to trackers: {e}")


def _default_config_exists() -> bool:
    from computewatch.config import default_config_path  # cheap: paths only

    return default_config_path().exists()


def current_run() -> Run | None:
    """The innermost active run of this process, if any."""
    return _active[-1] if _active else None


def step(
    samples: float | None = None, tokens: float | None = None, flops: float | None = None
) -> None:
    """``step()`` on the current run (for code inside a ``@track`` function); no run: no-op."""
    if _active:
        _active[-1].step(samples, tokens, flops)
    else:  # the same checks with no run: a mistake shows before the first tracked run
        for what, v in (("samples", samples), ("tokens", tokens), ("flops", flops)):
            if v is not None:
                _count(what, v)


class _NoPhase:
    """What :func:`phase` gives without an active run: does nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _NoPhase:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        return fn


def phase(name: str) -> Phase | _NoPhase:
    """``phase()`` on the current run; without one, a phase that records nothing."""
    return _active[-1].phase(name) if _active else _NoPhase(_name("phase name", name))


def _rank_meta() -> dict[str, int]:
    """The process's place in a distributed job (torchrun, Slurm, MPI launchers)."""
    out: dict[str, int] = {}
    for key, names in (
        ("rank", ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")),
        ("local_rank", ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")),
        ("world_size", ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
    ):
        for n in names:
            v = os.environ.get(n, "")
            if v.isdigit():
                out[key] = int(v)
                break
    return out


def _start_standalone(cfg: track, meta: dict[str, Any]) -> Run:
    # `import computewatch` stays cheap in user programs: the sampler side loads when a run starts
    from computewatch.sampling.lifecycle import new_run_id, spool_dir

    started_at = time.time()
    t = os.times()  # same 1/CLK_TCK accounting as /proc/PID/stat, which the sampler reads
    cpu_baseline = t.user + t.system + t.children_user + t.children_system
    db_path = resolve_db_path(cfg.db)
    run_id = new_run_id()
    spool = spool_dir(db_path, run_id)
    writer = StepWriter(spool, meta)
    args = [
        sys.executable,
        "-m",
        "computewatch.sampling.sampler_main",
        "--pid",
        str(os.getpid()),
        "--run-id",
        run_id,
        "--db",
        str(db_path),
        "--interval",
        repr(cfg.interval),
        "--tags",
        json.dumps(cfg.tags),
        "--command",
        json.dumps([clean_text(a) for a in (sys.executable, *sys.argv)]),
        "--started-at",
        repr(started_at),
        "--cpu-baseline",
        repr(cpu_baseline),
        "--gpu-backend",
        cfg.gpu_backend,
    ]
    if cfg.name:
        args += ["--name", cfg.name]
    env = dict(os.environ)
    env.pop(ENV_RUN_ID, None)
    env.pop(ENV_SPOOL, None)
    try:
        proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C in the terminal must not stop it before it stores
            close_fds=True,
        )
    except OSError as e:
        print(f"computewatch: cannot start the sampler ({e}); not monitoring", file=sys.stderr)
        proc = None
    run = Run(run_id, writer, attached=False, db_path=db_path, sampler=proc)
    run.spool = spool  # Run.config() writes there; the sampler stores it (sampling/repro.py)
    return run


def _finish_without_sampler(run: Run, returncode: int | None, status: str) -> RunSummary | None:
    """Read the summary the sampler stored; if the sampler died, close the run ourselves."""
    # only when the sampler died (rare): the store and the summary load then
    from computewatch.analysis.repro import with_repro
    from computewatch.analysis.summary import build_summary
    from computewatch.analysis.summary_types import stored_summary
    from computewatch.store import RUNNING, Store, StoreError

    assert run.db_path is not None
    if returncode == 0:  # the sampler ended the run: its summary is read, no lock waited for
        try:
            with Store.open_readonly(run.db_path) as store:
                row = store.find_run(run.id)
                if row.summary is None:
                    return None
                return with_repro(stored_summary(row.summary), store.meta(row.key))
        except (StoreError, sqlite3.Error):  # the run waits in the spool (the sampler said so)
            return None
    try:
        with Store.open(run.db_path, busy_timeout=SAMPLER_DEAD_BUSY_TIMEOUT) as store:
            row = store.find_run(run.id)
            if row.status == RUNNING or row.summary is None:
                _ingest_spool(store, row.key, row.started_at)
                note = (
                    f"the sampler process ended early (exit status {returncode}); "
                    "data stops at the last stored sample"
                )
                store.update_run(
                    row.key,
                    status=status,
                    ended_at=time.time(),
                    notes=[*row.notes, note],
                )
                row = store.run_by_key(row.key)
                summary = build_summary(store, row)
                store.update_run(row.key, summary=summary)
                return summary
            # with the environment and config, as `show` gives them (analysis/repro.py)
            return with_repro(stored_summary(row.summary), store.meta(row.key))
    except (StoreError, sqlite3.Error) as e:
        print(f"computewatch: run {run.id} could not be stored: {e}", file=sys.stderr)
        return None


def _ingest_spool(store: Any, run_key: int, started_at: float) -> None:
    """Store the steps a dead sampler left in the spool (their wall time is approximated
    from the monotonic clock's current offset)."""
    # only when the sampler died (rare)
    from computewatch.sampling.lifecycle import spool_dir

    run = store.run_by_key(run_key)
    reader = SpoolReader(spool_dir(store.path, run.id))
    offset = time.time() - _mono()
    stored = {(s.pid, s.mono) for s in store.steps(run_key)}  # the sampler's, before it died
    stored_phases = {(p.pid, p.start, p.name) for p in store.phases(run_key)}
    stored_requests = {(r.pid, r.start) for r in store.requests(run_key)}
    events = reader.poll()
    steps = [
        (e.pid, e.mono, e.mono + offset, e.samples, e.tokens, e.flops)
        for e in events
        if isinstance(e, StepRecord) and (e.pid, e.mono) not in stored
    ]
    phases = [
        (e.pid, e.name, e.start, e.end, e.accel_seconds)
        for e in events
        if isinstance(e, PhaseRecord) and (e.pid, e.start, e.name) not in stored_phases
    ]
    requests = [
        (e.pid, e.name, e.start, e.end, e.tokens_in, e.tokens_out, e.ok)
        for e in events
        if isinstance(e, RequestRecord) and (e.pid, e.start) not in stored_requests
    ]
    writers = [(pid, float(m.get("started_mono", 0.0)), m) for pid, m in reader.new_metas()]
    store.write_batch(run_key, steps=steps, phases=phases, requests=requests, writers=writers)
    reader.remove()
