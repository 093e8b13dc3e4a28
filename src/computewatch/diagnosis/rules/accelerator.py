"""Accelerator use: low utilization, low MFU for the hardware, and unused device memory."""

from __future__ import annotations

import itertools
from typing import Any

from computewatch.catalog.tpu import accelerator_kind
from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, stretches
from computewatch.diagnosis.rules import build, pct
from computewatch.diagnosis.stats import mean, median
from computewatch.units import format_bytes, format_percent

SPEEDUPS = (
    "bf16 mixed precision (torch.autocast(device_type='cuda', dtype=torch.bfloat16)), "
    "torch.compile(model), a fused optimizer (torch.optim.AdamW(..., fused=True)) and, for "
    "many small kernels, CUDA graphs (torch.compile(mode='reduce-overhead'))"
)


TPU_SPEEDUPS = (
    "jit the whole training step (jax.jit, torch_xla), keep shapes fixed so XLA does not "
    "recompile (pad batches), keep the input pipeline ahead of the chips (prefetch to device), "
    "and avoid host round trips inside the step (printing or .item() on device values)"
)


def _all_tpus(gpus: list[dict[str, Any]]) -> bool:
    return bool(gpus) and all(accelerator_kind(g.get("model")) == "TPU" for g in gpus)


def gpu_label(g: dict[str, Any]) -> str:
    """``GPU 0 NVIDIA H100 80GB HBM3`` (``TPU 0 Google TPU v5e`` for a TPU chip), marked
    ``(simulated)`` for a fake device."""
    sim = " (simulated)" if g.get("simulated") else ""
    kind = accelerator_kind(g.get("model"), g.get("uuid"))
    return f"{kind} {g.get('index')} {g.get('name') or ''}{sim}".replace("  ", " ").strip()


def low_gpu_utilization(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when a GPU the run used had a mean utilization below ``gpu_utilization_low``."""
    gpus = data.used_gpus()
    lines: list[str] = []
    numbers: dict[str, float | int | str | None] = {}
    ranges: list[TimeRange] = []
    lost = 0.0
    seen = 0
    # More work per launch shortens the time work is launched: the steps, when reported (an
    # idle stretch before or after them is the idle rule's, a start-up is not sped up by it).
    span = _steps_span(data)
    window = span[1] - span[0] if span is not None else data.duration
    for g in gpus:
        pts = [p for s in data.of("gpu_utilization_ratio", gpu=g["uuid"]) for p in s.points]
        if span is not None:
            inside = [p for p in pts if span[0] < p[0] <= span[1]]
            pts = inside if len(inside) >= 2 else pts
        if len(pts) < 2:
            continue
        seen += 1
        values = [u for _, u in pts]
        m = mean(values)
        if m >= th.gpu_utilization_low:
            continue
        lost += (1 - m / th.gpu_utilization_low) * window
        low = sum(1 for u in values if u < th.gpu_utilization_low) / len(values)
        lines.append(
            f"{gpu_label(g)}: utilization mean {pct(m)}, median {pct(median(values))}, below "
            f"{pct(th.gpu_utilization_low)} in {pct(low)} of {len(values)} samples"
        )
        numbers[f"gpu{g.get('index')}_utilization_mean"] = m
        flags = [
            (data.rel(t0), data.rel(t1), u < th.gpu_utilization_low)
            for (t0, _), (t1, u) in itertools.pairwise(pts)
        ]
        longest = max(stretches(flags), key=lambda r: r[1] - r[0], default=None)
        if longest is not None:
            ranges.append(TimeRange(*longest))
            lines.append(f"{gpu_label(g)}: longest low stretch {TimeRange(*longest).text()}")
    if not seen:
        raise NotApplicable("no GPU utilization series stored")
    if not lines:
        return []
    at_stake = lost / len(gpus)  # wall time of the whole allocation
    share = min(at_stake / data.duration, 1.0) if data.duration > 0 else 0.0
    return build(
        data,
        th,
        id="low_gpu_utilization",
        title=f"Low {'TPU' if _all_tpus(gpus) else 'GPU'} utilization",
        seconds=at_stake,
        saving=Saving(
            at_stake,
            0.5 * at_stake,
            at_stake,
            f"more work per launch until utilization reaches {pct(th.gpu_utilization_low)}",
            f"the same work done at {pct(th.gpu_utilization_low)} utilization (time scales "
            f"with utilization over the {'steps' if span else 'run'}: {pct(share)} of the run); "
            "low: half of that, where the host or the data loader also limit the steps",
            "accelerator",
            window,
        ),
        evidence=Evidence(tuple(lines), numbers, tuple(ranges)),
        suggestion=(
            "Give the TPU more work per step: a larger batch (see memory headroom), "
            f"{TPU_SPEEDUPS}. TPU utilization is libtpu's TensorCore duty cycle: the share of "
            "time a program ran, not how much of the matrix units it used."
            if _all_tpus(gpus)
            else "Give the GPU more work per launch: a larger batch (see memory headroom), "
            f"{SPEEDUPS}. If the data phase or one CPU core is the limit, fix that first."
        ),
    )


def _steps_span(data: RunData) -> tuple[float, float] | None:
    """From the first timed step's start to the last one's end (monotonic), or None."""
    times = [t for ts in data.step_times().values() for t in ts]
    if len(times) < 2:
        return None
    return min(t.start for t in times), max(t.end for t in times)


def _number(v: Any) -> float | None:
    if isinstance(v, dict):
        v = v.get("value")
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def low_mfu(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when the summary's MFU (counted FLOPs / (time x peak)) is below ``mfu_low``."""
    flops = data.summary.get("flops")
    mfu = _number(flops.get("mfu")) if isinstance(flops, dict) else None
    if mfu is None:
        raise NotApplicable(
            "no MFU in the summary (declare FLOPs with track(flops_per_step=...) or "
            "step(flops=...) on hardware with a known peak)"
        )
    if mfu >= th.mfu_low:
        return []
    target = max(th.mfu_target, th.mfu_low, 1e-9)
    at_stake = max(1 - mfu / target, 0.0) * data.duration
    lines = [f"MFU {format_percent(mfu)} (threshold {pct(th.mfu_low)}, well-tuned: {pct(target)})"]
    numbers: dict[str, float | int | str | None] = {"mfu": mfu, "mfu_target": target}
    assert isinstance(flops, dict)
    for key in ("hfu", "peak_flops", "precision"):
        v = flops.get(key)
        v = v if isinstance(v, str) else _number(v)
        if v is not None:
            numbers[key] = v
            lines.append(f"{key}: {v:.4g}" if isinstance(v, float) else f"{key}: {v}")
    lines.append(
        f"at {pct(target)} MFU the same work would take {pct(min(mfu / target, 1))} of the time"
    )
    return build(
        data,
        th,
        id="low_mfu",
        title="Low model FLOPs utilization (MFU) for the hardware",
        seconds=at_stake,
        saving=_mfu_saving(data, mfu, target),
        evidence=Evidence(tuple(lines), numbers),
        suggestion=f"Raise arithmetic efficiency: {SPEEDUPS}; a larger batch per device; "
        "fused attention (torch.nn.functional.scaled_dot_product_attention).",
    )


def gpu_memory_headroom(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when the run's peak memory on a GPU stays below ``gpu_memory_used_low`` of it."""
    gpus = data.used_gpus()
    lines: list[str] = []
    numbers: dict[str, float | int | str | None] = {}
    checked = 0
    for g in gpus:
        total = _number(g.get("memory_total_bytes"))
        peak = _number(g.get("process_memory_peak_bytes"))
        whose = "the run's processes"
        if peak is None:
            peak, whose = _number(g.get("memory_peak_bytes")), "all processes"
        if not total or peak is None:
            continue
        checked += 1
        share = peak / total
        if share >= th.gpu_memory_used_low:
            continue
        lines.append(
            f"{gpu_label(g)}: peak {format_bytes(peak)} of {format_bytes(total)} "
            f"({pct(share)}, {whose}); "
            f"{format_bytes(total - peak)} never used"
        )
        numbers[f"gpu{g.get('index')}_memory_peak_bytes"] = peak
        numbers[f"gpu{g.get('index')}_memory_total_bytes"] = total
    if not checked:
        raise NotApplicable("no GPU memory figures in the summary")
    if not lines:
        return []
    return build(
        data,
        th,
        id="gpu_memory_headroom",
        title=f"{'TPU' if _all_tpus(gpus) else 'GPU'} memory headroom: room for a larger batch",
        seconds=None,
        severity="low",
        keep_small=True,
        saving=Saving.nothing(
            "an opportunity, not a loss: what a larger batch would win is counted by low "
            "utilization or low MFU, where they fire",
            part="accelerator",
        ),
        evidence=Evidence(tuple(lines), numbers),
        suggestion=(
            "Use the memory: raise the batch size (activations grow with it; scale the learning "
            "rate with it) or run fewer, larger jobs per GPU; if the batch must stay, turn "
            "activation checkpointing off to trade the spare memory for speed."
        ),
    )


def _mfu_saving(data: RunData, mfu: float, target: float) -> Saving:
    """Raising MFU shortens the steps only (Amdahl): the run's FLOPs are done in its step time
    (the processes' mean), at an MFU over the steps of ``mfu x duration / step time``; at
    ``target`` the steps take ``that / target`` of their time. Without steps, the whole run."""
    times = [sum(t.seconds for t in ts) for ts in data.step_times().values() if ts]
    steps = sum(times) / len(times) if times else 0.0
    span = steps if 0 < steps <= data.duration else data.duration
    m = min(mfu * data.duration / span, 1.0) if span > 0 else mfu

    def saved(to: float) -> float:
        return max(1 - m / to, 0.0) * span if m > 0 else 0.0

    over = "step time" if span is steps else "run"
    return Saving(
        saved(target),
        saved(min(2 * m, target)),
        saved(1.0),
        f"arithmetic efficiency raised to {pct(target)} MFU (larger batches, precision, "
        "compilation)",
        f"the FLOPs of the steps done at {pct(target)} of the hardware's peak: MFU over the "
        f"{over} is {format_percent(m)}, so the steps take MFU / {pct(target)} of their time "
        f"and the rest of the run is unchanged; low: MFU only doubled (at most to "
        f"{pct(target)}); high: the steps at the hardware's peak",
        "accelerator",
        span,
    )
