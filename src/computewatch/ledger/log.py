"""The transparency log's entries and its export file (format version 2, docs/ledger.md).

An entry is the RFC 8785 canonical JSON of ``{"body","kind","seq","time"}``
(:func:`entry_line`); its bytes are a leaf of the RFC 9162 Merkle tree
(:mod:`computewatch.ledger.merkle`). Members sort as ``body``, ``kind``, ``seq``, ``time``, so a
line is ``{"body":BODY,"kind":KIND,"seq":SEQ,"time":TIME}`` with BODY the canonical JSON of the
body: the server stores BODY's text and rebuilds the line without parsing it
(:func:`line_from_parts`).

An export is JSON Lines: a header (:func:`header_json`), then each entry's bytes, one per line::

    {"entries":N,"exported_at":"...","first_seq":1,"format":"computewatch-ledger",
     "heads":["<signed checkpoint note>", ...],"origin":"...","prefix":[],
     "public_keys":{"<key id>":"<base64>"},"version":2}
    {"body":{...},"kind":"run","seq":1,"time":"2026-12-01T10:00:00.000000Z"}
    ...

``heads`` are signed tree heads (C2SP checkpoint notes, witnesses' cosignatures appended as more
signature lines); the last covers the export's last entry. ``prefix`` is the compact range (hex,
largest subtree first) of the entries pruned before ``first_seq``, so the root is still
recomputed over the whole tree.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from computewatch.ledger.chain import LedgerError
from computewatch.ledger.jcs import MAX_EXACT_INT, canonical_values, dumps, dumps_read
from computewatch.ledger.merkle import CompactRange

_encode_string = json.encoder.encode_basestring

__all__ = [
    "BLOCK",
    "FORMAT",
    "VERSION",
    "ExportLines",
    "LogEntry",
    "LogHeader",
    "Span",
    "clean_body",
    "empty_line",
    "entries_parts",
    "entry_line",
    "entry_parts",
    "exact_number",
    "header_json",
    "line_from_parts",
    "open_export",
    "parse_entry",
    "prefix_range",
    "read_span",
]

FORMAT: Final = "computewatch-ledger"
VERSION: Final = 2
_KEYS: Final = ("body", "kind", "seq", "time")


def exact_number(value: int | float, unit: str) -> int | float | str:
    """``value`` as a JSON number when a double holds it exactly; otherwise (an integer beyond
    2**53) a decimal string with its unit, ``"12345678901234567891 FLOP"``: RFC 8785 numbers
    are doubles, and a figure must not change on its way through a verifier."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INT:
        return f"{value} {unit}"
    if isinstance(value, float) and not math.isfinite(value):
        raise LedgerError(f"a {unit} figure of {value} has no JSON form")
    return value


def clean_body(body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``body`` as a reader will see it, and its canonical JSON text; a :class:`LedgerError`
    for what JSON cannot carry exactly (NaN, an integer beyond 2**53, a key not a string)."""
    if not isinstance(body, Mapping):
        raise LedgerError("a ledger entry's body is a JSON object")
    text, parsed = dumps_read(body)  # an integer beyond 2**53 is read back as written whole
    assert isinstance(parsed, dict)
    return parsed, text.decode("utf-8")


def _str(s: str) -> bytes:
    """A string's RFC 8785 form (the standard library's C escaping is RFC 8785's)."""
    try:
        return _encode_string(s).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not Unicode
        raise LedgerError("a string of the entry is not valid Unicode") from None


def line_from_parts(seq: int, time: str, kind: str, body_text: str | bytes) -> bytes:
    """An entry's bytes from its stored parts (``body_text``: the body's canonical JSON)."""
    body = body_text.encode("utf-8") if isinstance(body_text, str) else body_text
    return b"".join(
        (
            b'{"body":',
            body,
            b',"kind":',
            _str(kind),
            b',"seq":',
            str(seq).encode("ascii"),
            b',"time":',
            _str(time),
            b"}",
        )
    )


def entry_line(seq: int, time: str, kind: str, body: Mapping[str, Any]) -> bytes:
    return dumps({"body": body, "kind": kind, "seq": seq, "time": time})


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    time: str
    kind: str
    body: Mapping[str, Any]

    def line(self) -> bytes:
        return entry_line(self.seq, self.time, self.kind, self.body)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time, "kind": self.kind, "body": dict(self.body)}


def parse_entry(line: bytes, where: str = "entry") -> LogEntry:
    """An entry line as written (RFC 8785 bytes of exactly body, kind, seq and time); a
    :class:`LedgerError` saying what is wrong otherwise."""
    return LogEntry(*entry_parts(line, where))


def entry_parts(line: bytes, where: str = "entry") -> tuple[int, str, str, dict[str, Any]]:
    """:func:`parse_entry`'s seq, time, kind and body (what a verifier reads of each entry)."""
    return next(entries_parts((line,), where))


def entries_parts(
    lines: Iterable[bytes], where: str = "entry"
) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """:func:`entry_parts` of each line in turn (a :class:`LedgerError` at the first line that
    is not an entry ends it), in one loop rather than a call per line."""
    try:
        for doc in canonical_values(lines):
            if type(doc) is not dict or len(doc) != 4:
                raise _NotEntry(f"{where}: an entry has exactly body, kind, seq and time")
            try:  # four names, these four
                seq, time, kind, body = doc["seq"], doc["time"], doc["kind"], doc["body"]
            except KeyError:
                raise _NotEntry(f"{where}: an entry has exactly body, kind, seq and time") from None
            if type(seq) is not int or seq < 1:  # (a JSON parser's int, never a bool)
                raise _NotEntry(f"{where}: seq is a whole number from 1")
            if type(time) is not str or type(kind) is not str or not kind:
                raise _NotEntry(f"{where}: time and kind are strings")
            if type(body) is not dict:
                raise _NotEntry(f"{where}: body is a JSON object")
            yield seq, time, kind, body
    except _NotEntry:
        raise
    except LedgerError:
        raise LedgerError(f"{where}: not an entry in RFC 8785 canonical form") from None


class _NotEntry(LedgerError):
    """Canonical JSON that is not an entry."""


def prefix_range(prefix: Sequence[bytes], size: int) -> CompactRange:
    """The compact range of the first ``size`` leaves from its hashes (largest first)."""
    levels = [lv for lv in range(size.bit_length() - 1, -1, -1) if size >> lv & 1]
    if len(levels) != len(prefix):
        raise LedgerError(
            f"the export's prefix holds {len(prefix)} hashes; {size} pruned entries need "
            f"{len(levels)}"
        )
    return CompactRange(size, list(zip(levels, prefix, strict=True)))


def header_json(
    *,
    origin: str,
    exported_at: str,
    public_keys: Mapping[str, str],
    first_seq: int,
    prefix: Sequence[bytes],
    entries: int,
    heads: Sequence[str],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "origin": origin,
        "exported_at": exported_at,
        "public_keys": dict(public_keys),
        "first_seq": first_seq,
        "prefix": [h.hex() for h in prefix],
        "entries": entries,
        "heads": list(heads),
    }


@dataclass(frozen=True, slots=True)
class LogHeader:
    origin: str
    public_keys: Mapping[str, str]
    """Key id -> base64 of the server's keys (every key a head was signed with)."""
    first_seq: int = 1
    prefix: tuple[bytes, ...] = ()
    entries: int | None = None
    heads: tuple[str, ...] = ()
    exported_at: str = ""


def read_header(doc: object, where: str) -> LogHeader:
    if not isinstance(doc, dict):
        raise LedgerError(f"{where}: not a {FORMAT} export (no header line)")
    origin, keys, first = doc.get("origin"), doc.get("public_keys"), doc.get("first_seq", 1)
    prefix, count, heads = doc.get("prefix", []), doc.get("entries"), doc.get("heads", [])
    if not isinstance(origin, str) or not origin:
        raise LedgerError(f"{where}: the header names no origin")
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        raise LedgerError(f"{where}: public_keys maps key ids to base64 keys")
    if not isinstance(first, int) or isinstance(first, bool) or first < 1:
        raise LedgerError(f"{where}: first_seq is a whole number from 1")
    if not isinstance(prefix, list) or not all(isinstance(h, str) for h in prefix):
        raise LedgerError(f"{where}: prefix is a list of hex hashes")
    try:
        hashes = tuple(bytes.fromhex(h) for h in prefix)
    except ValueError:
        raise LedgerError(f"{where}: prefix is a list of hex hashes") from None
    if any(len(h) != 32 for h in hashes):
        raise LedgerError(f"{where}: a prefix hash has 32 bytes")
    if not isinstance(heads, list) or not all(isinstance(h, str) for h in heads):
        raise LedgerError(f"{where}: heads is a list of checkpoint notes")
    return LogHeader(
        origin,
        dict(keys),
        first,
        hashes,
        count if isinstance(count, int) else None,
        tuple(heads),
        str(doc.get("exported_at", "")),
    )


BLOCK = 1 << 20
"""Bytes read at a time when an export is read in blocks of whole lines."""


class ExportLines(Iterator[bytes]):
    """An export's entry lines (newline removed, numbered from the file's line 2), read once:
    one by one, or in blocks of whole lines (:meth:`blocks`), which a verifier hands to its
    workers as they are, without splitting them itself."""

    def __init__(self, path: Path, file: IO[bytes]) -> None:
        self.path = path
        self._file: IO[bytes] | None = file
        self._n = 1
        self._shared: tuple[str, int, int] | None = None

    def __iter__(self) -> ExportLines:
        return self

    def __next__(self) -> bytes:
        f = self._file
        if f is None:
            raise StopIteration
        raw = f.readline()
        if not raw:
            self.close()
            raise StopIteration
        self._n += 1
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if not line:
            self.close()
            raise empty_line(str(self.path), self._n)
        return line

    @property
    def line_no(self) -> int:
        """The file's line number of the next line read."""
        return self._n + 1

    def blocks(self, size: int | None = None) -> Iterator[bytes]:
        """The rest of the lines in blocks of about ``size`` bytes (:data:`BLOCK`), each whole
        lines joined by newlines (``block.split(b"\\n")`` gives them; an empty one is an empty
        line of the file, which a reader names with :func:`empty_line`). The lines are not
        counted here (a reader that needs their number counts them, or reads it from them)."""
        f = self._file
        if f is None:
            return
        self._file = None
        size = size or BLOCK
        with f:
            rest = b""
            while data := f.read(size):
                data = rest + data
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                rest = data[cut + 1 :]
                yield data[:cut]
            if rest:
                yield rest

    def spans(self, size: int | None = None) -> Iterator[tuple[Span, bytes, int]] | None:
        """The rest of the lines as :meth:`blocks` gives them, each as the span of the file
        that holds it (for a process that reads it there: :func:`read_span`) with the bytes
        read here, ``(span, data, n)``: the block is ``data[:n]`` (``data`` may go on). None
        where the file cannot be read at an offset (a pipe): read it in blocks. The file stays
        open, for the spans to be read, until :meth:`close`."""
        f = self._file
        if f is None or not hasattr(os, "pread"):
            return None
        try:
            fd = f.fileno()
            st = os.fstat(fd)
            at = f.tell()
        except (OSError, ValueError):  # (io.UnsupportedOperation is both)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        path = os.path.abspath(self.path)
        self._shared = (path, st.st_dev, st.st_ino)
        _OPEN[self._shared] = fd
        return self._spans(fd, Span(path, (st.st_dev, st.st_ino), at, at), size or BLOCK)

    @staticmethod
    def _spans(fd: int, span: Span, size: int) -> Iterator[tuple[Span, bytes, int]]:
        """The blocks :meth:`blocks` makes (the same lines in each): what it holds at each
        step, the rest of the last read and ``size`` bytes more, read at once."""
        at = read = span.start  # where the next block starts; how far blocks() has read
        while True:
            data = _pread(fd, read + size - at, at, span.path)
            if len(data) <= read - at:  # nothing more: the end of the file
                if data:
                    yield Span(span.path, span.file, at, at + len(data)), data, len(data)
                return
            read = at + len(data)
            cut = data.rfind(b"\n")
            if cut < 0:  # a line longer than a block: read on, the parts kept
                parts = [data]
                while cut < 0 and (more := _pread(fd, size, read, span.path)):
                    read += len(more)
                    parts.append(more)
                    cut = more.rfind(b"\n")
                    cut = cut if cut < 0 else read - len(more) + cut - at
                data = b"".join(parts)
                if cut < 0:  # the last line, without its newline
                    yield Span(span.path, span.file, at, at + len(data)), data, len(data)
                    return
            yield Span(span.path, span.file, at, at + cut), data, cut
            at += cut + 1

    def close(self) -> None:
        if self._shared is not None:
            _OPEN.pop(self._shared, None)
            self._shared = None
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True, slots=True)
class Span:
    """Whole lines of an export file, to be read where they are checked: bytes ``start`` to
    ``end`` (the newline after the last line not included) of ``path``, the file whose device
    and inode are ``file``."""

    path: str
    file: tuple[int, int]
    start: int
    end: int


_OPEN: dict[tuple[str, int, int], int] = {}
"""The file descriptor of each export whose spans are being read (:meth:`ExportLines.spans`,
until it is closed), by path, device and inode: worker processes forked meanwhile read the
spans through it too; one started afresh opens the file for each span."""


def read_span(span: Span) -> bytes:
    """The bytes of ``span``; a :class:`LedgerError` where its file was replaced or cut since
    the span was found in it (the file changed while it was read)."""
    fd = _OPEN.get((span.path, *span.file))
    if fd is not None:
        return _read_span(fd, span)
    try:
        fd = os.open(span.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise LedgerError(f"cannot read {span.path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != span.file:
            raise LedgerError(f"{span.path} was replaced by another file while it was read")
        return _read_span(fd, span)
    finally:
        os.close(fd)


def _read_span(fd: int, span: Span) -> bytes:
    n = span.end - span.start
    data = _pread(fd, n, span.start, span.path)
    while len(data) < n:
        more = _pread(fd, n - len(data), span.start + len(data), span.path)
        if not more:
            raise LedgerError(
                f"{span.path} changed while it was read: it now ends before byte {span.end}"
            )
        data += more
    return data


def _pread(fd: int, n: int, at: int, path: str) -> bytes:
    try:
        return os.pread(fd, n, at)
    except OSError as e:
        raise LedgerError(f"cannot read {path}: {e.strerror or e}") from None


def empty_line(path: str, n: int) -> LedgerError:
    """The error for an empty line, line ``n`` of the export ``path``."""
    return LedgerError(f"{path}:{n}: an empty line")


@dataclass
class Export:
    """An export file opened for streaming: its header, then :meth:`lines` (each entry's bytes,
    newline removed, numbered from the file's line 2)."""

    path: Path
    version: int
    header_doc: dict[str, Any]
    _file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def header(self) -> LogHeader:
        return read_header(self.header_doc, f"{self.path}:1")

    def lines(self) -> ExportLines:
        assert self._file is not None, "an export's lines are read once"
        f, self._file = self._file, None
        return ExportLines(self.path, f)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_export(path: Path) -> Export:
    """An export file, its header read; a file that is not an export is a
    :class:`LedgerError` naming it."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - handed to the Export, closed when read
    except OSError as e:
        raise LedgerError(f"cannot read {path}: {e.strerror or e}") from None
    first = f.readline(1 << 24)
    try:
        doc = json.loads(first.decode("utf-8")) if first.strip() else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        f.close()
        raise LedgerError(f"{path}:1: not a {FORMAT} export (no header line)")
    version = doc.get("version")
    if version not in (1, VERSION):
        f.close()
        raise LedgerError(
            f"{path}:1: export format version {version!r}; this computewatch reads versions 1 "
            f"and {VERSION}"
        )
    return Export(path, int(version), doc, f)


def export_lines(header: Mapping[str, Any], lines: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of an export file (each ending in a newline): the header, then the entries."""
    yield dumps(header) + b"\n"
    for line in lines:
        yield line + b"\n"
