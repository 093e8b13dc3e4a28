"""Runs of declared models as the compute tests build them: summaries with FLOPs by method, and
the run's compute (``lineage.compute.run_compute``), for tests/lineage and tests/governance."""

from __future__ import annotations

from typing import Any

from computewatch.lineage.compute import Declaration, RunCompute, run_compute


def flop_figure(v: float, spread: float = 0.0, method: str = "estimated") -> dict[str, Any]:
    """A FLOP figure as the accounting writes it: value, range, method."""
    return {"value": v, "low": v * (1 - spread), "high": v * (1 + spread), "unit": "FLOP",
            "method": method, "assumptions": [], "source": None}  # fmt: skip


def flops_summary(
    counted: float | None,
    hardware: float,
    *,
    tokens: float = 0.0,
    forecast: float | None = None,
    gpus: int = 8,
    hours: float = 10.0,
) -> dict[str, Any]:
    """The parts of a run summary the compute reads (FLOPs by method, GPUs, tokens). The GPUs
    are of a kind the catalog lacks, so no hardware bound applies to these round figures."""
    hw = flop_figure(hardware, 0.15)
    flops = {**flop_figure(counted, 0.0, "counted"), "hardware_estimate": hw} if counted else hw
    s: dict[str, Any] = {
        "flops": flops,
        "duration_seconds": hours * 3600,
        "gpus": [{"model": "TEST-GPU", "name": "test accelerator"}] * gpus,
        "energy": {"facility": flop_figure(100.0 * hours)},
        "steps": {"count": 10, "tokens_total": tokens},
    }
    if forecast is not None:
        s["forecast"] = {"flops": flop_figure(forecast, 0.1)}
    return s


def declared_run(
    i: str, decl: Declaration, summary: dict[str, Any], status: str = "completed"
) -> RunCompute:
    """The compute of run ``i``, declared as ``decl``."""
    return run_compute(i, summary, decl, status=status, started_at=0.0)


BASE = Declaration("acme-7b", None, "pretrain", 7e9)
TUNE = Declaration("acme-7b-chat", "acme-7b", "finetune", 7e9)
