"""What the readers share: decoding a file to lines with a clear error, timestamps, and the
builder that files rows under (job, GPU) and checks that time goes forward."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import io
import math
import statistics
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from computewatch.traces.records import GpuSeries, JobTrace, Trace, TraceError

_NVSMI_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


class Lines(Iterator[tuple[int, str]]):
    """The lines of a text file (numbered from 1, without their end of line), decoded one at
    a time, so that a long log is never held whole: UTF-8 (a byte-order mark is dropped), or
    UTF-16 when the file starts with its byte-order mark (Windows PowerShell's ``>`` writes
    it); binary or undecodable content is an error naming the file and the line.

    Two ways a log is cut are told apart from binary data: NUL bytes that end the file (a
    filesystem that had allocated the log's last block when the machine stopped, a killed
    copy) are not read, and counted in :attr:`nul_tail`; a last line without its end of line
    (a log cut while written: a redirected log is written in blocks) is numbered in
    :attr:`cut` by the time it is yielded, so that a reader can drop it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cut = 0  # the number of the last line when it has no end of line
        self.nul_tail = 0  # NUL bytes that end the file, not read
        self._it = self._lines()

    def __next__(self) -> tuple[int, str]:
        return next(self._it)

    def _lines(self) -> Iterator[tuple[int, str]]:
        path = self.path
        try:
            fh = path.open("rb")
        except OSError as e:
            raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
        with fh:
            try:
                head = fh.read(8192)  # a binary file is said to be one, not "not UTF-8 on line 1"
                if head.startswith(_UTF16_BOMS):
                    fh.seek(0)
                    yield from _utf16_lines(path, fh, self)
                    return
                end, size = _content_end(fh)
                fh.seek(0)
            except OSError as e:
                raise TraceError(
                    f"{path}: cannot read: {e.strerror or 'not a regular file'}"
                ) from None
            self.nul_tail = size - end
            nul = head.find(b"\x00", 0, end)
            if nul >= 0:
                line = head.count(b"\n", 0, nul) + 1
                raise TraceError(f"{path}:{line}: binary data (a NUL byte), not a CSV text file")
            n = 0
            pos = 0
            while pos < end:
                try:
                    raw = fh.readline(end - pos)
                except OSError as e:
                    raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
                if not raw:
                    return
                pos += len(raw)
                n += 1
                if b"\x00" in raw:
                    raise TraceError(f"{path}:{n}: binary data (a NUL byte), not a CSV text file")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if not raw.endswith(b"\n") and e.reason == "unexpected end of data":
                        text = raw[: e.start].decode("utf-8")  # a character cut with its line
                    else:
                        raise TraceError(
                            f"{path}:{n}: not UTF-8 text (byte 0x{raw[e.start]:02x}); "
                            "re-encode the file as UTF-8"
                        ) from None
                if n == 1 and text.startswith("\ufeff"):
                    text = text[1:]
                if not raw.endswith(b"\n"):
                    self.cut = n
                yield n, text.rstrip("\r\n")


def iter_lines(path: Path) -> Lines:
    """The lines of ``path``: :class:`Lines`."""
    return Lines(path)


def cut_notes(lines: Lines, cut: int) -> list[str]:
    """The notes for a log cut while written: its last line ``cut`` dropped (0: none), the NUL
    bytes that ended it."""
    out: list[str] = []
    if cut:
        out.append(f"the last line was cut (line {cut}, no end of line): dropped")
    if lines.nul_tail:
        out.append(f"the file ends in {lines.nul_tail} NUL bytes (a log cut by a crash): ignored")
    return out


def _content_end(fh: IO[bytes]) -> tuple[int, int]:
    """Where the file's content ends (its size less the NUL bytes that end it), and its size."""
    end = size = fh.seek(0, 2)
    while end > 0:
        step = min(end, 1 << 16)
        fh.seek(end - step)
        block = fh.read(step).rstrip(b"\x00")
        end -= step - len(block)
        if block:
            break
    return end, size


def _utf16_lines(path: Path, fh: IO[bytes], lines: Lines) -> Iterator[tuple[int, str]]:
    """The lines of a UTF-16 file that starts with its byte-order mark (the codec reads it);
    a last line without its end of line is numbered in ``lines.cut``."""
    text = io.TextIOWrapper(fh, encoding="utf-16", newline=None)
    n = 0
    try:
        while True:
            try:
                line = text.readline()
            except UnicodeDecodeError:
                raise TraceError(
                    f"{path}:{n + 1}: not UTF-16 text, though the file starts with UTF-16's "
                    "byte-order mark; re-encode the file as UTF-8"
                ) from None
            except OSError as e:
                raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
            if not line:
                return
            n += 1
            if "\x00" in line:
                raise TraceError(f"{path}:{n}: binary data (a NUL character), not a text file")
            if not line.endswith("\n"):
                lines.cut = n
            yield n, line.rstrip("\r\n")
    finally:
        text.detach()


def first_line_text(head: bytes) -> str:
    """The first line of a file's first bytes as text (UTF-16 by its byte-order mark, else
    UTF-8 with undecodable bytes replaced), for guessing its format."""
    if head.startswith(_UTF16_BOMS):
        text = head.decode("utf-16", "replace")
    else:
        text = head.decode("utf-8", "replace").removeprefix("\ufeff")
    return text.splitlines()[0] if text else ""


@dataclasses.dataclass(frozen=True, slots=True)
class Bound:
    """The values a series can plausibly hold (SI units, inclusive), as said to the user."""

    low: float
    high: float
    text: str


@functools.cache
def bounds() -> dict[str, Bound]:
    """The plausible range of each series an imported log may carry (docs/import.md): ratios
    0-100 % (fans 0-200 %: NVML's fan speed may exceed 100 %); power 0 to twice the largest TDP
    in the catalog (an instant reading may exceed the TDP, not double it); memory 0 to four
    times the largest memory in the catalog; temperatures -40 to 150 degrees C (no GPU runs
    past its ~90-105 degree shutdown); clocks 0-10 GHz; PCIe 0-1 TB/s (PCIe 7.0 x16 is 242
    GB/s); a job's network 0-10 TB/s."""
    from computewatch.catalog import load_accelerators  # the catalog: only when importing

    rows = load_accelerators().values()
    watts = 2.0 * max((a.tdp_watts or 0.0 for a in rows), default=1000.0)
    mem = 4.0 * max((a.memory_bytes for a in rows), default=192 * 2**30)
    ratio = Bound(0.0, 1.0, "0 to 100 %")
    power = Bound(0.0, watts, f"0 to {watts:g} W")
    memory = Bound(0.0, mem, f"0 to {mem / 2**30:g} GiB")
    clock = Bound(0.0, 10e9, "0 to 10000 MHz")
    pcie = Bound(0.0, 1e12, "0 to 1 TB/s")
    net = Bound(0.0, 1e13, "0 to 10 TB/s")
    return {
        "gpu_utilization_ratio": ratio,
        "gpu_memory_utilization_ratio": ratio,
        "gpu_fan_ratio": Bound(0.0, 2.0, "0 to 200 %"),
        "gpu_power_watts": power,
        "gpu_power_limit_watts": power,
        "gpu_temperature_celsius": Bound(-40.0, 150.0, "-40 to 150 °C"),
        "gpu_memory_used_bytes": memory,
        "gpu_memory_total_bytes": memory,
        "memory_free_bytes": memory,
        "gpu_sm_clock_hertz": clock,
        "gpu_memory_clock_hertz": clock,
        "gpu_pcie_receive_bytes_per_second": pcie,
        "gpu_pcie_transmit_bytes_per_second": pcie,
        "network_receive_bytes_per_second": net,
        "network_transmit_bytes_per_second": net,
    }


def implausible(where: str, column: str, text: str, bound: Bound) -> TraceError:
    """The error for a value no GPU can show, naming the line and the column."""
    return TraceError(
        f"{where}: {column}: {text.strip()[:40]} is not a plausible value ({bound.text})"
    )


def check_value(metric: str, value: float | None, where: str, column: str, text: str) -> None:
    """Raise :func:`implausible` for a value of ``metric`` outside :func:`bounds`."""
    if value is None:
        return
    b = bounds().get(metric)
    if b is not None and not b.low <= value <= b.high:
        raise implausible(where, column, text, b)


def parse_time(text: str, *, utc: bool, where: str) -> float:
    """Unix seconds from nvidia-smi's ``2024/01/31 12:34:56.789`` (local time unless ``utc``),
    ISO 8601 (naive: local unless ``utc``), or a number of Unix seconds."""
    s = text.strip()
    if len(s) >= 19 and s[4] == "/" and s[10] == " ":  # nvidia-smi's: the second is cached
        base = _SECONDS.get((s[:19], utc))
        if base is None:
            base = _nvsmi_second(s[:19], utc, where)
        frac = s[19:]
        if not frac:
            return base
        if frac[0] == "." and frac[1:].isdigit():
            return base + float("0" + frac)
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


_SECONDS: dict[tuple[str, bool], float] = {}


def _nvsmi_second(text: str, utc: bool, where: str) -> float:
    """Unix seconds of ``YYYY/MM/DD HH:MM:SS`` (local time unless ``utc``), remembered: the
    GPUs of one poll, and the polls of one second, share it."""
    try:
        t = dt.datetime.strptime(text, "%Y/%m/%d %H:%M:%S")
        if utc:
            t = t.replace(tzinfo=dt.UTC)
        v = t.timestamp()
    except (ValueError, OverflowError, OSError):
        raise TraceError(
            f"{where}: timestamp {text!r} is not nvidia-smi's 'YYYY/MM/DD HH:MM:SS.mmm'"
        ) from None
    if len(_SECONDS) > 4096:
        _SECONDS.clear()
    _SECONDS[(text, utc)] = v
    return v


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
            g = gpus[gpu] = GpuSeries(
                gpu, index, name, metrics={m: array("d") for m in self.metrics}
            )
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
                v = math.nan
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
                for m in [m for m, v in g.metrics.items() if all(math.isnan(x) for x in v)]:
                    del g.metrics[m]
                check_gaps(self.path, self.fmt, g, allow_gaps=allow_gaps, notes=notes)
        return Trace(str(self.path), self.fmt, jobs, self.rows, notes)


def where_of(path: Path, line: int, fmt: str) -> str:
    """``file:line`` for text files, ``file: row N`` for Parquet."""
    return f"{path}: row {line}" if fmt == "parquet" else f"{path}:{line}"


GAP_FACTOR = 10.0
GAP_MIN_SECONDS = 60.0


MEDIAN_SAMPLE = 100_000


def median_interval(times: Sequence[float]) -> float:
    """The median interval between samples (of at most 100,000 intervals spread evenly over
    the series); NaN with fewer than two samples."""
    n = len(times) - 1
    if n < 1:
        return math.nan
    step = max(1, n // MEDIAN_SAMPLE)
    return float(statistics.median(times[i + 1] - times[i] for i in range(0, n, step)))


def gap_limit(times: Sequence[float]) -> float:
    """The longest interval that is not a gap: ten times the median interval, at least 60 s."""
    if len(times) < 2:
        return math.inf
    return max(GAP_FACTOR * median_interval(times), GAP_MIN_SECONDS)


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
