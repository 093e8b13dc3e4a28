"""Argument types shared by the command line's commands (``computewatch`` and its ``agent`` and
``fleet`` subcommands, which the library must not import from ``computewatch.cli``).

Each turns one flag's text into a value or raises ``argparse.ArgumentTypeError`` saying why,
which argparse prints as one line before exiting with status 2.

The parsers' choices and limits are copied here, not imported: their modules (the catalog, the
supervisor, the exporters) cost tens of milliseconds to import, and ``computewatch --version``
must start in under 0.1 s. tests/cli/test_parser.py checks each copy against its source.
"""

from __future__ import annotations

import argparse
import math
import re

__all__ = [
    "BACKEND_CHOICES",
    "DEFAULT_LISTEN",
    "EXPORT_FORMATS",
    "GOVERNANCE_STAGES",
    "GROUPINGS",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "PRECISIONS",
    "count",
    "duration_seconds",
    "gpu_backend",
    "interval",
    "number",
    "pue",
    "seconds",
    "whole",
]

BACKEND_CHOICES = "auto|nvidia|amd|tpu|none|fake:PRESET|replay:FILE"  # sources.gpus
MIN_INTERVAL = 0.05  # sampling.supervisor and fleet.agent_config
MAX_INTERVAL = 3600.0
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")  # catalog
EXPORT_FORMATS = ("csv", "jsonl", "parquet", "chrome-trace")  # analysis.export
GROUPINGS = ("job", "user", "team", "gpu-model")  # metrics.model
DEFAULT_LISTEN = "127.0.0.1:9464"  # metrics.model
GOVERNANCE_STAGES = (
    "pretrain", "finetune", "rl", "synthetic-data", "distillation", "eval", "inference",
)  # governance.compute  # fmt: skip

_SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def whole(text: str) -> int:
    """A whole number of at least 1 (a count, a limit, an id)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def count(text: str) -> float:
    """A positive count such as ``7e9``, ``7B``, ``70b``, ``1.5T`` or ``125M``."""
    t = text.strip().lower()
    scale = _SUFFIXES.get(t[-1:], 1.0) if t else 1.0
    if scale != 1.0:
        t = t[:-1]
    try:
        v = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 7e9 or 7B)") from None
    if not (math.isfinite(v) and 0 < v < 1e16):
        raise argparse.ArgumentTypeError(f"must be a positive count below 1e16, not {text!r}")
    return v


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str) -> float | None:
    """``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` in seconds; None for other text."""
    m = _DURATION.match(text)
    if m is None:
        return None
    seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    return seconds if math.isfinite(seconds) else None  # 400 digits read as inf


def number(text: str, what: str = "a number") -> float:
    """``text`` as a finite float (``what`` names it in the error): Python's float() also reads
    ``inf``, ``nan`` and ``1e400`` (as inf), which no flag means."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def seconds(text: str) -> float:
    """A positive, finite number of seconds (a length of time or a timeout)."""
    v = number(text, "a number of seconds")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return v


def interval(text: str, low: float, high: float) -> float:
    """Seconds between samples, from ``low`` to ``high``."""
    v = number(text, "a number of seconds")
    if not low <= v <= high:
        raise argparse.ArgumentTypeError(f"must be between {low} and {high:g} seconds, not {text}")
    return v


MAX_PUE = 10.0  # the configuration's energy.pue range (computewatch.config)


def pue(text: str) -> float:
    """A facility's power usage effectiveness: between 1 and 10, as in the configuration."""
    v = number(text)
    if not (math.isfinite(v) and 1 <= v <= MAX_PUE):
        raise argparse.ArgumentTypeError(
            f"a PUE is between 1 and {MAX_PUE:g} (facility energy / IT energy), not {text}"
        )
    return v


def gpu_backend(text: str, *, open_replay: bool = False) -> str:
    """A GPU backend spec, checked; with ``open_replay``, a ``replay:`` trace is read now, so
    that a bad one stops before a command starts."""
    # only when the flag is given: sources.gpus is not needed to start (start-up time)
    from computewatch.sources.gpus import GpuBackendError, check_spec, open_backend

    try:
        spec = check_spec(text)
        if open_replay and spec.startswith("replay:"):
            open_backend(spec).close()
        return spec
    except GpuBackendError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
