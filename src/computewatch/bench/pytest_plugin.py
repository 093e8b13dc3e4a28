"""A pytest plugin for a model repository's CI: ``pytest --computewatch`` records what each test
that uses the ``computewatch`` fixture spends (a tracked run: step times, peak memory, energy)
and compares it with a committed baseline file; a regression fails the test.

Without ``--computewatch`` the plugin does nothing: the fixture's ``step()`` is a no-op.

    def test_train_step(computewatch):
        for batch in batches:
            train_step(batch)
            computewatch.step(samples=len(batch))

``--computewatch-update`` writes the measured figures into the baseline file instead
(``--computewatch-baseline``, default ``computewatch-baseline.json`` in the root directory).
Limits: ``--computewatch-max METRIC=+N%`` (repeatable; default: step_time_p50, peak_memory and
energy_per_step +10%), and ``@pytest.mark.computewatch(max=["step_time_p50=+20%"])`` per test,
which replaces the global limit of the same metric for that test. Each figure is compared with
its own uncertainty (step times by their samples, Mann-Whitney U, when both sides have at least
5; energy by its low-high range). A regression fails the test itself (its call, not its
teardown)."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from computewatch.bench.gate import (
    DEFAULT_LIMITS,
    BaselineError,
    Limit,
    Measurements,
    baseline_document,
    check,
    dumps_baseline,
    measurements_from_summary,
    parse_baseline,
    parse_limit,
)

__all__ = ["Recorder", "computewatch"]

_DEFAULT_FILE = "computewatch-baseline.json"
_MEASURED = pytest.StashKey[dict[str, Measurements]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("computewatch", "resource gates (computewatch)")
    g.addoption(
        "--computewatch",
        action="store_true",
        default=False,
        help="record the resources of tests that use the computewatch fixture and "
        "compare them with the baseline file",
    )
    g.addoption(
        "--computewatch-baseline",
        metavar="FILE",
        default=None,
        help=f"the baseline file (default: {_DEFAULT_FILE} in the root directory)",
    )
    g.addoption(
        "--computewatch-update",
        action="store_true",
        default=False,
        help="write the measured figures into the baseline file; check nothing",
    )
    g.addoption(
        "--computewatch-max",
        action="append",
        default=[],
        metavar="METRIC=+N%",
        help="a limit for every test (repeatable)",
    )
    g.addoption(
        "--computewatch-db",
        metavar="PATH",
        default=None,
        help="where the tests' runs are stored (default: computewatch's database)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "computewatch(max=[...]): resource limits for this test (METRIC=+N%)"
    )
    config.stash[_MEASURED] = {}


def _baseline_path(config: pytest.Config) -> Path:
    given = config.getoption("--computewatch-baseline")
    return Path(given) if given else Path(config.rootpath) / _DEFAULT_FILE


class Recorder:
    """What the ``computewatch`` fixture gives a test: ``step(samples=, tokens=)`` closes one
    step (an append; a no-op without ``--computewatch``). ``measurements`` once the test ends."""

    def __init__(self, run: Any | None, end: Any = None) -> None:
        self._run = run
        self._end = end
        self.measurements: Measurements | None = None
        self._last = time.perf_counter()
        self._times: list[float] = []

    @property
    def enabled(self) -> bool:
        return self._run is not None

    def step(self, samples: float | None = None, tokens: float | None = None) -> None:
        if self._run is None:
            return
        now = time.perf_counter()
        self._times.append(now - self._last)
        self._last = now
        self._run.step(samples=samples, tokens=tokens)

    def _finish(self, failed: bool = False) -> str | None:
        """End the test's run and check it (once): the failure's text, or None."""
        end, self._end = self._end, None
        return None if end is None else end(failed)


def _limits(request: pytest.FixtureRequest) -> list[Limit]:
    """The global limits (``--computewatch-max``, else the defaults), each replaced by the
    test's marker where it names the same metric."""
    given = [parse_limit(t) for t in request.config.getoption("--computewatch-max")]
    limits = given or list(DEFAULT_LIMITS)
    marker = request.node.get_closest_marker("computewatch")
    if marker is not None:
        raw = marker.kwargs.get("max", [])
        own = [parse_limit(t) for t in ([raw] if isinstance(raw, str) else list(raw))]
        mine = {(lim.metric, lim.bound) for lim in own}
        limits = [lim for lim in limits if (lim.metric, lim.bound) not in mine] + own
    return limits


@pytest.fixture
def computewatch(request: pytest.FixtureRequest) -> Iterator[Recorder]:
    """Record this test's resources as a run and check them against the baseline file."""
    config = request.config
    if not config.getoption("--computewatch"):
        yield Recorder(None)
        return
    # the tracked run's machinery loads only when the plugin is switched on
    from computewatch.bench.inference import wait_until_sampling
    from computewatch.tracking import track

    nodeid = request.node.nodeid
    limits = _limits(request)
    tracker = track(
        name=f"pytest {nodeid}",
        tags={"bench": "pytest", "test": nodeid},
        interval=0.2,
        db=config.getoption("--computewatch-db"),
    )
    run = tracker.__enter__()

    def end(failed: bool) -> str | None:
        tracker.__exit__(RuntimeError if failed else None, None, None)
        if failed:
            return None
        return _verdict(config, nodeid, run, rec, limits)

    wait_until_sampling(run)
    rec = Recorder(run, end)
    try:
        yield rec
    finally:
        failure = rec._finish(failed=request.node.stash.get(_CALL_FAILED, False))
    if failure:  # not checked in the call (the test's own hook did not run)
        pytest.fail(failure)


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """The check at the end of the test's call: a regression fails the test, not its
    teardown."""
    try:
        yield
    except BaseException:
        item.stash[_CALL_FAILED] = True
        raise
    rec = getattr(item, "funcargs", {}).get("computewatch")
    if isinstance(rec, Recorder) and rec.enabled:
        failure = rec._finish()
        if failure:
            pytest.fail(failure, pytrace=False)


def _verdict(
    config: pytest.Config, nodeid: str, run: Any, rec: Recorder, limits: list[Limit]
) -> str | None:
    if run.summary is None:
        return f"computewatch: no summary for {nodeid}: the run was not stored"
    measured = measurements_from_summary(run.summary, rec._times, None, f"test {nodeid}")
    rec.measurements = measured
    config.stash[_MEASURED][nodeid] = measured
    if config.getoption("--computewatch-update"):
        return None
    path = _baseline_path(config)
    if not path.is_file():
        return (
            f"computewatch: no baseline file {path}: run once with --computewatch-update "
            "and commit it"
        )
    try:
        _run, tests = parse_baseline(path.read_text("utf-8"), str(path))
    except (BaselineError, OSError, UnicodeDecodeError) as e:
        return f"computewatch: {e}"
    base = tests.get(nodeid)
    if base is None:
        return f"computewatch: {path} has no figures for {nodeid}: run --computewatch-update"
    result = check(measured, base, limits)
    if result.regressed or result.missing:
        # the text view lives above this layer: a short table of what moved, made here
        lines = [
            f"  {r.metric}: {r.baseline:.4g} -> {r.current:.4g} ({r.limit}; {r.status})"
            if r.baseline is not None and r.current is not None
            else f"  {r.metric}: {r.status}"
            for r in result.rows
            if r.status != "ok"
        ]
        return f"computewatch: resources regressed in {nodeid}:\n" + "\n".join(lines)
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not (config.getoption("--computewatch") and config.getoption("--computewatch-update")):
        return
    measured = config.stash.get(_MEASURED, {})
    if not measured:
        return
    path = _baseline_path(config)
    tests: dict[str, Measurements] = {}
    if path.is_file():
        try:
            _run, tests = parse_baseline(path.read_text("utf-8"), str(path))
        except (BaselineError, OSError, UnicodeDecodeError):
            tests = {}
    tests.update(measured)
    path.write_text(dumps_baseline(baseline_document(tests=tests)), "utf-8")
