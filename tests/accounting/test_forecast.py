"""Projection to completion from step times in the store, with hand-computed answers.

Step durations are the gaps between consecutive steps of one process; a process's first step
only marks where its timing starts. The runs below have one such first step at MONO0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from computewatch.accounting.engine import AccountingOptions, account
from computewatch.accounting.forecast import WINDOW, forecast, step_durations
from computewatch.store import COMPLETED, RunRow, Store

T0 = 1_700_000_000.0
MONO0 = 1000.0
FIXTURES = Path(__file__).parent / "fixtures"


def approx(x: float) -> Any:
    return pytest.approx(x, rel=1e-6)


def step_times(durations: list[float], start: float = MONO0) -> list[float]:
    """Monotonic times of a first step at ``start`` and one step after each duration."""
    out, t = [start], start
    for d in durations:
        t += d
        out.append(t)
    return out


def write_run(
    store: Store,
    steps: dict[int, list[float]],
    writers: list[tuple[int, float, dict[str, Any]]] | None = None,
    run_id: str = "0f0f0f0f0f0f",
) -> RunRow:
    rk = store.create_run(
        run_id=run_id,
        name="train",
        tags={},
        command=["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=1.0,
        host={"logical_cpus": 8, "allowed_cores": 8.0},
    )
    store.write_batch(
        rk,
        steps=[
            (pid, t, T0 + (t - MONO0), None, None) for pid, times in steps.items() for t in times
        ],
        writers=writers or [],
    )
    store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + 20.0)
    return store.run_by_key(rk)


def summary(done: int, processes: int = 1, elapsed: float = 20.0) -> dict[str, Any]:
    return {
        "duration_seconds": elapsed,
        "steps": {"count": done, "processes": processes},
        "gpus": [],
    }


def fig(value: float | None, low: float | None, high: float | None, unit: str) -> dict[str, Any]:
    return {"value": value, "low": low, "high": high, "unit": unit, "method": "modeled"}


SECTIONS: dict[str, Any] = {
    "energy": {"facility": fig(1.0, 0.8, 1.2, "kWh")},
    "carbon": {"total": fig(100.0, 50.0, 150.0, "gCO2e")},
    "cost": {"total": fig(10.0, 10.0, 10.0, "USD")},
    "flops": fig(1e18, 0.9e18, 1.1e18, "FLOP"),
}

# 50 steps of 0.1 s then 50 of 0.2 s after the first step: 101 steps in 15 s.
MIXED = [0.1] * 50 + [0.2] * 50


def test_step_durations_are_gaps_between_a_processes_steps(store: Store) -> None:
    run = write_run(store, {1: step_times(MIXED)})
    assert step_durations(store, run) == [approx(d) for d in MIXED]
    assert WINDOW >= 100  # every step time below counts


def test_remaining_time_and_its_range(store: Store) -> None:
    run = write_run(store, {1: step_times(MIXED)})
    fc = forecast(store, run, summary(101), 201, **SECTIONS)
    # mean of the 100 step times = (50 x 0.1 + 50 x 0.2) / 100 = 0.15 s
    # remaining = (201 - 101) = 100 steps x 0.15 = 15 s; at completion 20 + 15 = 35 s
    # p10 of the sorted times: position 99 x 0.1 = 9.9 -> 0.1 s -> 10 s -> 30 s
    # p90: position 89.1 -> 0.2 s -> 20 s -> 40 s
    w = fc["wall_seconds_at_completion"]
    assert (w["value"], w["low"], w["high"]) == (approx(35.0), approx(30.0), approx(40.0))
    assert (w["unit"], w["method"]) == ("s", "estimated")
    assert (fc["total_steps"], fc["steps_done"], fc["complete"]) == (201, 101, False)
    assert "101 of 201 steps done in 20.0 s" in w["assumptions"]


def test_projections_scale_by_elapsed_plus_remaining_over_elapsed(store: Store) -> None:
    run = write_run(store, {1: step_times(MIXED)})
    fc = forecast(store, run, summary(101), 201, **SECTIONS)
    # k = 35 / 20 = 1.75; k_low = 30 / 20 = 1.5; k_high = 40 / 20 = 2.0
    e = fc["energy_kwh"]
    assert (e["value"], e["low"], e["high"]) == (approx(1.75), approx(1.2), approx(2.4))
    assert (e["unit"], e["method"]) == ("kWh", "estimated")
    c = fc["carbon_gco2e"]
    assert (c["value"], c["low"], c["high"]) == (approx(175.0), approx(75.0), approx(300.0))
    usd = fc["cost_usd"]
    assert (usd["value"], usd["low"], usd["high"]) == (approx(17.5), approx(15.0), approx(20.0))
    f = fc["flops"]
    assert (f["value"], f["low"], f["high"]) == (approx(1.75e18), approx(1.35e18), approx(2.2e18))
    assert f["unit"] == "FLOP"


def test_sections_without_a_value_are_not_projected(store: Store) -> None:
    run = write_run(store, {1: step_times(MIXED)})
    sections = {**SECTIONS, "cost": {"total": fig(None, None, None, "USD")}}
    del sections["flops"]
    fc = forecast(store, run, summary(101), 201, **sections)
    assert "cost_usd" not in fc and "flops" not in fc
    assert "energy_kwh" in fc and "carbon_gco2e" in fc


def test_only_the_last_window_of_steps_counts(store: Store) -> None:
    # 100 slow steps (1 s) then WINDOW fast ones (0.1 s): only the fast ones count
    durations = [1.0] * 100 + [0.1] * WINDOW
    run = write_run(store, {1: step_times(durations)})
    done = len(durations) + 1
    fc = forecast(store, run, summary(done, elapsed=200.0), done + 10, **SECTIONS)
    # 10 steps x 0.1 s = 1 s remaining; 200 + 1 = 201 s
    assert fc["wall_seconds_at_completion"]["value"] == approx(201.0)


def test_complete_when_done_reaches_the_total(store: Store) -> None:
    run = write_run(store, {1: step_times(MIXED)})
    assert forecast(store, run, summary(101), 101, **SECTIONS) == {
        "total_steps": 101,
        "steps_done": 101,
        "complete": True,
    }
    assert forecast(store, run, summary(101), 50, **SECTIONS)["complete"] is True


def test_no_steps_is_a_note(store: Store) -> None:
    run = write_run(store, {})
    assert forecast(store, run, summary(0), 100, **SECTIONS) == {
        "total_steps": 100,
        "steps_done": 0,
        "complete": False,
        "note": "no step times yet: nothing to project",
    }
    # steps but no elapsed time: nothing to scale by either
    run = write_run(store, {1: step_times(MIXED)}, run_id="0e0e0e0e0e0e")
    assert "note" in forecast(store, run, summary(101, elapsed=0.0), 201, **SECTIONS)


def test_ranks_reporting_every_step_count_the_steps_of_one(store: Store) -> None:
    # two data-parallel ranks, each a first step then 49 steps of 0.1 s: 100 step records,
    # 50 steps of the run
    run = write_run(store, {11: step_times([0.1] * 49), 12: step_times([0.1] * 49, MONO0 + 0.05)})
    fc = forecast(store, run, summary(100, processes=2, elapsed=10.0), 200, **SECTIONS)
    assert fc["steps_done"] == 50
    # (200 - 50) steps x 0.1 s = 15 s; 10 + 15 = 25 s
    w = fc["wall_seconds_at_completion"]
    assert (w["value"], w["low"], w["high"]) == (approx(25.0), approx(25.0), approx(25.0))
    assert fc["energy_kwh"]["value"] == approx(2.5)  # k = 25 / 10


def test_account_adds_a_forecast_for_a_declared_step_target(store: Store) -> None:
    run = write_run(store, {1: step_times(MIXED)}, writers=[(1, MONO0, {"total_steps": 201})])
    s = {**summary(101), "notes": []}
    opts = AccountingOptions(environ={}, dmi_root=str(FIXTURES / "none"), region="FR")
    out = account(store, run, s, opts)
    assert out["forecast"]["wall_seconds_at_completion"]["value"] == approx(35.0)
    # --total-steps wins over what the program declared
    flag = AccountingOptions(
        environ={}, dmi_root=str(FIXTURES / "none"), region="FR", total_steps=101
    )
    assert account(store, run, s, flag)["forecast"]["complete"] is True
