"""What the readers share: decoding a file to lines with a clear error, timestamps, and the
builder that files rows under (job, GPU) and checks that time goes forward."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import statistics
from pathlib import Path

from computewatch.traces.records import GpuSeries, JobTrace, Trace, TraceError

_NVSMI_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def read_lines(path: Path) -> list[str]:
    """The file's lines, decoded as UTF-8; binary or undecodable content is an error naming the
    file and the line."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise TraceError(f"{path}:{line}: binary data (a NUL byte), not a CSV text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TraceError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
            "re-encode the file as UTF-8"
        ) from None
    return text.splitlines()


def parse_time(text: str, *, utc: bool, where: str) -> float:
    """Unix seconds from nvidia-smi's ``2024/01/31 12:34:56.789`` (local time unless ``utc``),
    ISO 8601 (naive: local unless ``utc``), or a number of Unix seconds."""
    s = text.strip()
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(v) or v < 0 or v > 1e11:
            raise TraceError(f"{where}: timestamp {s!r} is not a time")
        return v
    t: dt.datetime | None = None
    for fmt in _NVSMI_TIME_FORMATS:
        try:
            t = dt.datetime.strptime(s, fmt)
            break
        except ValueError:
            continue
    if t is None:
        try:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
        except ValueError:
            raise TraceError(
                f"{where}: timestamp {s[:40]!r} is neither nvidia-smi's "
                "'YYYY/MM/DD HH:MM:SS.mmm', ISO 8601, nor Unix seconds"
            ) from None
    if t.tzinfo is None and utc:
        t = t.replace(tzinfo=dt.UTC)
    try:
        return t.timestamp()
    except (OverflowError, OSError, ValueError):
        raise TraceError(f"{where}: timestamp {s[:40]!r} is out of range") from None


class Builder:
    """Files rows under (job, GPU), in file order; a time that goes backwards for one GPU is an
    error naming both lines; a repeated time is dropped and counted."""

    def __init__(self, path: Path, fmt: str, metrics: list[str]) -> None:
        self.path = path
        self.fmt = fmt
        self.metrics = metrics
        self.jobs: dict[str, dict[str, GpuSeries]] = {}
        self.rows = 0
        self.repeated = 0
        self.na: dict[str, int] = {}

    def add(
        self,
        job: str,
        gpu: str,
        index: int | None,
        name: str | None,
        t: float,
        values: dict[str, float | None],
        line: int,
        where: str,
    ) -> None:
        gpus = self.jobs.setdefault(job, {})
        g = gpus.get(gpu)
        if g is None:
            g = gpus[gpu] = GpuSeries(gpu, index, name, metrics={m: [] for m in self.metrics})
        if g.times:
            last = g.times[-1]
            if t < last:
                raise TraceError(
                    f"{where}: time goes backwards for GPU {gpu}"
                    f"{'' if job == '' else f' of job {job}'} "
                    f"(after {where_of(self.path, g.lines[-1], self.fmt)}); "
                    "sort the rows by time"
                )
            if t == last:
                self.repeated += 1
                return
        self.rows += 1
        g.times.append(t)
        g.lines.append(line)
        for m in self.metrics:
            v = values.get(m)
            if v is None:
                self.na[m] = self.na.get(m, 0) + 1
            g.metrics[m].append(v)
        if g.name is None and name:
            g.name = name

    def trace(self, default_job: str, *, allow_gaps: bool) -> Trace:
        if not self.rows:
            raise TraceError(f"{self.path}: no data rows")
        jobs = [
            JobTrace(job or default_job, list(gpus.values())) for job, gpus in self.jobs.items()
        ]
        notes: list[str] = []
        if self.repeated:
            notes.append(f"{self.repeated} rows repeated a GPU's previous timestamp: dropped")
        for m, n in sorted(self.na.items()):
            if n == self.rows:
                continue
            notes.append(f"{m}: {n} of {self.rows} values not given (N/A or empty)")
        for j in jobs:
            for g in j.gpus:
                for m in [m for m, v in g.metrics.items() if all(x is None for x in v)]:
                    del g.metrics[m]
                check_gaps(self.path, self.fmt, g, allow_gaps=allow_gaps, notes=notes)
        return Trace(str(self.path), self.fmt, jobs, self.rows, notes)


def where_of(path: Path, line: int, fmt: str) -> str:
    """``file:line`` for text files, ``file: row N`` for Parquet."""
    return f"{path}: row {line}" if fmt == "parquet" else f"{path}:{line}"


GAP_FACTOR = 10.0
GAP_MIN_SECONDS = 60.0


def gap_limit(times: list[float]) -> float:
    """The longest interval that is not a gap: ten times the median interval, at least 60 s."""
    if len(times) < 2:
        return math.inf
    med = statistics.median(b - a for a, b in itertools.pairwise(times))
    return max(GAP_FACTOR * med, GAP_MIN_SECONDS)


def check_gaps(path: Path, fmt: str, g: GpuSeries, *, allow_gaps: bool, notes: list[str]) -> None:
    """A gap (an interval over :func:`gap_limit`) is an error naming the line after it, unless
    gaps are allowed; then a note says how many there were."""
    limit = gap_limit(g.times)
    gaps = 0
    for i in range(1, len(g.times)):
        d = g.times[i] - g.times[i - 1]
        if d > limit:
            if not allow_gaps:
                raise TraceError(
                    f"{where_of(path, g.lines[i], fmt)}: a gap of {d:.0f} s in GPU {g.key}'s "
                    f"samples (the limit is {limit:.0f} s, ten times the median interval); "
                    "split the file, or pass --allow-gaps"
                )
            gaps += 1
    if gaps:
        notes.append(
            f"GPU {g.key}: {gaps} gaps over {limit:.0f} s: nothing is integrated across them"
        )
