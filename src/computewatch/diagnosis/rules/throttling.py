"""GPU clocks held down by the power cap or by heat (NVML clock-event reasons)."""

from __future__ import annotations

import itertools

from computewatch.catalog.clock_events import decode_clock_events
from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, stretches
from computewatch.diagnosis.rules import build, pct
from computewatch.diagnosis.rules.accelerator import gpu_label
from computewatch.diagnosis.stats import mean
from computewatch.units import format_seconds

THERMAL = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})
POWER = frozenset({"sw_power_cap", "hw_power_brake_slowdown", "board_limit"})


def gpu_throttling(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when a GPU spent ``throttle_share`` of the run or more throttled for power or heat.
    The time at stake is the throttled time scaled by how far the SM clock fell below the
    highest clock seen (the throttled time itself where clocks were not read)."""
    gpus = data.used_gpus()
    lines: list[str] = []
    numbers: dict[str, float | int | str | None] = {}
    ranges: list[TimeRange] = []
    lost = 0.0
    throttled_all = 0.0
    measured_drop = True
    kinds: set[str] = set()
    read_any = False
    for g in gpus:
        uuid = g["uuid"]
        pts = [p for s in data.of("gpu_clock_event_reasons", gpu=uuid) for p in s.points]
        per_reason: dict[str, float] = {}
        flags = []
        if len(pts) >= 2:
            read_any = True
            for (t0, _), (t1, mask) in itertools.pairwise(pts):
                reasons = set(decode_clock_events(mask)) & (THERMAL | POWER)
                for r in reasons:
                    per_reason[r] = per_reason.get(r, 0.0) + (t1 - t0)
                flags.append((t0, t1, bool(reasons)))
        else:  # samples gone (gc): the summary's figures
            stored = g.get("throttle_seconds") or {}
            if stored:
                read_any = True
            per_reason = {k: float(v) for k, v in stored.items() if k in THERMAL | POWER}
        spans = stretches(flags)
        throttled = sum(b - a for a, b in spans) if flags else max(per_reason.values(), default=0)
        if data.duration <= 0 or throttled / data.duration < th.throttle_share:
            continue
        slowdown = _clock_drop(data, uuid, spans)
        # Only the time the GPU was busy runs faster at a higher clock: the throttled time
        # weighted by the utilization then (all of it where utilization was not read).
        util = {t: u for s in data.of("gpu_utilization_ratio", gpu=uuid) for t, u in s.points}
        busy = sum((t1 - t0) * util.get(t1, 1.0) for t0, t1, on in flags if on) if flags else None
        lost += (throttled if busy is None else busy) * (slowdown if slowdown is not None else 1.0)
        throttled_all += throttled
        measured_drop = measured_drop and slowdown is not None
        kinds |= {"thermal" if r in THERMAL else "power" for r in per_reason}
        detail = ", ".join(f"{r} {format_seconds(v)}" for r, v in sorted(per_reason.items()))
        lines.append(
            f"{gpu_label(g)}: throttled {format_seconds(throttled)} "
            f"({pct(throttled / data.duration)} of the run): {detail}"
        )
        numbers[f"gpu{g.get('index')}_throttled_seconds"] = throttled
        if slowdown is not None:
            lines.append(
                f"{gpu_label(g)}: SM clock {pct(slowdown)} below its highest while throttled"
            )
            numbers[f"gpu{g.get('index')}_clock_drop"] = slowdown
        temps = [v for s in data.of("gpu_temperature_celsius", gpu=uuid) for _, v in s.points]
        if temps:
            lines.append(f"{gpu_label(g)}: temperature up to {max(temps):.0f} °C")
        ranges += [TimeRange(data.rel(a), data.rel(b)) for a, b in
                   sorted(spans, key=lambda r: r[0] - r[1])[:3]]  # fmt: skip
    if not read_any:
        raise NotApplicable("no clock-event (throttle) readings stored")
    if not lines:
        return []
    what = " and ".join(sorted(kinds)) or "power"
    advice = []
    if "thermal" in kinds:
        advice.append(
            "thermal: check cooling (fans, airflow, inlet temperature, dust) and report the "
            "node to its operators"
        )
    if "power" in kinds:
        advice.append(
            "power: the board hits its power limit; check the limit is the default "
            "(nvidia-smi -q -d POWER), and expect it for power-hungry kernels: lower precision "
            "(bf16/fp8) does more work per watt"
        )
    return build(
        data,
        th,
        id="gpu_throttling",
        title=f"GPU {what} throttling",
        seconds=throttled_all / len(gpus),
        saving=Saving(
            lost / len(gpus),
            (0.5 if measured_drop else 0.0) * lost / len(gpus),
            lost / len(gpus),
            "the GPU's clocks restored (cooling, or the default power limit)",
            "the throttled stretches run at the highest SM clock seen, their busy time (weighted "
            "by the GPU's utilization) scaling with the clock (work bound by the GPU's "
            "compute); low: half of that, for work bound by "
            "memory, which the SM clock does not speed up"
            + ("" if measured_drop else "; the clocks were not read: the whole throttled time"),
            "accelerator-clock",
            throttled_all / len(gpus),
        ),
        evidence=Evidence(tuple(lines), numbers, tuple(ranges)),
        suggestion="; ".join(advice).capitalize() + ".",
    )


def _clock_drop(data: RunData, uuid: str, spans: list[tuple[float, float]]) -> float | None:
    """1 - (mean SM clock while throttled / highest SM clock of the run), or None."""
    pts = [p for s in data.of("gpu_sm_clock_hertz", gpu=uuid) for p in s.points]
    if not pts or not spans:
        return None
    top = max(v for _, v in pts)
    during = [v for t, v in pts if any(a < t <= b for a, b in spans)]
    if top <= 0 or not during:
        return None
    return max(1 - mean(during) / top, 0.0)
