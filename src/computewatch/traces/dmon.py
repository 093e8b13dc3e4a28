"""Read the logs of ``nvidia-smi dmon`` (one row per GPU per sample) and ``nvidia-smi pmon``
(one row per process per GPU per sample) written with ``-o DT``, into the same series as the
CSV reader (:mod:`computewatch.traces.nvsmi`).

Both print a header line and a units line, each starting with ``#``, and print them again
every so often::

    #Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk
    #YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz
     20240131   12:00:00      0    250     50      -     45     10      0      0   2619   1980

Values are separated by spaces (commas with ``--format csv``), ``-`` where the tool has no
value. Without ``-o DT`` the rows carry no time, and the log cannot be placed in time: that is
an error saying so. A pmon log's processes are summed per GPU and sample (an idle GPU's row,
``-`` for its process, is 0).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from computewatch.traces._build import Builder, Lines, bounds, cut_notes, implausible
from computewatch.traces.records import Trace, TraceError

__all__ = ["DMON_FIELDS", "PMON_FIELDS", "read_monitor_log"]

_MIB = float(2**20)

DMON_FIELDS: dict[str, tuple[str, float]] = {
    "pwr": ("gpu_power_watts", 1.0),
    "gtemp": ("gpu_temperature_celsius", 1.0),
    "sm": ("gpu_utilization_ratio", 0.01),
    "mem": ("gpu_memory_utilization_ratio", 0.01),
    "mclk": ("gpu_memory_clock_hertz", 1e6),
    "pclk": ("gpu_sm_clock_hertz", 1e6),
    "fb": ("gpu_memory_used_bytes", _MIB),
    "rxpci": ("gpu_pcie_receive_bytes_per_second", _MIB),
    "txpci": ("gpu_pcie_transmit_bytes_per_second", _MIB),
}
"""dmon columns read, the series each becomes (the CSV reader's names: ``sm`` is NVML's
utilization rate, as ``utilization.gpu``; ``pclk`` the graphics clock, the SM clock on current
GPUs), and the scale of dmon's units (W, C, %, MHz, MB = MiB, MB/s) to SI."""

PMON_FIELDS: dict[str, tuple[str, float]] = {
    "sm": ("gpu_utilization_ratio", 0.01),
    "mem": ("gpu_memory_utilization_ratio", 0.01),
    "fb": ("gpu_memory_used_bytes", _MIB),
}
"""pmon columns read: each process's share, summed per GPU and sample (ratios capped at 1:
NVML's per-process samples may overlap)."""

_RATIOS = ("gpu_utilization_ratio", "gpu_memory_utilization_ratio")
_NA = frozenset({"-", "", "n/a", "[n/a]"})
_TIMES: dict[tuple[str, str, bool], float] = {}


def _tokens(line: str) -> list[str]:
    """The fields of a line: comma-separated (``--format csv``) or by spaces."""
    if "," in line:
        return [t.strip() for t in line.split(",")]
    return line.split()


def _time(date: str, clock: str, *, utc: bool, where: str) -> float:
    key = (date, clock, utc)
    v = _TIMES.get(key)
    if v is not None:
        return v
    try:
        t = dt.datetime.strptime(f"{date} {clock}", "%Y%m%d %H:%M:%S")
        if utc:
            t = t.replace(tzinfo=dt.UTC)
        v = t.timestamp()
    except (ValueError, OverflowError, OSError):
        raise TraceError(
            f"{where}: date and time {date[:12]!r} {clock[:12]!r} are not dmon's "
            "'YYYYMMDD HH:MM:SS'"
        ) from None
    if len(_TIMES) > 4096:
        _TIMES.clear()
    _TIMES[key] = v
    return v


class _Log:
    """The header of a dmon or pmon log and where its columns are."""

    def __init__(self, path: Path, header: list[str], line: int) -> None:
        self.header = header
        names = [h.lower() for h in header]
        self.kind = "pmon" if "pid" in names else "dmon"
        if "date" not in names or "time" not in names:
            raise TraceError(
                f"{path}:{line}: an nvidia-smi {self.kind} log with no Date and Time columns: "
                f"its rows have no time; log with nvidia-smi {self.kind} -o DT"
            )
        if "gpu" not in names:
            raise TraceError(f"{path}:{line}: no 'gpu' column in the {self.kind} header")
        self.i_date, self.i_time, self.i_gpu = (names.index(k) for k in ("date", "time", "gpu"))
        self.i_pid = names.index("pid") if self.kind == "pmon" else None
        fields = PMON_FIELDS if self.kind == "pmon" else DMON_FIELDS
        self.cols = [(i, n, *fields[n]) for i, n in enumerate(names) if n in fields]
        read = {"date", "time", "gpu", "pid", "type", "command", *fields}
        self.ignored = [h for h, n in zip(header, names, strict=True) if n not in read]
        if not self.cols:
            raise TraceError(
                f"{path}:{line}: none of the {self.kind} columns is one computewatch reads "
                f"({', '.join(fields)})"
            )
        self.width = len(header)
        self.command_last = names[-1] == "command"

    def fields(self, text: str, where: str) -> list[str]:
        f = _tokens(text)
        if self.command_last and len(f) > self.width:  # a command name with spaces in it
            f = [*f[: self.width - 1], " ".join(f[self.width - 1 :])]
        elif self.command_last and len(f) == self.width - 1:  # no command name
            f.append("")
        if len(f) != self.width:
            raise TraceError(f"{where}: {len(f)} fields where the header has {self.width}")
        return f


def _value(
    log: _Log, f: Sequence[str], i: int, metric: str, scale: float, where: str
) -> float | None:
    text = f[i]
    if text.lower() in _NA:
        return None
    try:
        v = float(text) * scale
    except ValueError:
        raise TraceError(
            f"{where}: column {i + 1} ({log.header[i]!r}): {text[:40]!r} is not a number"
        ) from None
    b = bounds()[metric]
    if not (math.isfinite(v) and b.low <= v <= b.high):
        raise implausible(where, f"column {i + 1} ({log.header[i]!r})", text, b)
    return v


def _rows(
    path: Path, lines: Iterable[tuple[int, str]]
) -> tuple[_Log, Iterator[tuple[int, list[str], str]]]:
    """The log's header and its data rows (line, fields, where); header and units lines that
    come again are skipped, a header that changes is an error."""
    it = iter(lines)
    first, head = next(((n, ln) for n, ln in it if ln.strip()), (0, ""))
    log = _Log(path, _tokens(head.strip().lstrip("#")), first)
    key = [h.lower() for h in log.header]

    def rows() -> Iterator[tuple[int, list[str], str]]:
        for n, text in it:
            s = text.strip()
            if not s:
                continue
            if s.startswith("#"):
                again = [h.lower() for h in _tokens(s.lstrip("#"))]
                if again and again[0] in ("date", "yyyymmdd", "gpu", "idx") and again != key:
                    if again[0] in ("yyyymmdd", "idx"):  # the units line
                        continue
                    raise TraceError(
                        f"{path}:{n}: the columns change (a log appended to another, logged "
                        "with other options); split the file"
                    )
                continue
            where = f"{path}:{n}"
            yield n, log.fields(s, where), where

    return log, rows()


def read_monitor_log(
    path: Path,
    lines: Iterable[tuple[int, str]],
    *,
    job: str | None = None,
    utc: bool = False,
    allow_gaps: bool = False,
    source: Lines | None = None,
) -> Trace:
    """Read the ``lines`` of an ``nvidia-smi dmon`` or ``pmon`` log (:func:`iter_lines` of
    ``path``; its first line is the header). Times are local, as nvidia-smi writes them,
    unless ``utc``. ``source``: the file's :class:`Lines`, whose last line, when it was cut
    (no end of line), is dropped and noted."""
    cut: list[int] = []

    def upto_cut(it: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        header = True
        for n, text in it:
            if source is not None and n == source.cut and text.strip() and not header:
                cut.append(n)
                return
            header = header and not text.strip()
            yield n, text

    log, rows = _rows(path, upto_cut(lines))
    metrics = sorted({m for _, _, m, _ in log.cols})
    b = Builder(path, f"nvidia-smi {log.kind}", metrics)
    if log.kind == "dmon":
        for n, f, where in rows:
            t = _time(f[log.i_date], f[log.i_time], utc=utc, where=where)
            index = _gpu_index(f[log.i_gpu], where)
            values = {m: _value(log, f, i, m, s, where) for i, _, m, s in log.cols}
            b.add("", f"index:{index}", index, None, t, values, n, where)
        notes: list[str] = []
    else:
        notes = _read_pmon(log, rows, b, utc=utc)
    trace = b.trace(job or path.stem, allow_gaps=allow_gaps)
    if log.ignored:
        trace.notes.insert(0, f"columns not read: {', '.join(log.ignored)}")
    trace.notes.extend(notes)
    if source is not None:
        trace.notes.extend(cut_notes(source, cut[0] if cut else 0))
    return trace


def _gpu_index(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TraceError(f"{where}: gpu {text[:20]!r} is not a GPU index") from None


def _read_pmon(
    log: _Log, rows: Iterator[tuple[int, list[str], str]], b: Builder, *, utc: bool
) -> list[str]:
    """Sum each sample's process rows per GPU (a sample: the rows of one date and time) and
    add them to ``b``; returns the notes."""
    assert log.i_pid is not None
    pids: set[tuple[int, str]] = set()
    commands: set[str] = set()
    # per GPU of the current sample: (first line, where, {metric: sum or None})
    sample: dict[int, tuple[int, str, dict[str, float | None]]] = {}
    current: float | None = None

    def flush() -> None:
        for index, (n, where, values) in sorted(sample.items()):
            assert current is not None
            for m in _RATIOS:
                v = values.get(m)
                if v is not None:
                    values[m] = min(v, 1.0)
            b.add("", f"index:{index}", index, None, current, values, n, where)
        sample.clear()

    for n, f, where in rows:
        t = _time(f[log.i_date], f[log.i_time], utc=utc, where=where)
        if t != current:
            flush()
            current = t
        index = _gpu_index(f[log.i_gpu], where)
        pid = f[log.i_pid]
        entry = sample.setdefault(index, (n, where, {m: 0.0 for _, _, m, _ in log.cols}))
        if pid in _NA:  # an idle GPU: no process, nothing used by one
            continue
        pids.add((index, pid))
        if log.command_last and f[-1]:
            commands.add(f[-1])
        values = entry[2]
        for i, _, m, s in log.cols:
            v = _value(log, f, i, m, s, where)
            prev = values[m]
            values[m] = None if v is None or prev is None else prev + v
    flush()
    notes = ["pmon: the processes' rows summed per GPU and sample (utilization capped at 100 %)"]
    if pids:
        names = ", ".join(sorted(commands)[:5]) + (" ..." if len(commands) > 5 else "")
        notes.append(f"pmon: {len(pids)} processes seen ({names})")
    return notes
