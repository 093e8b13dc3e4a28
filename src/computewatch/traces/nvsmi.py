"""Read the CSV that ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N``
writes: any subset of columns, units in the header and/or in the values, ``[N/A]`` and
``[Not Supported]`` values, several GPUs interleaved.

The header names are those nvidia-smi prints (``timestamp, index, name, utilization.gpu [%],
memory.used [MiB], power.draw [W], ...``). Without a header (``noheader``) the columns must be
given, as they were to ``--query-gpu`` (``columns=``). A ``job`` column, which nvidia-smi does
not write but a wrapper script may add, files rows under jobs.
"""

from __future__ import annotations

import itertools
import math
import re
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

from computewatch.traces._build import (
    Builder,
    bounds,
    cut_notes,
    implausible,
    iter_lines,
    parse_time,
)
from computewatch.traces.polls import PollError, number_by_poll
from computewatch.traces.records import Trace, TraceError

__all__ = ["FIELDS", "read_nvidia_smi"]

_MIB = float(2**20)
_PCT = {"%": 0.01}
_CLOCK = {"MHz": 1e6}

FIELDS: dict[str, tuple[str, dict[str, float]]] = {
    "utilization.gpu": ("gpu_utilization_ratio", _PCT),
    "utilization.memory": ("gpu_memory_utilization_ratio", _PCT),
    "memory.used": ("gpu_memory_used_bytes", {"MiB": _MIB}),
    "memory.total": ("gpu_memory_total_bytes", {"MiB": _MIB}),
    "memory.free": ("memory_free_bytes", {"MiB": _MIB}),
    "power.draw": ("gpu_power_watts", {"W": 1.0}),
    "power.draw.instant": ("gpu_power_watts", {"W": 1.0}),
    "power.draw.average": ("gpu_power_watts", {"W": 1.0}),
    "power.limit": ("gpu_power_limit_watts", {"W": 1.0}),
    "enforced.power.limit": ("gpu_power_limit_watts", {"W": 1.0}),
    "temperature.gpu": ("gpu_temperature_celsius", {"C": 1.0}),
    "clocks.current.sm": ("gpu_sm_clock_hertz", _CLOCK),
    "clocks.sm": ("gpu_sm_clock_hertz", _CLOCK),
    "clocks.current.memory": ("gpu_memory_clock_hertz", _CLOCK),
    "clocks.mem": ("gpu_memory_clock_hertz", _CLOCK),
    "fan.speed": ("gpu_fan_ratio", _PCT),
}
"""nvidia-smi query fields read, the series each becomes, and its units with their scale to SI
(a header without a unit means the first unit listed, nvidia-smi's own)."""

_IDENTITY = {
    "timestamp": "timestamp",
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "pci.bus_id": "bus",
    "gpu_bus_id": "bus",
    "job": "job",
}
_HEADER_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\[([^\]]*)\])?$")
NOT_GIVEN = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "[not supported]",
        "[unknown error]",
        "[gpu is lost]",
        "not supported",
        "[insufficient permissions]",
        "[requires root]",
    }
)


class _Column:
    __slots__ = ("bound", "field", "high", "index", "low", "metric", "scale", "unit", "units")

    def __init__(self, index: int, field: str, metric: str, unit: str, units: dict[str, float]):
        self.index, self.field, self.metric, self.unit, self.units = (
            index,
            field,
            metric,
            unit,
            units,
        )
        self.scale = units[unit]
        self.bound = bounds()[metric]
        self.low, self.high = self.bound.low, self.bound.high


def _parse_header(
    path: Path, tokens: Sequence[str], line: int
) -> tuple[dict[str, int], list[_Column], list[str]]:
    ids: dict[str, int] = {}
    cols: list[_Column] = []
    ignored: list[str] = []
    for i, raw in enumerate(tokens):
        tok = raw.strip()
        m = _HEADER_TOKEN.match(tok)
        if m is None:
            if tok:
                ignored.append(tok)
            continue
        field, unit = m.group(1), m.group(2)
        if field in _IDENTITY:
            ids.setdefault(_IDENTITY[field], i)
            continue
        known = FIELDS.get(field)
        if known is None:
            ignored.append(tok)
            continue
        metric, units = known
        u = next(iter(units)) if unit is None or unit.strip() in ("", "°C") else unit.strip()
        if u not in units:
            raise TraceError(
                f"{path}:{line}: column {tok!r}: unknown unit {unit!r} "
                f"(nvidia-smi writes {', '.join(units)})"
            )
        cols.append(_Column(i, tok, metric, u, units))
    return ids, cols, ignored


def _looks_like_header(tokens: Sequence[str]) -> bool:
    for raw in tokens:
        m = _HEADER_TOKEN.match(raw.strip())
        if m and (m.group(1) in FIELDS or m.group(1) in _IDENTITY):
            return True
    return False


def _value(col: _Column, text: str, where: str) -> float | None:
    try:  # the common case first: a plain number (nounits)
        v = float(text)
    except ValueError:
        got = _value_with_unit(col, text, where)
    else:
        if not math.isfinite(v):
            raise TraceError(f"{where}: column {col.field!r}: {text.strip()[:40]!r} is not finite")
        got = v * col.scale
    if got is not None and not col.low <= got <= col.high:
        raise implausible(where, f"column {col.index + 1} ({col.field!r})", text, col.bound)
    return got


def _value_with_unit(col: _Column, text: str, where: str) -> float | None:
    s = text.strip()
    if s.lower() in NOT_GIVEN or s.startswith("["):
        return None
    num, _, unit = s.partition(" ")
    unit = unit.strip()
    try:
        v = float(num)
    except ValueError:
        raise TraceError(f"{where}: column {col.field!r}: {s[:40]!r} is not a number") from None
    if not math.isfinite(v):
        raise TraceError(f"{where}: column {col.field!r}: {s[:40]!r} is not a finite number")
    if not unit:
        return v * col.scale
    scale = col.units.get(unit)
    if scale is None:
        raise TraceError(
            f"{where}: column {col.field!r}: unknown unit {unit[:20]!r} "
            f"(nvidia-smi writes {', '.join(col.units)})"
        )
    return v * scale


def read_nvidia_smi(
    path: str | Path,
    *,
    columns: Sequence[str] | None = None,
    job: str | None = None,
    utc: bool = False,
    allow_gaps: bool = False,
) -> Trace:
    """Read an nvidia-smi CSV log. ``columns``: the ``--query-gpu`` fields, for a file written
    with ``noheader`` (ignored when the file has a header). ``job``: the job's name when the
    file has no ``job`` column (default: the file's stem). Timestamps are local time, as
    nvidia-smi writes them, unless ``utc``. Without a device column (``index``, ``uuid``,
    ``pci.bus_id``) the devices are numbered by their order in each poll
    (:mod:`computewatch.traces.polls`). A last line without its end of line was cut while the
    log was written: it is dropped, as are NUL bytes that end the file; both are noted."""
    p = Path(path)
    lines = iter_lines(p)
    first, head = next(((n, ln) for n, ln in lines if ln.strip()), (0, ""))
    if not first:
        if lines.nul_tail:
            raise TraceError(
                f"{p}: no text, only {lines.nul_tail} NUL bytes (a log whose blocks were "
                "allocated but never written: a crash)"
            )
        raise TraceError(f"{p}: empty file")
    if head.lstrip().startswith("#"):  # nvidia-smi dmon or pmon: '# gpu pwr ...'
        from computewatch.traces.dmon import read_monitor_log  # the monitor logs: only for them

        return read_monitor_log(
            p,
            itertools.chain([(first, head)], lines),
            job=job,
            utc=utc,
            allow_gaps=allow_gaps,
            source=lines,
        )
    tokens = head.split(",")
    if _looks_like_header(tokens):
        ids, cols, ignored = _parse_header(p, tokens, first)
        rows: Iterator[tuple[int, str]] = lines
        fields = len(tokens)
    elif columns:
        ids, cols, ignored = _parse_header(p, columns, 0)
        rows = itertools.chain([(first, head)], lines)
        fields = len(columns)
    else:
        raise TraceError(
            f"{p}:{first}: no header line (nvidia-smi's 'noheader'); give the columns as "
            "they were given to --query-gpu, e.g. --columns timestamp,index,utilization.gpu"
        )
    if "timestamp" not in ids:
        raise TraceError(f"{p}:{first}: no 'timestamp' column; log with --query-gpu=timestamp,...")
    if not cols:
        raise TraceError(
            f"{p}:{first}: none of the columns is a metric computewatch reads "
            f"({', '.join(sorted({f for f in FIELDS if '.' in f}))})"
        )
    metrics = sorted({c.metric for c in cols})
    b = Builder(p, "nvidia-smi", metrics)
    i_t = ids["timestamp"]
    i_idx, i_name, i_uuid, i_bus, i_job = (
        ids.get(k) for k in ("index", "name", "uuid", "bus", "job")
    )
    by_poll = i_idx is None and i_uuid is None and i_bus is None
    pending: dict[str, _Pending] = {}
    cut = 0
    for n, text in rows:
        if not text.strip():
            continue
        if n == lines.cut:  # nvidia-smi ends every row it writes: this one was cut
            cut = n
            break
        where = f"{p}:{n}"
        f = text.split(",")
        if len(f) > i_t and f[i_t].strip() == "timestamp":  # a header repeated (logs appended)
            continue
        if len(f) != fields and not (len(f) > fields and not "".join(f[fields:]).strip()):
            # nvidia-smi writes every field of every row; a trailing comma is let pass
            raise TraceError(
                f"{where}: {len(f)} fields where the header has {fields}"
                + ("" if len(f) < fields else " (a row longer than the header)")
            )
        t = parse_time(f[i_t], utc=utc, where=where)
        index: int | None = None
        if i_idx is not None:
            try:
                index = int(f[i_idx].strip())
            except ValueError:
                raise TraceError(
                    f"{where}: index {f[i_idx].strip()[:20]!r} is not a number"
                ) from None
        values: dict[str, float | None] = {}
        for c in cols:
            v = _value(c, f[c.index], where)
            if v is not None or c.metric not in values:
                values[c.metric] = v
        name = f[i_name].strip() if i_name is not None else None
        jb = f[i_job].strip() if i_job is not None else ""
        if by_poll:
            got = pending.get(jb)
            if got is None:
                got = pending[jb] = _Pending(metrics)
            got.add(t, n, values, name)
            continue
        if i_uuid is not None and f[i_uuid].strip():
            gpu = f[i_uuid].strip()
        elif i_bus is not None and f[i_bus].strip():
            gpu = f[i_bus].strip()
        else:
            gpu = f"index:{index if index is not None else 0}"
        b.add(jb, gpu, index, name, t, values, n, where)
    notes = [] if not pending else _number_by_poll(p, pending, b)
    if cut and not b.rows:
        raise TraceError(f"{p}: no data rows (the only one, line {cut}, was cut: no end of line)")
    trace = b.trace(job or p.stem, allow_gaps=allow_gaps)
    _derive_total(trace)
    trace.notes[:0] = [f"columns not read: {', '.join(ignored)}"] if ignored else []
    trace.notes.extend(notes)
    trace.notes.extend(cut_notes(lines, cut))
    return trace


class _Pending:
    """The rows of one job of a log without a device column, kept (in arrays) until its polls
    are known: times, lines, values (NaN: not given), the index of each row's name."""

    __slots__ = ("lines", "name_of", "names", "times", "values")

    def __init__(self, metrics: Sequence[str]) -> None:
        self.times = array("d")
        self.lines = array("q")
        self.values = {m: array("d") for m in metrics}
        self.names: dict[str | None, int] = {None: 0}
        self.name_of = array("i")

    def add(self, t: float, line: int, values: dict[str, float | None], name: str | None) -> None:
        self.times.append(t)
        self.lines.append(line)
        for m, arr in self.values.items():
            v = values.get(m)
            arr.append(math.nan if v is None else v)
        self.name_of.append(self.names.setdefault(name or None, len(self.names)))


def _number_by_poll(p: Path, pending: dict[str, _Pending], b: Builder) -> list[str]:
    """File the rows of each job under the device their position in its poll gives; the
    notes that say so. A log whose polls are ambiguous is an error naming the fix."""
    notes: list[str] = []
    for jb, rows in pending.items():
        try:
            polls = number_by_poll(rows.times)
        except PollError as e:
            at = "" if e.row is None else f":{rows.lines[e.row]}"
            raise TraceError(
                f"{p}{at}: no device column (index, uuid, pci.bus_id) and {e.why}; "
                "log with --query-gpu=timestamp,index,... (a noheader log that has an index: "
                "name it in --columns)"
            ) from None
        names = {i: s for s, i in rows.names.items()}
        metrics = list(rows.values.items())
        for r, (t, line) in enumerate(zip(rows.times, rows.lines, strict=True)):
            d = polls.positions[r]
            values: dict[str, float | None] = {}
            for m, arr in metrics:
                v = arr[r]
                values[m] = None if math.isnan(v) else v
            b.add(jb, f"index:{d}", d, names[rows.name_of[r]], t, values, line, f"{p}:{line}")
        if polls.devices == 1:
            continue
        of = f" of job {jb}" if jb else ""
        every = "" if math.isnan(polls.interval) else f", every {polls.interval:.3g} s"
        notes.append(
            f"no device column{of}: devices numbered by their order in each poll "
            f"({polls.devices} rows a poll{every})"
        )
        if polls.stretched:
            notes.append(
                f"{polls.stretched} of {polls.polls} polls{of} spread over more than half the "
                "poll interval (nvidia-smi slow on a device): their rows kept together"
            )
        if polls.cut:
            notes.append(
                f"{polls.cut} poll{'s' if polls.cut > 1 else ''}{of} cut short (the log stopped "
                "mid-poll, then paused or ended): their rows are the first devices"
            )
    return notes


def _derive_total(trace: Trace) -> None:
    """memory.total from used + free where only those were logged; free is not kept."""
    for j in trace.jobs:
        for g in j.gpus:
            free = g.metrics.pop("memory_free_bytes", None)
            used = g.metrics.get("gpu_memory_used_bytes")
            if free is None or used is None or "gpu_memory_total_bytes" in g.metrics:
                continue
            g.metrics["gpu_memory_total_bytes"] = array(
                "d", (a + b for a, b in zip(used, free, strict=True))
            )
