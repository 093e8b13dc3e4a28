"""FLOPs of a run: counted when the program reports them, otherwise estimated from hardware
time (Epoch AI's method: time × devices × peak FLOP/s × utilization).

Counted FLOPs also give the run's model FLOPs utilization (MFU: model FLOPs / (time × peak)),
its hardware FLOPs utilization (HFU, where activation recomputation is declared) and the FLOP/s
it achieved; the hardware estimate stays alongside for comparison.

One FLOP is one floating-point operation; a fused multiply-add counts as two (several popular
counters report MACs, half as many). Peaks are the catalog's dense figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from computewatch.accounting.tally import StepTally
from computewatch.analysis.summary_types import (
    FlopsDevice,
    FlopsSection,
    FlopThreshold,
    GpuStats,
    RunSummary,
)
from computewatch.catalog import PRECISIONS, Accelerator, load_accelerators
from computewatch.catalog.tpu import devices_word
from computewatch.records import COUNTED, ESTIMATED, figure
from computewatch.store import RunRow, StepRow, Store

# Epoch AI, "Estimating training compute": observed utilization is typically 30% (large language
# models) to 40% (other models) of the peak. Applied to the time a kernel was running.
UTILIZATION_LOW = 0.30
UTILIZATION_HIGH = 0.40
UTILIZATION_SOURCE = "Epoch AI, Estimating Training Compute of Deep Learning Models (2022)"
DEFAULT_PRECISIONS = ("bf16", "fp16", "fp32")  # the first one the device has, when not declared

# Regulatory thresholds in FLOP of cumulative training compute.
THRESHOLDS: tuple[tuple[float, str], ...] = (
    (1e25, "EU AI Act Art. 51(2): presumption of systemic risk"),
    (1e26, "California SB 53: frontier model"),
)
APPROACHED_FRACTION = 0.10  # a threshold is "approached" from 10% of it
PF_DAY_FLOP = 1e15 * 86_400


def hardware_estimate(
    gpus: Sequence[GpuStats], duration_seconds: float, precision: str | None = None
) -> FlopsSection:
    """The hardware-time FLOPs estimate of a run from its summary's ``gpus`` and duration."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
        )
    catalog = load_accelerators()
    total = 0.0
    devices: list[FlopsDevice] = []
    assumptions: list[str] = []
    missing: list[str] = []
    for g in gpus:
        found = _peak(g, precision, catalog)
        if isinstance(found, str):
            missing.append(found)
            continue
        acc, prec, peak = found
        active = g.get("utilization_mean")
        active = 1.0 if active is None else float(active)
        device_seconds = duration_seconds * active
        flop = device_seconds * peak * 1e12
        total += flop
        devices.append(
            {
                "uuid": g.get("uuid"),
                "model": acc.model,
                "precision": prec,
                "peak_flop_per_second": peak * 1e12,
                "active_seconds": round(device_seconds, 3),
                "simulated": bool(g.get("simulated")),
            }
        )
        assumptions.append(
            f"{acc.model}: {peak:g} TFLOP/s dense {prec} peak ({acc.source}, {acc.year}) × "
            f"{device_seconds:.0f} s with kernels running "
            f"({active:.0%} of {duration_seconds:.0f} s)"
        )
    if not devices:
        none = figure(None, "FLOP", ESTIMATED, assumptions=missing or ["no accelerator used"])
        out = cast(FlopsSection, none)  # a Figure is a FlopsSection without its extra keys
        out["devices"] = []
        return out
    assumptions.append(
        f"utilization of the peak while active {UTILIZATION_LOW:.0%}-{UTILIZATION_HIGH:.0%} "
        f"({UTILIZATION_SOURCE}); central figure the midpoint"
    )
    assumptions.extend(missing)
    mid = (UTILIZATION_LOW + UTILIZATION_HIGH) / 2
    out = cast(
        FlopsSection,
        figure(
            total * mid,
            "FLOP",
            ESTIMATED,
            low=total * UTILIZATION_LOW,
            high=total * UTILIZATION_HIGH,
            assumptions=assumptions,
            source=UTILIZATION_SOURCE,
            digits=6,
        ),
    )
    out["devices"] = devices
    out["pf_days"] = round(total * mid / (1e15 * 86400), 9)
    out["thresholds"] = thresholds(total * UTILIZATION_HIGH)
    return out


def _peak(
    gpu: GpuStats, precision: str | None, catalog: Mapping[str, Accelerator]
) -> tuple[Accelerator, str, float] | str:
    """A GPU's catalog entry, precision and dense peak TFLOP/s (``precision``, else the first
    of bf16, fp16, fp32 it has), or why there is none."""
    acc = catalog.get(str(gpu.get("model"))) if gpu.get("model") else None
    if acc is None:
        return f"{gpu.get('name')}: not in the hardware catalog"
    prec = precision or next(
        (p for p in DEFAULT_PRECISIONS if acc.peak_tflops(p) is not None), None
    )
    peak = acc.peak_tflops(prec) if prec else None
    if prec is None or peak is None:
        return f"{gpu.get('name')}: no {precision or 'bf16/fp16/fp32'} peak in the catalog"
    return acc, prec, peak


def thresholds(flop: float) -> list[FlopThreshold]:
    """The regulatory thresholds with how far ``flop`` is from each: ``crossed``, the
    ``fraction`` reached, and ``approached`` (not crossed, but at least 10% of it)."""
    return [
        {
            "flop": t,
            "name": name,
            "crossed": flop >= t,
            "fraction": flop / t,
            "approached": APPROACHED_FRACTION * t <= flop < t,
        }
        for t, name in THRESHOLDS
    ]


def run_flops(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    precision: str | None = None,
    steps: Sequence[StepRow] | StepTally | None = None,
) -> FlopsSection:
    """The ``flops`` section of a run's summary: counted (with MFU) when its steps carry
    FLOPs, else the hardware-time estimate. ``steps``: the run's (or their tally), when
    already read."""
    gpus = list(summary.get("gpus") or [])
    estimate = hardware_estimate(gpus, float(summary.get("duration_seconds") or 0.0), precision)
    if steps is None:
        steps = store.steps(run.key)
    if isinstance(steps, StepTally):
        if not steps.with_flops:
            return estimate
    elif not any(s.flops is not None for s in steps):
        return estimate
    return counted_flops(steps, store.writers(run.key), gpus, estimate, precision)


def counted_flops(
    steps: Sequence[StepRow] | StepTally,
    writers: Mapping[int, tuple[float, Mapping[str, Any]]],
    gpus: Sequence[GpuStats],
    estimate: FlopsSection,
    precision: str | None = None,
) -> FlopsSection:
    """The counted ``flops`` section: the steps' model FLOPs summed, the FLOP/s achieved, MFU
    and (where recomputation is declared) HFU, thresholds, and the hardware ``estimate``.
    ``steps``: the run's rows, or their :class:`StepTally` (what the live uploader keeps).

    Time is each process's step window, from its first step to its last (the first step's
    FLOPs left out: its start includes warm-up and setup); a process with one step is timed
    from its ``track()`` start. The windows of processes running at once overlap: the run's
    step time is the length of their union. MFU = FLOPs in the windows / available FLOPs,
    where available is Σ window × ``peak_flops`` when every process declared its peak, else
    step time × the catalog peaks of the GPUs the run used (at ``precision``)."""
    tally = steps if isinstance(steps, StepTally) else StepTally.of(steps)
    total = 0.0
    win_flops = win_hw_flops = 0.0
    windows: list[tuple[float, float]] = []
    declared_peak_seconds = 0.0  # Σ window × declared peak
    undeclared: list[int] = []
    factors: set[float] = set()
    for pid, p in sorted(tally.by_pid.items()):
        meta: tuple[float | None, Mapping[str, Any]] = writers.get(pid, (None, {}))
        settings = dict(meta[1].get("settings") or {})
        factor = float(settings.get("recompute_factor") or 1.0)
        if "recompute_factor" in settings:
            factors.add(factor)
        total += p.flops
        start = meta[0]
        if p.count >= 2:
            window, in_window = (p.first_mono, p.last_mono), p.flops_after_first
        elif start is not None and start < p.first_mono:
            window, in_window = (start, p.first_mono), p.first_flops
        else:
            continue
        if window[1] <= window[0] or in_window <= 0:
            continue
        windows.append(window)
        win_flops += in_window
        win_hw_flops += in_window * factor
        peak = settings.get("peak_flops")
        if peak:
            declared_peak_seconds += (window[1] - window[0]) * float(peak)
        else:
            undeclared.append(pid)
    counted_steps, n_all = tally.with_flops, tally.count
    step_time = _union_length(windows)
    counted = figure(
        total,
        "FLOP",
        COUNTED,
        assumptions=[
            f"model FLOPs reported by the program for {counted_steps} of {n_all} steps "
            "(step(flops=...), or flops_per_step / flops_per_token × tokens)",
        ],
        source="the program's own count",
        digits=12,
    )
    out = cast(FlopsSection, counted)  # a Figure is a FlopsSection without its extra keys
    out["steps_with_flops"] = counted_steps
    out["pf_days"] = round(total / PF_DAY_FLOP, 12)
    out["thresholds"] = thresholds(total)
    out["step_time_seconds"] = round(step_time, 6) if windows else None
    timing = (
        f"{win_flops:.4g} FLOP in the step windows (each process's first to last step, the "
        f"first step left out) over {step_time:.3f} s of step time"
    )
    if step_time > 0:
        out["flops_per_second"] = figure(
            win_flops / step_time, "FLOP/s", COUNTED, assumptions=[timing]
        )
    else:
        out["flops_per_second"] = figure(
            None, "FLOP/s", COUNTED, assumptions=["no step window: fewer than two steps"]
        )
    available, peak_total, prec, peak_notes = _available(
        windows, step_time, declared_peak_seconds, undeclared, gpus, precision
    )
    out["peak_flops"] = peak_total
    out["precision"] = prec
    if available is None:
        out["mfu"] = figure(None, "ratio", COUNTED, assumptions=peak_notes)
    else:
        mfu = win_flops / available
        if mfu > 1:  # more than the hardware can do: a peak or a FLOPs figure is wrong
            peak_notes.append("above 1: the peak is too low or the FLOPs per step too high")
        out["mfu"] = figure(mfu, "ratio", COUNTED, assumptions=[timing, *peak_notes], digits=4)
        if factors:
            how = ", ".join(f"{f:g}" for f in sorted(factors))
            out["hfu"] = figure(
                win_hw_flops / available,
                "ratio",
                COUNTED,
                assumptions=[f"MFU × declared recompute factor {how} (hardware / model FLOPs)"],
                digits=4,
            )
    out["hardware_estimate"] = estimate
    return out


def _available(
    windows: Sequence[tuple[float, float]],
    step_time: float,
    declared_peak_seconds: float,
    undeclared: Sequence[int],
    gpus: Sequence[GpuStats],
    precision: str | None,
) -> tuple[float | None, float | None, str | None, list[str]]:
    """FLOPs the hardware could have done over the step windows, the peak FLOP/s behind it,
    the precision of that peak (None when declared), and how they were found (or why there is
    no MFU)."""
    if not windows or step_time <= 0:
        return None, None, None, ["no MFU: no step window (fewer than two steps)"]
    if not undeclared:
        peak = declared_peak_seconds / sum(b - a for a, b in windows)
        return (
            declared_peak_seconds,
            peak,
            None,
            [f"peak {peak:.4g} FLOP/s declared by the program (peak_flops=)"],
        )
    used = [g for g in gpus if g.get("scope") != "device"] or list(gpus)
    if not used:
        return (
            None,
            None,
            None,
            [
                "no MFU: no accelerator used and no peak FLOP/s declared; pass "
                "peak_flops= to track() (the peak of the CPU or device the run uses)"
            ],
        )
    catalog = load_accelerators()
    peaks: list[float] = []
    precs: set[str] = set()
    notes: list[str] = []
    for g in used:
        found = _peak(g, precision, catalog)
        if isinstance(found, str):
            return None, None, None, [f"no MFU: {found}; pass peak_flops= to track()"]
        acc, prec, tflops = found
        precs.add(prec)
        peaks.append(tflops * 1e12)
        notes.append(
            f"{acc.model}: {tflops:g} TFLOP/s dense {prec} peak ({acc.source}, {acc.year})"
        )
    peak = sum(peaks)
    return (
        step_time * peak,
        peak,
        "/".join(sorted(precs)),
        [
            f"step time × {len(peaks)} {devices_word([g.get('model') for g in used])}(s) × "
            f"their peak ({peak:.4g} FLOP/s in all)",
            *notes,
        ],
    )


def _union_length(windows: Sequence[tuple[float, float]]) -> float:
    """Total length of the union of intervals (overlapping ones counted once)."""
    total = 0.0
    end = float("-inf")
    for a, b in sorted(windows):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
