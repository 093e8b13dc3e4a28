"""Verification of a transparency-log export (format version 2), streamed: one pass over the
entries in O(log n) memory (a million entries and more).

Every line must be its entry's RFC 8785 bytes with the next ``seq``; its leaf hash goes into a
compact range, and at the size of each signed head in the header the root recomputed so far
must be the head's. A head is valid when it is signed by the trusted key (``--public-key``; a
key it retired through a ``key-rotation`` entry for heads before that entry) or, without one, by
a key of the header. The newest head must cover the last entry (unless the caller allows an
unsigned tail). Entries are checked as on the chain (docs/ledger.md): node keys registered
before the reports they sign, each run entry's figures equal to those its node signed.

With an earlier export (``--previous``) the two are read side by side and the first entry that
differs is named (a fork: history rewritten and re-signed); with an earlier head, the root at
its size must be its root. With witnesses' keys, the newest head cosigned by enough of them must
cover the last entry.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import itertools
import multiprocessing
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from computewatch.errors import ComputewatchError
from computewatch.ledger import log
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.keys import (
    ROTATION_KIND,
    decode_public,
    key_id,
    public_bytes,
    report_valid,
    rotation_keys,
)
from computewatch.ledger.log import (
    ExportLines,
    LogHeader,
    Span,
    empty_line,
    entries_parts,
    parse_entry,
    prefix_range,
    read_span,
)
from computewatch.ledger.merkle import CompactRange, aligned_subtrees
from computewatch.ledger.note import Checkpoint, parse_checkpoint
from computewatch.ledger.reports import FIGURES, shape_problem
from computewatch.ledger.verify import NODE_KEY_KIND, PRUNE_KIND, RUN_KIND, Problem, Verdict

__all__ = ["LogProblem", "Previous", "WitnessKey", "verify_log"]

_SEQ = re.compile(rb',"seq":([0-9]+),"time":"[^"]*"}$')
_LEAF = b"\x00"


@dataclass(frozen=True, slots=True)
class WitnessKey:
    name: str
    key: Ed25519PublicKey


@dataclass
class Previous:
    """What the auditor kept: an earlier export (``lines`` and ``header``) or an earlier head
    (``head``); ``label`` names it in messages."""

    label: str
    head: Checkpoint | None = None
    header: LogHeader | None = None
    lines: Iterator[bytes] | None = None


@dataclass(slots=True)
class _Head:
    cp: Checkpoint
    signer: str
    """The key id whose signature holds."""


class LogProblem(ComputewatchError):
    """Raised where a check fails; :func:`verify_log` turns it into the verdict's problem."""

    def __init__(self, seq: int, what: str, message: str) -> None:
        super().__init__(message)
        self.problem = Problem(seq, what, message)


def _keys(header: LogHeader) -> dict[str, Ed25519PublicKey]:
    out: dict[str, Ed25519PublicKey] = {}
    for kid, text in header.public_keys.items():
        key = decode_public(text)
        if key_id(key) != kid:
            raise LedgerError(f"the export's public key {kid!r} does not match its id")
        out[kid] = key
    return out


def _heads(header: LogHeader, keys: Mapping[str, Ed25519PublicKey]) -> dict[int, _Head]:
    heads: dict[int, _Head] = {}
    for n, text in enumerate(header.heads, 1):
        try:
            cp = parse_checkpoint(text)
        except LedgerError as e:
            raise LogProblem(
                0, "signature", f"head {n} of the export is not a checkpoint: {e}"
            ) from None
        if cp.origin != header.origin:
            raise LogProblem(
                cp.size,
                "signature",
                f"the head at size {cp.size} is of another log "
                f"({cp.origin!r}, not {header.origin!r})",
            )
        signer = next((kid for kid, k in keys.items() if cp.signed_by(cp.origin, k)), None)
        if signer is None:
            raise LogProblem(
                cp.size,
                "signature",
                f"the head at size {cp.size} is not signed by any "
                "key of the export (its signature does not match it)",
            )
        held = heads.get(cp.size)
        if held is not None and held.cp.root != cp.root:
            raise LogProblem(
                cp.size,
                "fork",
                f"the export holds two signed heads at size {cp.size} "
                "with different roots: the log showed two histories",
            )
        heads[cp.size] = _Head(cp, signer)
    return heads


@dataclass(slots=True)
class _NodeKey:
    key: Ed25519PublicKey
    team: object
    revoked: bool = False


def _node_key(seq: int, body: Mapping[str, Any], nodes: dict[str, _NodeKey]) -> None:
    action, kid, text = body.get("action"), body.get("key_id"), body.get("public_key")
    if action == "revoke":
        held = nodes.get(kid) if isinstance(kid, str) else None
        if held is not None:
            held.revoked = True
        return
    if action != "register" or not isinstance(kid, str) or not isinstance(text, str):
        raise LogProblem(
            seq,
            "node_key",
            f"node_key entry {seq} is neither a registration nor a revocation of a key",
        )
    try:
        key = decode_public(text)
    except LedgerError as err:
        raise LogProblem(
            seq, "node_key", f"node_key entry {seq} holds no readable public key: {err}"
        ) from None
    if key_id(key) != kid:
        raise LogProblem(
            seq, "node_key", f"node_key entry {seq}: key id {kid} does not match its public key"
        )
    nodes[kid] = _NodeKey(key, body.get("team"))


_BOUND = ("run_id", "seq", "status", "started_at", "ended_at", "summary_sha256")


def _run(seq: int, body: Mapping[str, Any], nodes: Mapping[str, _NodeKey], v: Verdict) -> None:
    v.reports += 1
    report = body.get("signed_report")
    if report is None:
        v.reports_unsigned += 1
        return
    bad = shape_problem(report)
    if bad is not None:
        raise LogProblem(seq, "report", f"run entry {seq}'s signed report is malformed ({bad})")
    assert isinstance(report, Mapping)
    for k in _BOUND:
        if body.get(k) != report[k]:
            raise LogProblem(
                seq, "report", f"run entry {seq}'s {k} differs from its signed report's"
            )
    if FIGURES in report and body.get(FIGURES) != report[FIGURES]:
        raise LogProblem(
            seq,
            "report",
            f"run entry {seq}'s figures (model, stage, FLOP, "
            "GPU-hours, energy, devices) differ from those its node signed",
        )
    node = nodes.get(report["signed_by"])
    if node is None or node.revoked or node.team != body.get("team"):
        v.reports_unknown_key += 1
        return
    if not report_valid(report, node.key):
        raise LogProblem(
            seq,
            "report",
            f"run entry {seq}'s signed report does not match its "
            f"signature by node key {report['signed_by']} (changed after signing)",
        )
    v.reports_signed += 1
    if FIGURES not in report:
        v.reports_figures_unsigned += 1


@dataclass
class _Run:
    """The state of one pass."""

    header: LogHeader
    heads: dict[int, _Head]
    verdict: Verdict
    tree: CompactRange
    rotations: list[tuple[int, Ed25519PublicKey, Ed25519PublicKey]] = field(default_factory=list)
    nodes: dict[str, _NodeKey] = field(default_factory=dict)
    pruned_ok: bool = False
    previous_tree: dict[str, Any] | None = None


def _seq_of(line: bytes) -> int | None:
    m = _SEQ.search(line)
    return int(m.group(1)) if m else None


def _gap(expected: int, seq: int, rest: Iterator[bytes]) -> LogProblem:
    """The problem at an unexpected ``seq``: the rest of the export is scanned for the
    missing entry, so that a move is told from a removal."""
    if seq < expected:
        return LogProblem(
            seq,
            "inserted",
            f"entry {seq} appears again after entry {expected - 1}: "
            "one copy was inserted, or the entries were reordered",
        )
    for line in rest:
        if _seq_of(line) == expected:
            return LogProblem(
                expected, "reordered", f"entry {expected} was moved after entry {seq}"
            )
    gap = f"{expected}" if seq == expected + 1 else f"{expected} to {seq - 1}"
    return LogProblem(expected, "removed", f"entry {gap} was removed (seq jumps to {seq})")


def _compare(prev: Previous, seq: int, line: bytes, state: dict[str, Any]) -> None:
    """One entry of the new export against the earlier one, read alongside."""
    if prev.lines is None:
        return
    while True:
        old = state.get("pending")
        if old is None:
            old = next(prev.lines, None)
            if old is None:
                prev.lines = None
                return
            state["tree"].append_hash(hashlib.sha256(_LEAF + old).digest())
        old_seq = _seq_of(old)
        if old_seq is None:
            raise LogProblem(
                seq,
                "previous",
                f"the earlier export {prev.label} holds a line that is not an entry",
            )
        if old_seq < seq:  # kept there, pruned here
            state.pop("pending", None)
            continue
        if old_seq > seq:
            state["pending"] = old
            return
        state.pop("pending", None)
        if old != line:
            raise LogProblem(
                seq,
                "fork",
                f"entry {seq} differs from the earlier export "
                f"{prev.label}: the log was rewritten after it was shown (a fork)",
            )
        state["matched"] = seq
        return


def verify_log(
    header: LogHeader,
    lines: Iterable[bytes],
    trusted: Ed25519PublicKey | None = None,
    *,
    require_signed_head: bool = True,
    witnesses: Sequence[WitnessKey] = (),
    witnesses_required: int = 0,
    previous: Previous | None = None,
    jobs: int = 1,
) -> Verdict:
    """Check an export's entries (``lines``, each entry's bytes) against its ``header``; the
    verdict names the first problem found. ``jobs`` > 1: entries are checked in that many
    worker processes, chunk by chunk, the tree still built here in order."""
    v = Verdict(version=2)
    if trusted is None:
        v.notes.append(
            "no --public-key given: heads were checked against the keys in the export, which "
            "proves it is unchanged since signed, not who signed it"
        )
    try:
        keys = _keys(header)
        if trusted is not None:
            keys.setdefault(key_id(trusted), trusted)
        heads = _heads(header, keys)
        first = header.first_seq
        tree = prefix_range(header.prefix, first - 1) if first > 1 else CompactRange()
        run = _Run(header, heads, v, tree)
        if first > 1:
            v.notes.append(
                f"entries before seq {first} were pruned under the retention "
                "policy; the root is computed from the hashes the export keeps"
            )
        _stream(run, iter(lines), previous, jobs)
        _finish(run, trusted, require_signed_head, witnesses, witnesses_required, previous)
    except LogProblem as stop:
        v.problem = stop.problem
    except LedgerError as e:
        v.problem = Problem(0, "format", str(e))
    return v


CHUNK = 2048
"""Entries checked per unit of work when they come one by one (an export file is read in
blocks of whole lines instead: :meth:`computewatch.ledger.log.ExportLines.blocks`, or, for
workers, :meth:`~computewatch.ledger.log.ExportLines.spans`)."""

SPAN = 2
"""Blocks (:data:`computewatch.ledger.log.BLOCK`) in a unit of work that a worker reads from
the file itself: each unit costs the reading process about half a millisecond (its submission,
its result, the threads that carry them); 2 MiB units took a quarter off what it spent per entry
with 1 MiB ones (0.77 to 0.59 us), 4 MiB ones no more, holding 8 MiB more in each process."""


@dataclass(slots=True)
class _Chunk:
    """What checking one unit of entries found (all picklable: it comes back from a worker)."""

    count: int = 0
    leaves: bytes = b""
    """The leaf hashes of the entries checked, 32 bytes each, in order (none where
    ``subtrees`` holds them)."""
    subtrees: list[tuple[int, bytes]] | None = None
    """When asked for: the aligned subtrees over those leaves (merkle.aligned_subtrees), which
    the tree takes whole."""
    reports: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    rotations: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    prunes: list[int] = field(default_factory=list)
    """The ``first_seq`` of each prune entry."""
    problem: Problem | None = None
    gap: tuple[int, int, int] | None = None
    """``(expected, seq, index)`` where the seq was not the one expected."""


@dataclass(frozen=True, slots=True)
class _Unit:
    """A unit of work: entries from seq ``first`` on, ``count`` of them."""

    first: int
    data: bytes | list[bytes] | Span
    """The lines: a block of an export file (whole lines joined by newlines), where such a
    block lies in the file (read where it is checked), or a list."""
    count: int
    line_no: int = 0
    """The file's line number of the first line (a block of a file), else 0."""
    registers: bool = True
    """False where no line registers or revokes a node key (the block was searched)."""

    def lines(self) -> list[bytes]:
        data = self.data
        if isinstance(data, list):
            return data
        return (read_span(data) if isinstance(data, Span) else data).split(b"\n")


_KEYS: dict[bytes, Ed25519PublicKey] = {}


def _node_keys(snapshot: Mapping[str, tuple[bytes, object, bool]]) -> dict[str, _NodeKey]:
    out = {}
    for kid, (raw, team, revoked) in snapshot.items():
        key = _KEYS.get(raw)
        if key is None:
            key = _KEYS[raw] = Ed25519PublicKey.from_public_bytes(raw)
        out[kid] = _NodeKey(key, team, revoked)
    return out


def _check_chunk(
    unit: _Unit,
    snapshot: Mapping[str, tuple[bytes, object, bool]],
    path: str = "",
    subtrees: bool = False,
) -> _Chunk:
    """Check the entries of ``unit``: each one's canonical bytes, seq, leaf hash, and what its
    kind asks (run reports against the node keys registered before). With ``subtrees``, also
    hash the aligned subtrees over them (the tree then takes them whole)."""
    out = _Chunk()
    nodes = _node_keys(snapshot)
    v = Verdict()
    leaf = hashlib.sha256(_LEAF).copy  # (a copy costs less than the prefix put before each line)
    leaves = bytearray()
    expected = unit.first
    unsigned = 0
    try:
        lines = unit.lines()
        entries = entries_parts(lines)
        for i, line in enumerate(lines):
            try:
                seq, _, kind, body = next(entries)
            except LedgerError:
                if not line and unit.line_no:
                    raise empty_line(path, unit.line_no + i) from None
                seq = _seq_of(line) or expected
                raise LogProblem(
                    seq,
                    "altered",
                    f"entry {seq} is not in its canonical form (RFC 8785): it was altered",
                ) from None
            if seq != expected:
                out.gap = (expected, seq, i)
                break
            if kind == RUN_KIND:
                if body.get("signed_report") is None:  # (what _run counts, without the call)
                    unsigned += 1
                else:
                    _run(seq, body, nodes, v)
            elif kind == NODE_KEY_KIND:
                _node_key(seq, body, nodes)
            elif kind == ROTATION_KIND:
                if rotation_keys(body) is None:
                    raise LogProblem(
                        seq,
                        "signature",
                        f"key-rotation entry {seq} is not signed by the key it retires",
                    )
                out.rotations.append((seq, dict(body)))
            elif kind == PRUNE_KIND and isinstance(body.get("first_seq"), int):
                out.prunes.append(body["first_seq"])
            h = leaf()  # after its checks: a problem is named first
            h.update(line)
            leaves += h.digest()
            expected += 1
    except LogProblem as stop:
        out.problem = stop.problem
    except LedgerError as e:  # an empty line of the file, or the file changed meanwhile
        out.problem = Problem(0, "format", str(e))
    out.leaves = bytes(leaves)
    out.count = len(leaves) // 32
    if subtrees and out.count == unit.count:  # (else a problem stopped the check inside)
        out.subtrees = aligned_subtrees(unit.first - 1, out.leaves)
        out.leaves = b""  # (the tree takes the subtrees: the leaves need not go back)
    out.reports = (
        v.reports + unsigned,
        v.reports_signed,
        v.reports_unsigned + unsigned,
        v.reports_unknown_key,
        v.reports_figures_unsigned,
    )
    return out


def _snapshot(nodes: Mapping[str, _NodeKey]) -> dict[str, tuple[bytes, object, bool]]:
    return {kid: (public_bytes(n.key), n.team, n.revoked) for kid, n in nodes.items()}


def _units(lines: Iterator[bytes], first: int, spans: bool = False) -> Iterator[_Unit]:
    """The entries in units of work: an export file's in blocks of whole lines, read as they
    are (the lines split where they are checked), or with ``spans`` (for workers) where they
    lie in the file, each worker reading its own (a pipe is read in blocks still); others
    ``CHUNK`` at a time."""
    if isinstance(lines, ExportLines):
        line_no = lines.line_no
        found = lines.spans(SPAN * log.BLOCK) if spans else None
        if found is not None:
            for span, data, n in found:
                count = _block_count(data, n, first)
                registers = data.find(_NODE_KEY_LINE, 0, n) >= 0
                yield _Unit(first, span, count, line_no, registers)
                first += count
                line_no += count
            return
        for block in lines.blocks():
            count = _block_count(block, len(block), first)
            yield _Unit(first, block, count, line_no, _NODE_KEY_LINE in block)
            first += count
            line_no += count
        return
    while True:
        chunk = list(itertools.islice(lines, CHUNK))
        if not chunk:
            return
        yield _Unit(first, chunk, len(chunk))
        first += len(chunk)


def _block_count(data: bytes, n: int, first: int) -> int:
    """The number of entries in the block ``data[:n]`` (whole lines, the first one's seq
    ``first``), read
    from its last line's seq (counting its newlines, twice, was three quarters of what the
    reading process did for each entry beside its workers): a block whose seqs are not
    ``first`` to that seq fails its check at the first line out of place, before any count
    after it matters (the check compares the count of entries it took with this one).
    Counted where the last line names no seq at or after ``first``."""
    seq = _seq_of(data[data.rfind(b"\n", 0, n) + 1 : n])
    if seq is not None and seq >= first:
        return seq - first + 1
    return data.count(b"\n", 0, n) + 1


class _Feed:
    """The units of work and what checking each found, in order: checked here, or by ``jobs``
    worker processes a few units ahead. The node keys each unit is checked against are those
    registered before it (registrations are read here as the units go out)."""

    def __init__(self, units: Iterator[_Unit], jobs: int, path: str, whole: Any) -> None:
        self.units = units
        self.jobs = jobs
        self.path = path
        self.whole = whole
        """``whole(unit)``: whether the tree may take the unit's leaves as aligned subtrees."""
        self.nodes: dict[str, _NodeKey] = {}
        self.pending: collections.deque[tuple[_Unit, Future[_Chunk]]] = collections.deque()

    def __iter__(self) -> Iterator[tuple[_Unit, _Chunk]]:
        if self.jobs <= 1:
            for unit in self.units:
                result = _check_chunk(unit, _snapshot(self.nodes), self.path, self.whole(unit))
                _register(unit, self.nodes)
                yield unit, result
            return
        ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx) as pool:
            pending = self.pending
            for unit in self.units:
                job = pool.submit(
                    _check_chunk, unit, _snapshot(self.nodes), self.path, self.whole(unit)
                )
                pending.append((unit, job))
                _register(unit, self.nodes)
                while len(pending) >= 2 * self.jobs:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()

    def rest(self) -> Iterator[bytes]:
        """The lines after those yielded: those sent to workers, then those not read yet."""
        for unit, _ in self.pending:
            yield from unit.lines()
        for unit in self.units:
            yield from unit.lines()


def _stream(run: _Run, lines: Iterator[bytes], previous: Previous | None, jobs: int) -> None:
    tree, heads = run.tree, run.heads
    cmp: dict[str, Any] = {"tree": CompactRange()}
    if previous is not None and previous.header is not None:
        ph = previous.header
        cmp["tree"] = (
            prefix_range(ph.prefix, ph.first_seq - 1) if ph.first_seq > 1 else (CompactRange())
        )
    at = -1 if previous is None or previous.head is None else previous.head.size
    if tree.size in heads:
        _at_head(run)
    if tree.size == at:
        _previous_head(previous, tree)  # type: ignore[arg-type]
    stops = sorted({*heads, at})

    def whole(unit: _Unit) -> bool:
        """No head, earlier head or earlier export to look at inside the unit."""
        start = unit.first - 1
        i = bisect.bisect_right(stops, start)
        return previous is None and (i == len(stops) or stops[i] > start + unit.count)

    path = str(lines.path) if isinstance(lines, ExportLines) else ""
    try:
        feed = _Feed(_units(lines, run.header.first_seq, jobs > 1), jobs, path, whole)
        _feed(run, feed, previous, at, cmp)
    finally:  # (the spans are read until here)
        if isinstance(lines, ExportLines):
            lines.close()
    if previous is not None:
        _previous_end(previous, cmp, tree.size)


def _feed(run: _Run, feed: _Feed, previous: Previous | None, at: int, cmp: dict[str, Any]) -> None:
    """Each unit's result into the tree and the verdict, in order."""
    v, tree = run.verdict, run.tree
    counts = [0, 0, 0, 0, 0]
    for unit, result in feed:
        try:
            if result.subtrees is not None:
                for level, h in result.subtrees:
                    tree.append_subtree(level, h)
            else:
                _per_leaf(run, previous, unit, result, at, cmp)
        finally:  # the entries in the tree so far (up to a head that does not hold)
            v.entries = tree.size - (run.header.first_seq - 1)
        counts = [a + b for a, b in zip(counts, result.reports, strict=True)]
        for seq, body in result.rotations:
            pair = rotation_keys(body)
            assert pair is not None
            run.rotations.append((seq, *pair))
        run.pruned_ok = run.pruned_ok or run.header.first_seq in result.prunes
        if result.problem is not None:
            raise LogProblem(result.problem.seq, result.problem.what, result.problem.message)
        if result.gap is not None:
            want, seq, index = result.gap
            raise _gap(want, seq, itertools.chain(unit.lines()[index + 1 :], feed.rest()))
    (
        v.reports,
        v.reports_signed,
        v.reports_unsigned,
        v.reports_unknown_key,
        v.reports_figures_unsigned,
    ) = counts
    v.size = tree.size
    v.root = tree.root().hex()


def _per_leaf(
    run: _Run,
    previous: Previous | None,
    unit: _Unit,
    result: _Chunk,
    at: int,
    cmp: dict[str, Any],
) -> None:
    """The unit's leaves into the tree one by one: the root at each head's size, at the
    earlier head's, and each entry against the earlier export's."""
    tree, heads, leaves = run.tree, run.heads, result.leaves
    lines = unit.lines() if previous is not None else []
    for i in range(result.count):
        tree.append_hash(leaves[32 * i : 32 * i + 32])
        size = tree.size
        if size in heads:
            _at_head(run)
        if size == at:
            _previous_head(previous, tree)  # type: ignore[arg-type]
        if previous is not None:
            _compare(previous, unit.first + i, lines[i], cmp)


_NODE_KEY_LINE = b'"kind":"node_key","seq":'


def _register(unit: _Unit, nodes: dict[str, _NodeKey]) -> None:
    """The node keys ``unit`` registers or revokes, for the units after it (a malformed
    entry is the unit's own problem, found where it is checked)."""
    if not unit.registers:
        return
    for line in unit.lines():
        if _NODE_KEY_LINE in line:
            try:
                e = parse_entry(line)
                _node_key(e.seq, e.body, nodes)
            except (LedgerError, LogProblem):
                continue


def _at_head(run: _Run) -> None:
    tree = run.tree
    head = run.heads[tree.size]
    if tree.root() != head.cp.root:
        raise LogProblem(
            tree.size,
            "altered",
            f"the entries up to {tree.size} do not match the head "
            f"signed at size {tree.size}: an entry up to it was altered, or entries were "
            "removed, inserted or reordered and renumbered",
        )
    run.verdict.checkpoints += 1


def _previous_head(previous: Previous, tree: CompactRange) -> None:
    assert previous.head is not None
    if tree.root() != previous.head.root:
        raise LogProblem(
            tree.size,
            "fork",
            f"the log at size {tree.size} differs from the earlier "
            f"head {previous.label}: an entry up to {tree.size} was rewritten after that "
            "head was signed (a fork)",
        )


def _previous_end(previous: Previous, cmp: dict[str, Any], size: int) -> None:
    if previous.head is not None:
        if previous.head.size > size:
            raise LogProblem(
                size + 1,
                "removed",
                f"the earlier head {previous.label} is at size "
                f"{previous.head.size} but this export ends at entry {size}: entries "
                "were removed from the end",
            )
        return
    rest = cmp.get("pending")
    if previous.lines is not None and rest is None:
        rest = next(previous.lines, None)
    if rest is not None:
        raise LogProblem(
            size + 1,
            "removed",
            f"the earlier export {previous.label} holds entries "
            f"after {size}, where this one ends: entries were removed from the end",
        )


def _previous_signed(
    previous: Previous, cmp: dict[str, Any], keys: Mapping[str, Ed25519PublicKey], v: Verdict
) -> None:
    """The earlier export's entries, all read alongside, must be those its own newest head
    signed (else it proves nothing about what the log showed)."""
    if previous.header is None:
        return
    tree: CompactRange = cmp["tree"]
    for text in previous.header.heads:
        try:
            cp = parse_checkpoint(text)
        except LedgerError:
            continue
        if cp.size != tree.size or cp.origin != previous.header.origin:
            continue
        if not any(cp.signed_by(cp.origin, k) for k in keys.values()):
            continue
        if cp.root != tree.root():
            raise LogProblem(
                cp.size,
                "previous",
                f"the earlier export {previous.label} does not "
                "match its own signed head: it cannot be compared with",
            )
        return
    v.notes.append(
        f"the earlier export {previous.label} has no head signed by a trusted key at "
        "its end: only its entries were compared"
    )


def _trusted_for(run: _Run, trusted: Ed25519PublicKey | None) -> dict[str, int | None]:
    """Key id -> the largest head size it may sign (None: any): the trusted key (else the
    header's), and each key a rotation entry, signed by it, names as a trusted key's
    predecessor, for heads before that entry."""
    if trusted is None:
        out: dict[str, int | None] = dict.fromkeys(run.header.public_keys)
    else:
        out = {key_id(trusted): None}
    for seq, old, new in reversed(run.rotations):
        if key_id(new) in out:
            out.setdefault(key_id(old), seq - 1)
    return out


def _finish(
    run: _Run,
    trusted: Ed25519PublicKey | None,
    require_signed_head: bool,
    witnesses: Sequence[WitnessKey],
    k: int,
    previous: Previous | None,
) -> None:
    v, header, tree = run.verdict, run.header, run.tree
    last = tree.size
    if header.first_seq > 1 and not run.pruned_ok:
        raise LogProblem(
            header.first_seq,
            "removed",
            f"the log starts at entry {header.first_seq} "
            "but no prune entry says the entries before it were deleted under the "
            "retention policy",
        )
    if header.entries is not None and header.entries != v.entries:
        missing = header.entries - v.entries
        what = "removed from the end" if missing > 0 else "appended"
        raise LogProblem(
            last + 1,
            "removed" if missing > 0 else "inserted",
            f"{abs(missing)} entries were {what} (the header counts {header.entries})",
        )
    beyond = sorted(s for s in run.heads if s > last)
    if beyond:
        raise LogProblem(
            last + 1,
            "removed",
            f"the export ends at entry {last} but holds a head "
            f"signed at size {beyond[-1]}: entries {last + 1} to {beyond[-1]} were "
            "removed",
        )
    allowed = _trusted_for(run, trusted)
    for size in sorted(run.heads):
        h = run.heads[size]
        if h.signer not in allowed:
            raise LogProblem(
                size,
                "signature",
                f"the head at size {size} is signed by key {h.signer}, which is not a trusted key",
            )
        limit = allowed[h.signer]
        if limit is not None and size > limit:
            raise LogProblem(
                size,
                "signature",
                f"the head at size {size} is signed by key "
                f"{h.signer}, retired by the key rotation at entry {limit + 1}",
            )
    checked = [s for s in run.heads if s >= header.first_seq - 1]
    v.last_signed_seq = max(checked, default=None)
    if require_signed_head and v.last_signed_seq != last:
        first = (v.last_signed_seq or header.first_seq - 1) + 1
        raise LogProblem(
            first,
            "unsigned",
            f"entries {first} to {last} are not covered by a signed "
            f"head ({v.checkpoints} heads hold): heads were dropped or the export is "
            "cut, so nothing proves these entries are the server's",
        )
    if previous is not None and run.previous_tree is not None:
        trusted_keys = {kid: k for kid, k in _keys(header).items() if kid in allowed}
        if trusted is not None:
            trusted_keys[key_id(trusted)] = trusted
        _previous_signed(previous, run.previous_tree, trusted_keys, v)
    if previous is not None and previous.head is not None:
        if not any(
            previous.head.signed_by(previous.head.origin, k)
            for k in _keys(header).values()
            if key_id(k) in allowed
        ):
            raise LogProblem(
                previous.head.size,
                "signature",
                f"the earlier head {previous.label} is not signed by a trusted key of this log",
            )
        if previous.head.size < header.first_seq - 1:
            v.notes.append(
                f"the earlier head {previous.label} is older than the entries kept "
                "(pruned): it was not compared"
            )
    if witnesses:
        _witnessed(run, witnesses, max(k, 1), last)


def _witnessed(run: _Run, witnesses: Sequence[WitnessKey], k: int, last: int) -> None:
    v = run.verdict
    best: int | None = None
    for size in sorted(run.heads, reverse=True):
        cp = run.heads[size].cp
        names = {w.name for w in witnesses if cp.cosigned_by(w.name, w.key) is not None}
        if len(names) >= k:
            best = size
            break
    v.witnessed_size = best
    if best is None:
        raise LogProblem(
            last,
            "unwitnessed",
            f"no head of the export is cosigned by {k} of the "
            f"{len(witnesses)} witnesses given: nothing shows others saw this history",
        )
    if best != last:
        raise LogProblem(
            best + 1,
            "unwitnessed",
            f"entries {best + 1} to {last} are not covered by "
            f"a head cosigned by {k} witnesses (the newest is at size {best}): "
            "export again once they cosigned, or check up to there",
        )
