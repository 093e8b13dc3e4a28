"""The ``gpus`` part of the run summary, against runs written into a store by hand."""

from __future__ import annotations

import io
from typing import Any

import pytest

from computewatch.analysis.summary import build_summary
from computewatch.readings import Kind, Labels, labels
from computewatch.store import COMPLETED, RunRow, Store
from computewatch.views.summary_text import print_summary

T0 = 1_700_000_000.0
MONO0 = 5000.0
GIB = 2**30
# Uneven tick times, so a duration that ignores them shows up.
TIMES = [0.0, 0.5, 1.5, 2.0, 3.0, 3.25, 4.0]
N = len(TIMES)

A, B, C = "GPU-aaaaaaaa", "GPU-bbbbbbbb", "GPU-cccccccc"

# Clock-event reasons (NVML bits): idle 0x1, applications clocks 0x2, SW power cap 0x4,
# HW thermal slowdown 0x40. Each mask holds from its tick to the next one.
MASKS = [0x1, 0x4, 0x4 | 0x40, 0x40, 0x2, 0x4 | 0x1, 0x40]
# sw_power_cap: ticks 1, 2, 5 -> 1.0 + 0.5 + 0.75; hw_thermal_slowdown: ticks 2, 3 -> 0.5 + 1.0
# (tick 6 ends the run: no interval follows it). Idle and applications clocks are not throttling.
THROTTLE = {"hw_thermal_slowdown": 1.5, "sw_power_cap": 2.25}

Values = list[float | None]  # None: no sample at that tick (a process not yet or no longer there)


def device(uuid: str, index: int, name: str = "NVIDIA A100-SXM4-80GB") -> dict[str, Any]:
    return {
        "index": index,
        "uuid": uuid,
        "name": name,
        "model": "A100-80GB",
        "memory_total_bytes": 80 * GIB,
        "power_limit_watts": 400.0,
        "mig_parent_uuid": None,
        "mig_index": None,
        "simulated": False,
        "capabilities": {"energy_counter": True},
    }


def gpu_series(uuid: str, scale: float = 1.0) -> list[tuple[str, Labels, Kind, Values]]:
    g = labels(gpu=uuid)
    return [
        ("gpu_utilization_ratio", g, Kind.GAUGE, [0.2, 0.4, 0.6, 0.8, 1.0, 0.5, 0.0]),
        ("gpu_memory_used_bytes", g, Kind.GAUGE, [x * GIB * scale for x in (1, 5, 9, 7, 3, 2, 1)]),
        ("gpu_memory_total_bytes", g, Kind.GAUGE, [80.0 * GIB] * N),
        ("gpu_power_watts", g, Kind.GAUGE, [100, 200, 300, 400, 300, 200, 100]),
        (
            "gpu_energy_joules_total",
            labels(gpu=uuid, method="counter"),
            Kind.COUNTER,
            [5000, 5050, 5250, 5400, 5700, 5775, 6000],
        ),
        ("gpu_clock_event_reasons", g, Kind.GAUGE, [float(m) for m in MASKS]),
        (
            "gpu_process_memory_used_bytes",
            labels(gpu=uuid, pid=101),
            Kind.GAUGE,
            [1 * GIB, 3 * GIB, 1 * GIB, 1 * GIB, 1 * GIB, 1 * GIB, 1 * GIB],
        ),
        (
            "gpu_process_memory_used_bytes",
            labels(gpu=uuid, pid=102),
            Kind.GAUGE,
            [3 * GIB, 1 * GIB, 2 * GIB, None, None, None, None],
        ),
        ("gpu_sm_active_ratio", g, Kind.GAUGE, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]),
        ("gpu_tensor_active_ratio", g, Kind.GAUGE, [0.0, 0.0, 0.7, 0.7, 0.7, 0.0, 0.0]),
    ]


def polled_series(uuid: str) -> list[tuple[str, Labels, Kind, Values]]:
    """A GPU without an energy counter or GPM (a T4, say), idle."""
    g = labels(gpu=uuid)
    return [
        ("gpu_utilization_ratio", g, Kind.GAUGE, [0.25] * N),
        ("gpu_memory_used_bytes", g, Kind.GAUGE, [2.0 * GIB] * N),
        ("gpu_power_watts", g, Kind.GAUGE, [30.0] * N),
        (
            "gpu_energy_joules_total",
            labels(gpu=uuid, method="polled"),
            Kind.COUNTER,
            [10, 20, 30, 40, 50, 60, 70],
        ),
        ("gpu_clock_event_reasons", g, Kind.GAUGE, [1.0] * N),  # idle throughout
    ]


def write_run(
    store: Store,
    series: list[tuple[str, Labels, Kind, Values]],
    *,
    gpus: list[dict[str, Any]],
    used: list[str],
    every: bool = False,
    run_id: str = "0b0b0b0b0b0b",
) -> RunRow:
    host = {
        "allowed_cores": 2.0,
        "logical_cpus": 8,
        "gpus": gpus,
        "gpus_used": used,
        "gpu_all": every,
    }
    rk = store.create_run(
        run_id=run_id,
        name="gpu-run",
        tags={},
        command=["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=0.5,
        host=host,
    )
    store.write_batch(
        rk,
        series=[(i, n, lb, k) for i, (n, lb, k, _) in enumerate(series)],
        ticks=[(seq, MONO0 + t, T0 + t) for seq, t in enumerate(TIMES)],
        samples=[
            (rk, seq, i, float(v))
            for i, (_, _, _, vals) in enumerate(series)
            for seq, v in enumerate(vals)
            if v is not None
        ],
        data_until=T0 + TIMES[-1],
    )
    store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + TIMES[-1])
    return store.run_by_key(rk)


def by_uuid(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["uuid"]: g for g in summary["gpus"]}


def test_every_gpu_figure_of_a_hand_computed_run(store: Store) -> None:
    run = write_run(
        store,
        gpu_series(A) + polled_series(B),
        gpus=[device(A, 0), device(B, 1, "Tesla T4")],
        used=[A, B],
    )
    gpus = by_uuid(build_summary(store, run))
    assert list(gpus) == [A, B]  # in device order
    a = gpus[A]
    assert a["index"] == 0
    assert a["name"] == "NVIDIA A100-SXM4-80GB"
    assert a["model"] == "A100-80GB"
    assert a["simulated"] is False
    assert a["mig_parent_uuid"] is None
    assert a["scope"] == "used by the run"
    assert a["utilization_mean"] == pytest.approx(3.5 / 7, abs=1e-4)
    assert a["memory_peak_bytes"] == 9 * GIB
    assert a["memory_total_bytes"] == 80 * GIB
    # Per tick the run's processes sum to 4, 4, 3, 1, 1, 1, 1 GiB: the peak is 4 GiB, not the
    # 3 + 3 GiB of each process's own peak.
    assert a["process_memory_peak_bytes"] == 4 * GIB
    assert a["power_mean_watts"] == pytest.approx(1600 / 7, abs=1e-4)
    assert a["energy_joules"] == 1000.0  # last - first of the counter
    assert a["energy_method"] == "counter"
    assert a["throttle_seconds"] == THROTTLE
    assert a["sm_active_mean"] == pytest.approx(0.4)
    assert a["tensor_active_mean"] == pytest.approx(0.3)

    b = gpus[B]
    assert b["name"] == "Tesla T4"
    assert b["utilization_mean"] == 0.25
    assert b["energy_joules"] == 60.0
    assert b["energy_method"] == "polled"
    assert b["throttle_seconds"] == {}  # idle is not throttling
    for absent in ("sm_active_mean", "tensor_active_mean", "process_memory_peak_bytes"):
        assert absent not in b
    assert "memory_total_bytes" not in b  # no such series


def test_unused_gpus_are_left_out(store: Store) -> None:
    run = write_run(
        store,
        gpu_series(A) + gpu_series(B, 0.5) + polled_series(C),
        gpus=[device(A, 0), device(B, 1), device(C, 2)],
        used=[B],
    )
    gpus = build_summary(store, run)["gpus"]
    assert [g["uuid"] for g in gpus] == [B]
    assert gpus[0]["memory_peak_bytes"] == int(4.5 * GIB)  # B's own series, not A's


def test_all_gpus_lists_every_device(store: Store) -> None:
    run = write_run(
        store,
        gpu_series(A) + gpu_series(B, 0.5) + polled_series(C),
        gpus=[device(A, 0), device(B, 1), device(C, 2)],
        used=[B],
        every=True,
    )
    gpus = by_uuid(build_summary(store, run))
    assert list(gpus) == [A, B, C]
    assert {g["scope"] for g in gpus.values()} == {"device"}
    assert gpus[A]["memory_peak_bytes"] == 9 * GIB
    assert gpus[C]["energy_method"] == "polled"


def test_no_gpu_used_and_no_gpu_at_all(store: Store) -> None:
    run = write_run(store, gpu_series(A), gpus=[device(A, 0)], used=[])
    assert build_summary(store, run)["gpus"] == []
    run = write_run(store, [], gpus=[], used=[], run_id="0c0c0c0c0c0c")
    assert build_summary(store, run)["gpus"] == []


def test_a_gpu_without_readings_has_no_made_up_figures(store: Store) -> None:
    run = write_run(store, [], gpus=[device(A, 0)], used=[A])
    [g] = build_summary(store, run)["gpus"]
    assert g["energy_joules"] is None
    assert g["energy_method"] is None
    assert g["throttle_seconds"] == {}
    for absent in ("utilization_mean", "memory_peak_bytes", "power_mean_watts"):
        assert absent not in g


def test_energy_across_a_switch_from_counter_to_polled(store: Store) -> None:
    """The counter stops answering mid-run: the source carries on with polled power from the
    counter's last value under method="polled". The run's energy is both parts."""
    series: list[tuple[str, Labels, Kind, Values]] = [
        (
            "gpu_energy_joules_total",
            labels(gpu=A, method="counter"),
            Kind.COUNTER,
            [0, 100, 200, None, None, None, None],
        ),
        (
            "gpu_energy_joules_total",
            labels(gpu=A, method="polled"),
            Kind.COUNTER,
            [None, None, None, 200, 300, 350, 400],
        ),
    ]
    run = write_run(store, series, gpus=[device(A, 0)], used=[A])
    [g] = build_summary(store, run)["gpus"]
    assert g["energy_joules"] == 400.0
    assert g["energy_method"] == "polled"  # part of it was polled: the weaker provenance


def test_simulated_and_mig_devices_are_said_so(store: Store) -> None:
    mig = "MIG-11111111"
    dev = device(A, 0) | {"simulated": True}
    inst = device(mig, 0, "NVIDIA A100-SXM4-80GB MIG 1g.10gb") | {"mig_parent_uuid": A}
    run = write_run(store, gpu_series(A), gpus=[dev, inst], used=[mig])
    [g] = build_summary(store, run)["gpus"]
    assert g["uuid"] == mig
    assert g["mig_parent_uuid"] == A
    run = write_run(store, gpu_series(A), gpus=[dev], used=[A], run_id="0d0d0d0d0d0d")
    [g] = build_summary(store, run)["gpus"]
    assert g["simulated"] is True


def test_the_text_summary_shows_each_gpu(store: Store) -> None:
    run = write_run(
        store,
        gpu_series(A) + polled_series(B),
        gpus=[device(A, 0) | {"simulated": True}, device(B, 1, "Tesla T4")],
        used=[A, B],
    )
    out = io.StringIO()
    print_summary(build_summary(store, run), out)
    text = " ".join(out.getvalue().split())
    assert "gpu 0 NVIDIA A100-SXM4-80GB (simulated)" in text
    assert "util 50.0%" in text
    assert "SM active 40.0%" in text
    assert "mem peak 9.0 GiB (run 4.0 GiB)" in text
    assert "1,000 J (counter)" in text
    # Throttling shorter than a minute keeps its fractions of a second.
    assert "throttled hw_thermal_slowdown 1.5 s, sw_power_cap 2.25 s" in text
    assert "gpu 1 Tesla T4 ·" in text
    assert "60 J (polled)" in text
    assert "Tesla T4 (simulated)" not in text
