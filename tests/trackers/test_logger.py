"""The trackers' logger and names without any tool: points from ticks, the bounded queue,
a backend that raises or hangs, the end-of-run record."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from computewatch.cli.log_to import CHOICES
from computewatch.config import TRACKERS
from computewatch.readings import counter, gauge, labels
from computewatch.records import StepRecord
from computewatch.trackers import (
    FinalRecord,
    MetricPoint,
    TrackerError,
    TrackerLogger,
    TrackerRun,
    backends_for,
)
from computewatch.trackers.final import final_record
from computewatch.trackers.mlflow import model_version_tags
from computewatch.trackers.naming import PointMaker
from computewatch.trackers.neptune import neptune_path


class Recorder:
    """A backend that keeps what it is given."""

    name = "recorder"

    def __init__(self) -> None:
        self.opened: TrackerRun | None = None
        self.points: list[MetricPoint] = []
        self.final: FinalRecord | None = None
        self.closed = False

    def open(self, run: TrackerRun) -> None:
        self.opened = run

    def log(self, points: list[MetricPoint]) -> None:
        self.points.extend(points)

    def finish(self, record: FinalRecord) -> None:
        self.final = record

    def close(self) -> None:
        self.closed = True


def _tick(maker: PointMaker, seq: int, cpu: float, steps: list[StepRecord]) -> dict[str, float]:
    readings = [
        counter("tree_cpu_seconds_total", cpu),
        gauge("tree_resident_memory_bytes", 250e6),
        gauge("host_memory_used_bytes", 4e9),
        gauge("host_memory_total_bytes", 16e9),
        gauge("gpu_utilization_ratio", 0.75, labels(gpu="GPU-b")),
        gauge("gpu_memory_used_bytes", 20e9, labels(gpu="GPU-b")),
        gauge("gpu_memory_total_bytes", 80e9, labels(gpu="GPU-b")),
        gauge("gpu_power_watts", 350.0, labels(gpu="GPU-b")),
    ]
    pts = maker.points(seq, 100.0 + seq, 1.8e9 + seq, readings, steps)
    assert all(p.step == seq and p.wall == 1.8e9 + seq for p in pts)
    return {p.name: p.value for p in pts}


def test_points_from_ticks_follow_mlflow_names_and_units() -> None:
    maker = PointMaker(allowed_cores=2.0, gpu_index={"GPU-b": 3}, peak_flops=1e12)
    first = _tick(maker, 0, 10.0, [StepRecord(1, 99.5, 8, 80, 1e11)])
    assert "computewatch/system/cpu_utilization_percentage" not in first  # a rate needs two ticks
    assert first["computewatch/system/process_memory_rss_megabytes"] == 250.0
    assert first["computewatch/system/host_memory_usage_percentage"] == 25.0
    assert first["computewatch/system/gpu_3_utilization_percentage"] == 75.0
    assert first["computewatch/system/gpu_3_memory_usage_megabytes"] == 20000.0
    assert first["computewatch/system/gpu_3_memory_usage_percentage"] == 25.0
    assert first["computewatch/system/gpu_3_power_usage_watts"] == 350.0
    steps = [StepRecord(1, 100.0 + 0.25 * i, 8, 80, 1e11) for i in range(1, 5)]
    second = _tick(maker, 1, 11.5, steps)  # 1.5 CPU-s in 1 s of 2 cores
    assert second["computewatch/system/cpu_utilization_percentage"] == pytest.approx(75.0)
    assert second["computewatch/steps_per_second"] == 4.0
    assert second["computewatch/step_time_seconds"] == pytest.approx(0.375)  # 0.75 + 3 × 0.25
    assert second["computewatch/samples_per_second"] == 32.0
    assert second["computewatch/tokens_per_second"] == 320.0
    assert second["computewatch/mfu"] == pytest.approx(4e11 / 1e12)


def test_names_per_tool() -> None:
    assert neptune_path("computewatch/system/cpu_utilization_percentage") == (
        "computewatch/system/cpu_utilization_percentage"
    )
    assert neptune_path("computewatch/mfu") == "computewatch/mfu"
    assert CHOICES == TRACKERS  # the parser's copy of the list


def test_unknown_tracker_name_lists_the_choices() -> None:
    with pytest.raises(TrackerError, match=r"unknown tracker 'comet'.*mlflow, wandb"):
        backends_for(["comet"])
    with pytest.raises(TrackerError, match="tracker object"):
        backends_for([42])  # type: ignore[list-item]


def test_logger_hands_points_then_the_end_and_closes() -> None:
    rec = Recorder()
    logger = TrackerLogger([rec], TrackerRun("r1", "demo"), flush_seconds=0.05).start()
    logger.tick(0, 100.0, 1.8e9, [counter("tree_cpu_seconds_total", 1.0)])
    logger.tick(1, 101.0, 1.8e9 + 1, [counter("tree_cpu_seconds_total", 1.5)])
    assert logger.finish(None, "completed")
    assert rec.opened is not None and rec.opened.display_name == "computewatch-demo"
    assert [p.name for p in rec.points] == ["computewatch/system/cpu_utilization_percentage"]
    assert rec.final is not None and rec.final.tags["computewatch.status"] == "completed"
    assert rec.closed and logger.dropped == 0


def test_a_full_queue_drops_the_oldest_and_counts_them() -> None:
    gate, entered = threading.Event(), threading.Event()

    class Slow(Recorder):
        def log(self, points: list[MetricPoint]) -> None:
            entered.set()
            gate.wait(10)
            super().log(points)

    rec = Slow()
    said: list[str] = []
    logger = TrackerLogger(
        [rec], TrackerRun("r1", None), maxlen=5, flush_seconds=0.01, warn=said.append
    ).start()
    logger.points([MetricPoint("first", 0.0, 0, 0.0)])
    assert entered.wait(10)  # the thread took the first item and blocks in log()
    for i in range(1, 21):  # never blocks the producer
        logger.points([MetricPoint("x", float(i), i, 0.0)])
    assert logger.dropped == 15
    gate.set()
    assert logger.finish(None, "completed")
    assert [p.value for p in rec.points if p.name == "x"] == [16.0, 17.0, 18.0, 19.0, 20.0]
    assert any("15 tick(s) dropped" in s for s in said)


def test_a_backend_that_raises_is_disabled_once_and_the_others_go_on() -> None:
    class Broken(Recorder):
        name = "broken"

        def log(self, points: list[MetricPoint]) -> None:
            raise RuntimeError("server said no")

    broken, good = Broken(), Recorder()
    said: list[str] = []
    logger = TrackerLogger(
        [broken, good], TrackerRun("r1", None), flush_seconds=0.01, warn=said.append
    ).start()
    for i in range(3):
        logger.points([MetricPoint("m", float(i), i, 0.0)])
    assert logger.finish(None, "completed")
    assert len(said) == 1 and "tracker broken disabled" in said[0] and "server said no" in said[0]
    assert logger.disabled == {"broken": "RuntimeError: server said no"}
    assert broken.final is None and not broken.closed  # nothing more is asked of it
    assert [p.value for p in good.points] == [0.0, 1.0, 2.0] and good.closed


def test_a_backend_that_hangs_at_the_end_is_left_behind() -> None:
    class Hung(Recorder):
        def finish(self, record: FinalRecord) -> None:
            threading.Event().wait(30)

    logger = TrackerLogger([Hung()], TrackerRun("r1", None), flush_seconds=0.01).start()
    assert logger.finish(None, "completed", timeout=0.3) is False


SUMMARY: dict[str, Any] = {
    "id": "abc",
    "duration_seconds": 7200.0,
    "steps": {"count": 100},
    "gpus": [{"index": 0}, {"index": 1}],
    "energy": {
        "facility": {"value": 1.5, "unit": "kWh", "method": "measured", "low": 1.4,
                     "high": 1.6, "assumptions": [], "source": "NVML counter"},
        "pue": {"value": 1.2, "low": 1.1, "high": 1.3, "source": "x"},
    },
    "carbon": {
        "total": {"value": 600.0, "unit": "gCO2e", "method": "modeled", "low": 300.0,
                  "high": 900.0, "assumptions": [], "source": "Ember (2024)"},
        "intensity": {"g_per_kwh": 400.0, "region": "DE"},
    },
    "cost": {"total": {"value": None, "unit": "USD", "method": "modeled", "low": None,
                       "high": None, "assumptions": ["no price"], "source": None}},
    "flops": {"value": 1e18, "unit": "FLOP", "method": "estimated", "low": 8e17, "high": 1.2e18,
              "assumptions": [], "source": "Epoch AI"},
    "diagnosis": {"findings": [
        {"severity": "high", "title": "Data starvation", "suggestion": "More workers.",
         "at_stake": {"seconds": 900.0, "usd": 3.5}},
        {"severity": "low", "title": "Headroom", "suggestion": "Bigger batch.", "at_stake": {}},
    ]},
}  # fmt: skip


def test_final_record_carries_each_figure_with_its_method_and_range() -> None:
    rec = final_record(SUMMARY, "completed")  # type: ignore[arg-type]
    m, t = rec.metrics, rec.tags
    assert m["computewatch/energy_kwh"] == 1.5 and m["computewatch/energy_kwh_low"] == 1.4
    assert t["computewatch.energy_kwh.method"] == "measured"
    assert m["computewatch/co2e_grams"] == 600.0 and m["computewatch/co2e_grams_high"] == 900.0
    assert t["computewatch.co2e_grams.method"] == "modeled"
    assert "computewatch/cost_usd" not in m  # unknown: not a made-up zero
    assert m["computewatch/flops"] == 1e18 and t["computewatch.flops.method"] == "estimated"
    assert m["computewatch/gpu_hours"] == 4.0
    assert rec.findings[0] == (
        "[high] Data starvation — 0:15:00 (12% of the run), $3.50 at stake: More workers."
    )  # as `computewatch diagnose` writes what is at stake
    tags = model_version_tags(rec)
    assert tags["computewatch.energy_kwh"] == "1.5"
    assert tags["computewatch.energy_kwh.method"] == "measured"
    assert not any(k.startswith("computewatch.finding") for k in tags)


def test_the_first_tick_takes_its_rates_from_the_steps_own_span() -> None:
    # a sampler that started late: every step came before its first tick
    maker = PointMaker()
    steps = [StepRecord(1, 10.0 + 0.25 * i, 8, None) for i in range(5)]
    got = {p.name: p.value for p in maker.points(0, 20.0, 1.8e9, [], steps)}
    assert got["computewatch/steps_per_second"] == 4.0  # 4 steps after the first, in 1 s
    assert got["computewatch/samples_per_second"] == 32.0
    assert got["computewatch/step_time_seconds"] == 0.25


class Hung(Recorder):
    """A tracker whose server never answers: ``open`` blocks until the test ends."""

    name = "hung"
    where = "http://127.0.0.1:9"

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def open(self, run: TrackerRun) -> None:
        self.release.wait(60)


def test_a_hung_tracker_starves_no_other_and_is_given_up_by_name() -> None:
    hung, rec = Hung(), Recorder()
    said: list[str] = []
    logger = TrackerLogger(
        [hung, rec], TrackerRun("r1", None), flush_seconds=0.01, deadline=0.5, warn=said.append
    ).start()
    try:
        for i in range(5):
            logger.points([MetricPoint("x", float(i), i, 0.0)])
        # the other tracker takes every point while the hung one is still opening
        deadline = threading.Event()
        for _ in range(1000):
            if len(rec.points) == 5:
                break
            deadline.wait(0.01)
        assert [p.value for p in rec.points] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert logger.finish(None, "completed") is False
        assert rec.final is not None and rec.closed
        (line,) = [s for s in said if "hung" in s]
        assert line.startswith("tracker hung given up at the run's end after 0.5 s")
        assert ": open still running after " in line and "(http://127.0.0.1:9)" in line
        assert "5 point(s) and the run's accounting not delivered" in line
        assert logger.gave_up == {"hung": line.split(": ", 1)[1].split(";")[0]}
    finally:
        hung.release.set()


def test_the_end_deadline_is_two_seconds_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from computewatch.trackers.logger import ENV_DEADLINE, FINISH_DEADLINE, finish_deadline

    monkeypatch.delenv(ENV_DEADLINE, raising=False)
    assert finish_deadline() == FINISH_DEADLINE == 2.0
    assert TrackerLogger([], TrackerRun("r", None)).deadline == 2.0
    monkeypatch.setenv(ENV_DEADLINE, "0.25")
    assert finish_deadline() == 0.25
    monkeypatch.setenv(ENV_DEADLINE, "soon")
    assert finish_deadline() == 2.0


def test_cpu_and_memory_are_the_run_trees_and_the_final_tick_logs_no_zero() -> None:
    maker = PointMaker(allowed_cores=4.0)

    def tick(seq: int, tree: float, cgroup: float, rss: float) -> dict[str, float]:
        readings = [
            counter("tree_cpu_seconds_total", tree),
            counter("cgroup_cpu_seconds_total", cgroup),  # the whole container's
            gauge("tree_resident_memory_bytes", rss),
        ]
        return {p.name: p.value for p in maker.points(seq, 10.0 + seq, 1.8e9 + seq, readings)}

    tick(0, 1.0, 100.0, 50e6)
    second = tick(1, 1.5, 103.0, 60e6)
    # half a core of the tree's, over 4 allowed cores: 12.5%, not the container's 75%
    assert second["computewatch/system/cpu_utilization_percentage"] == pytest.approx(12.5)
    last = tick(2, 1.5, 106.0, 0.0)  # the job has ended: no process, no memory reading
    assert "computewatch/system/process_memory_rss_megabytes" not in last
    assert last["computewatch/system/cpu_utilization_percentage"] == 0.0
    assert not any(name.startswith("system/") for name in second)  # never a tool's own keys
