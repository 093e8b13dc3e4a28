"""GPU telemetry written by other tools (nvidia-smi CSV, dmon and pmon logs, long CSV/Parquet):
readers, and import as a stored run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from computewatch.traces._build import first_line_text
from computewatch.traces.long import read_long_csv, read_long_parquet
from computewatch.traces.nvsmi import read_nvidia_smi
from computewatch.traces.records import (
    METRICS,
    NETWORK_METRICS,
    GpuSeries,
    JobTrace,
    Trace,
    TraceError,
)

__all__ = [
    "FORMATS",
    "METRICS",
    "NETWORK_METRICS",
    "GpuSeries",
    "JobTrace",
    "Trace",
    "TraceError",
    "read_long_csv",
    "read_long_parquet",
    "read_nvidia_smi",
    "read_trace",
]

FORMATS = ("nvidia-smi", "csv", "parquet")


def read_trace(
    path: str | Path,
    fmt: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    job: str | None = None,
    utc: bool = False,
    allow_gaps: bool = False,
) -> Trace:
    """Read a trace in ``fmt`` (one of :data:`FORMATS`; ``None``: ``parquet`` for a
    ``.parquet`` file, else ``csv`` when the header has a ``gpu`` column, else ``nvidia-smi``:
    a ``--query-gpu`` CSV log, or a ``dmon`` or ``pmon`` log, told apart by their header).
    ``utc``: nvidia-smi timestamps are UTC rather than local time (the long format's naive times
    are always UTC)."""
    p = Path(path)
    if fmt is None:
        fmt = _guess(p)
    if fmt == "nvidia-smi":
        return read_nvidia_smi(p, columns=columns, job=job, utc=utc, allow_gaps=allow_gaps)
    if fmt == "csv":
        return read_long_csv(p, job=job, allow_gaps=allow_gaps)
    if fmt == "parquet":
        return read_long_parquet(p, job=job, allow_gaps=allow_gaps)
    raise TraceError(f"unknown trace format {fmt!r} (one of {', '.join(FORMATS)})", exit_code=2)


def _guess(p: Path) -> str:
    if p.suffix.lower() in (".parquet", ".pq"):
        return "parquet"
    try:
        with p.open("rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror or e}") from None
    if head.startswith(b"PAR1"):
        return "parquet"
    line = first_line_text(head)
    if line.lstrip().startswith("#"):  # nvidia-smi dmon or pmon ('#Date, Time, gpu, ...')
        return "nvidia-smi"
    cols = [c.strip().lower() for c in line.split(",")]
    return "csv" if "gpu" in cols else "nvidia-smi"
