"""The run's energy spread over time by its accelerators' counters, then summed per hour."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from computewatch.accounting.timed import energy_profile, hourly_carbon, sci_units
from computewatch.analysis.summary_types import RunSummary
from computewatch.carbon.records import IntensityError
from computewatch.config import Config
from computewatch.readings import Kind, labels
from computewatch.store import Store

T0 = dt.datetime(2026, 11, 2, 10, tzinfo=dt.UTC).timestamp()


def _run(store: Store) -> int:
    key = store.create_run(
        run_id="timed0000001", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=60.0, host={},
    )  # fmt: skip
    series = [(0, "gpu_energy_joules_total", labels(gpu="TPU-a", method="modeled"), Kind.COUNTER)]
    ticks = [(i, float(i * 60), T0 + i * 60) for i in range(121)]  # two hours, every minute
    # the accelerator works only in the second hour: its counter stands still in the first
    samples = [(key, i, 0, 0.0 if i <= 60 else 1000.0 * (i - 60)) for i in range(121)]
    store.write_batch(key, series=series, ticks=ticks, samples=samples)
    store.update_run(key, ended_at=T0 + 7200, status="completed")
    return key


def test_accelerator_energy_lands_in_the_hours_it_was_drawn(tmp_path: Path) -> None:
    grid = tmp_path / "grid.csv"
    grid.write_text(
        "time,g_per_kwh\n"
        f"{dt.datetime.fromtimestamp(T0, dt.UTC).isoformat()},100\n"
        f"{dt.datetime.fromtimestamp(T0 + 3600, dt.UTC).isoformat()},500\n"
    )
    with Store.open(tmp_path / "cw.db") as store:
        run = store.run_by_key(_run(store))
        intervals, how = energy_profile(store, run, 3.0, 2.0)
        assert "counters' increments" in how
        assert sum(i.kwh for i in intervals) == pytest.approx(3.0)
        cfg = Config(carbon_provider="file", intensity_file=grid)
        res = hourly_carbon(store, run, cfg, "FR", 3.0, 2.0, 44.0, environ={})
    # 1 kWh (the rest) evenly: 0.5 at 100 + 0.5 at 500; 2 kWh (accelerator) all at 500
    assert res.carbon.grams == pytest.approx(0.5 * 100 + 0.5 * 500 + 2 * 500)
    assert [round(h["kwh"], 6) for h in res.section["hours"]] == [0.5, 2.5]
    assert res.section["covered_ratio"] == pytest.approx(1.0)


def test_no_data_for_the_run_is_an_error_the_caller_turns_into_a_note(tmp_path: Path) -> None:
    grid = tmp_path / "grid.csv"
    grid.write_text("time,g_per_kwh\n2020-01-01T00:00:00Z,100\n")
    with Store.open(tmp_path / "cw.db") as store:
        run = store.run_by_key(_run(store))
        cfg = Config(carbon_provider="file", intensity_file=grid)
        with pytest.raises(IntensityError, match="no intensity"):
            hourly_carbon(store, run, cfg, "FR", 1.0, 0.0, 44.0, environ={})


def test_functional_units() -> None:
    s: RunSummary = {  # type: ignore[typeddict-item]
        "steps": {"count": 40, "tokens_total": 2e6, "samples_total": 5000.0},
    }
    assert sci_units(s, "run").count == 1
    assert sci_units(s, "step").count == 40
    assert sci_units(s, "1M-tokens").count == 2e6
    assert sci_units(s, "1k-inferences").count == 5000.0
    empty: RunSummary = {}  # type: ignore[typeddict-item]
    assert sci_units(empty, "step").count is None
