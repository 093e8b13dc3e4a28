"""The export format and its verification.

An export is JSON Lines: a header line, then one line per entry in chain order::

    {"format": "computewatch-ledger", "version": 1, "exported_at": "...", "public_keys": {ID: B64},
     "first_seq": 1, "first_prev": "000...0", "entries": N}
    {"seq": 1, "time": "...", "kind": "run", "body": {...}, "prev": "000...0", "hash": "..."}
    ...

``first_seq``/``first_prev`` say where the kept chain starts when older entries were pruned under
the retention policy (docs/ledger.md). Verification recomputes every hash, follows every ``prev``,
checks that ``seq`` runs on without gaps, and checks every checkpoint's Ed25519 signature
against the trusted public key (``--public-key``) or, without one, the keys in the header (which
proves the export is whole and unchanged since it was signed, not who signed it).

It also checks each ``run`` entry's ``signed_report`` (the node's signed usage report) against
the ``node_key`` entries before it in the chain: signed by a key registered earlier for the run's
team and not revoked since, with a valid signature and the entry's run id, seq, status, times and
summary hash, it counts as signed by a known node; a signature or binding that fails is a
problem naming the entry; unsigned reports and reports by keys the chain does not register
(before it) are counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from computewatch.ledger.chain import GENESIS, Entry, LedgerError, canonical
from computewatch.ledger.keys import (
    CHECKPOINT_KIND,
    ROTATION_KIND,
    checkpoint_valid,
    decode_public,
    encode_public,
    key_id,
    report_valid,
    rotation_keys,
)
from computewatch.ledger.reports import shape_problem

FORMAT: Final = "computewatch-ledger"
VERSION: Final = 1
PRUNE_KIND: Final = "prune"
"""An entry recording that older entries were deleted under the retention policy: its body's
``first_seq``/``first_prev`` must be where the kept chain starts."""
RUN_KIND: Final = "run"
NODE_KEY_KIND: Final = "node_key"
"""An entry registering (``action: register``) or revoking (``action: revoke``) a node key:
``key_id``, ``public_key`` (base64), ``team``, ``name``, ``registered_at``, ``revoked_at``."""


@dataclass(frozen=True, slots=True)
class Header:
    public_keys: Mapping[str, Ed25519PublicKey]
    first_seq: int = 1
    first_prev: str = GENESIS
    exported_at: str = ""
    entries: int | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    seq: int
    what: str
    """altered, removed, inserted, reordered, unsigned, signature, report or node_key."""
    message: str


@dataclass(slots=True)
class Verdict:
    entries: int = 0
    checkpoints: int = 0
    last_signed_seq: int | None = None
    problem: Problem | None = None
    notes: list[str] = field(default_factory=list)
    reports: int = 0
    """``run`` entries checked for a signed usage report."""
    reports_signed: int = 0
    """... signed by a node key registered earlier in the chain, with a valid signature."""
    reports_unsigned: int = 0
    reports_unknown_key: int = 0
    """... signed by a key the chain does not hold registered (for that team, unrevoked) before
    the entry; also those whose registration was pruned."""
    reports_figures_unsigned: int = 0
    """... of the signed ones, reports in the first format (before reports signed the figures):
    the node signed the summary's hash, not the model, stage and FLOP figures the entry lists."""
    version: int = 1
    """The export format checked (1: the hash chain; 2: the Merkle tree with signed heads)."""
    size: int = 0
    """Version 2: the tree size reached (the last entry's seq)."""
    root: str | None = None
    """Version 2: the root (hex) recomputed over every entry."""
    witnessed_size: int | None = None
    """Version 2, with witnesses required: the largest head they cosigned."""

    def reports_json(self) -> dict[str, int]:
        doc = {
            "total": self.reports,
            "signed": self.reports_signed,
            "unsigned": self.reports_unsigned,
            "unknown_key": self.reports_unknown_key,
        }
        if self.version >= 2:
            doc["figures_unsigned"] = self.reports_figures_unsigned
        return doc

    @property
    def ok(self) -> bool:
        return self.problem is None


def header_json(
    keys: Iterable[Ed25519PublicKey],
    *,
    exported_at: str,
    entries: int,
    first_seq: int = 1,
    first_prev: str = GENESIS,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": exported_at,
        "public_keys": {key_id(k): encode_public(k) for k in keys},
        "first_seq": first_seq,
        "first_prev": first_prev,
        "entries": entries,
    }


def entry_from_json(doc: object, where: str) -> Entry:
    if not isinstance(doc, dict):
        raise LedgerError(f"{where}: a ledger entry must be a JSON object")
    try:
        seq, time, kind, body = doc["seq"], doc["time"], doc["kind"], doc["body"]
        prev, digest = doc["prev"], doc["hash"]
    except KeyError as e:
        raise LedgerError(f"{where}: ledger entry without {e.args[0]!r}") from None
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise LedgerError(f"{where}: seq must be a whole number")
    if not all(isinstance(x, str) for x in (time, kind, prev, digest)):
        raise LedgerError(f"{where}: time, kind, prev and hash must be strings")
    if not isinstance(body, dict):
        raise LedgerError(f"{where}: body must be a JSON object")
    return Entry(seq, time, kind, body, prev, digest)


def read_export(path: Path) -> tuple[Header, list[Entry]]:
    """The header and entries of an export file; a malformed file is a :class:`LedgerError`
    naming the line."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise LedgerError(f"cannot read {path}: {e.strerror or e}") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise LedgerError(f"{path}: empty file, not a ledger export")
    docs: list[object] = []
    for n, line in enumerate(lines, 1):
        try:
            docs.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as e:
            raise LedgerError(f"{path}:{n}: not a JSON line ({e})") from None
        except RecursionError:  # json's decoder recurses once per nested array or object
            raise LedgerError(f"{path}:{n}: not a ledger entry (nests too deeply)") from None
    header = _header(docs[0], f"{path}:1")
    entries = [entry_from_json(d, f"{path}:{n}") for n, d in enumerate(docs[1:], 2)]
    return header, entries


def _header(doc: object, where: str) -> Header:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LedgerError(f"{where}: not a {FORMAT} export (no header line)")
    if doc.get("version") != VERSION:
        raise LedgerError(
            f"{where}: export format version {doc.get('version')!r}; this computewatch reads "
            f"version {VERSION}"
        )
    keys_doc = doc.get("public_keys", {})
    if not isinstance(keys_doc, dict):
        raise LedgerError(f"{where}: public_keys must be an object")
    keys: dict[str, Ed25519PublicKey] = {}
    for kid, text in keys_doc.items():
        if not isinstance(text, str):
            raise LedgerError(f"{where}: public key {kid!r} is not a string")
        key = decode_public(text)
        if key_id(key) != kid:
            raise LedgerError(f"{where}: public key {kid!r} does not match its id")
        keys[kid] = key
    first_seq, first_prev = doc.get("first_seq", 1), doc.get("first_prev", GENESIS)
    if not isinstance(first_seq, int) or not isinstance(first_prev, str):
        raise LedgerError(f"{where}: first_seq must be a number and first_prev a string")
    count = doc.get("entries")
    return Header(
        keys, first_seq, first_prev, str(doc.get("exported_at", "")),
        count if isinstance(count, int) else None,
    )  # fmt: skip


def verify(
    entries: Sequence[Entry],
    header: Header,
    trusted: Ed25519PublicKey | None = None,
    *,
    require_signed_head: bool = False,
) -> Verdict:
    """Check ``entries`` (in the order they were read) as a chain starting at the header's
    ``first_seq``/``first_prev``; the verdict names the first problem found."""
    v = Verdict()
    keys = _trusted_keys(entries, header, trusted)
    if trusted is None:
        v.notes.append(
            "no --public-key given: checkpoints were checked against the keys in the export, "
            "which proves it is unchanged since signed, not who signed it"
        )
    if header.first_seq != 1:
        v.notes.append(
            f"entries before seq {header.first_seq} were pruned under the retention policy; "
            f"the chain is checked from there"
        )
    positions: dict[int, list[int]] = {}
    for i, e in enumerate(entries):
        positions.setdefault(e.seq, []).append(i)
    expected, prev = header.first_seq, header.first_prev
    covered: int | None = None
    """The last entry a valid checkpoint covers (a checkpoint right after its head: itself)."""
    nodes: dict[str, _NodeKey] = {}
    for i, e in enumerate(entries):
        if e.recomputed() != e.hash:
            return _fail(v, e.seq, "altered", f"entry {e.seq} was altered: its content no "
                         "longer matches its hash")  # fmt: skip
        if e.seq != expected:
            return _fail(v, *_out_of_order(e, i, expected, positions))
        if e.prev != prev:
            return _fail(
                v, e.seq, "inserted" if i and entries[i - 1].seq == e.seq - 1 else "altered",
                f"the chain breaks before entry {e.seq}: its previous hash does not match entry "
                f"{e.seq - 1} (an entry before it was replaced, or entries were inserted and "
                "renumbered)",
            )  # fmt: skip
        if e.kind == CHECKPOINT_KIND:
            problem = _checkpoint(e, entries, header.first_seq, keys)
            if problem is not None:
                return _fail(v, e.seq, "signature", problem)
            v.checkpoints += 1
            v.last_signed_seq = int(e.body["head_seq"])
            covered = e.seq if v.last_signed_seq == e.seq - 1 else v.last_signed_seq
        elif e.kind == ROTATION_KIND:
            if rotation_keys(e.body) is None:
                return _fail(v, e.seq, "signature", f"key-rotation entry {e.seq} is not signed "
                             "by the key it retires")  # fmt: skip
        elif e.kind == NODE_KEY_KIND:
            problem = _node_key(e, nodes)
            if problem is not None:
                return _fail(v, e.seq, "node_key", problem)
        elif e.kind == RUN_KIND:
            problem = _run_report(e, nodes, v)
            if problem is not None:
                return _fail(v, e.seq, "report", problem)
        v.entries += 1
        expected, prev = e.seq + 1, e.hash
    if header.first_seq != 1 and not any(
        e.kind == PRUNE_KIND
        and e.body.get("first_seq") == header.first_seq
        and e.body.get("first_prev") == header.first_prev
        for e in entries
    ):
        return _fail(v, header.first_seq, "removed",
                     f"the chain starts at entry {header.first_seq} but no prune entry says "
                     "the entries before it were deleted under the retention policy")  # fmt: skip
    if header.entries is not None and header.entries != len(entries):
        missing = header.entries - len(entries)
        what = "removed from the end" if missing > 0 else "appended"
        message = f"{abs(missing)} entries were {what} (the header counts {header.entries})"
        return _fail(v, expected, "removed" if missing > 0 else "inserted", message)
    if require_signed_head and covered != (entries[-1].seq if entries else None):
        last = entries[-1].seq if entries else header.first_seq - 1
        first = (covered or header.first_seq - 1) + 1
        return _fail(v, first, "unsigned",
                     f"entries {first} to {last} are not covered by a signed checkpoint "
                     f"({v.checkpoints} checkpoints hold): checkpoints were dropped or the "
                     "export is cut, so nothing proves these entries are the server's"
                     )  # fmt: skip
    return v


@dataclass(frozen=True, slots=True)
class _Signer:
    key: Ed25519PublicKey
    retired_at: int | None = None
    """The seq of the key-rotation entry that retired it (None: still in use)."""


def _trusted_keys(
    entries: Sequence[Entry], header: Header, trusted: Ed25519PublicKey | None
) -> dict[str, _Signer]:
    """The keys checkpoints may be signed with: ``trusted`` (else the header's), and each key
    that a key-rotation entry, signed by it, names as the predecessor of a trusted one, valid
    until that rotation."""
    if trusted is None:
        out = {kid: _Signer(k) for kid, k in header.public_keys.items()}
    else:
        out = {key_id(trusted): _Signer(trusted)}
    rotations = [(e.seq, rotation_keys(e.body)) for e in entries if e.kind == ROTATION_KIND]
    for seq, pair in reversed(rotations):
        if pair is None:
            continue
        old, new = pair
        if key_id(new) in out:
            out[key_id(old)] = _Signer(old, seq)
    return out


def _out_of_order(
    e: Entry, i: int, expected: int, positions: Mapping[int, list[int]]
) -> tuple[int, str, str]:
    if e.seq > expected:
        later = [p for p in positions.get(expected, []) if p > i]
        if later:
            return expected, "reordered", f"entry {expected} was moved after entry {e.seq}"
        gap = f"{expected}" if e.seq == expected + 1 else f"{expected} to {e.seq - 1}"
        return expected, "removed", f"entry {gap} was removed (seq jumps to {e.seq})"
    earlier = [p for p in positions.get(e.seq, []) if p < i]
    if earlier:
        return e.seq, "inserted", f"entry {e.seq} appears twice: one copy was inserted"
    return e.seq, "reordered", f"entry {e.seq} was moved after entry {expected - 1}"


def _checkpoint(
    e: Entry, entries: Sequence[Entry], first_seq: int, keys: Mapping[str, _Signer]
) -> str | None:
    body = e.body
    kid = body.get("key_id")
    signer = keys.get(kid) if isinstance(kid, str) else None
    if signer is None:
        return f"checkpoint {e.seq} is signed by key {kid!r}, which is not a trusted key"
    if signer.retired_at is not None and e.seq > signer.retired_at:
        return (
            f"checkpoint {e.seq} is signed by key {kid}, retired by the key rotation at entry "
            f"{signer.retired_at}"
        )
    if not checkpoint_valid(body, signer.key):
        return f"checkpoint {e.seq}'s signature does not match what it vouches for"
    head_seq = body.get("head_seq")
    if head_seq == e.seq - 1 and body.get("head_hash") == e.prev:
        return None  # vouches for the entry just before it (kept or pruned), whose hash is prev
    index = head_seq - first_seq if isinstance(head_seq, int) else -1
    if not 0 <= index < len(entries) or entries[index].hash != body.get("head_hash"):
        return (
            f"checkpoint {e.seq} vouches for entry {head_seq} with a hash the ledger no longer "
            "has: entries up to it were altered and re-hashed"
        )
    return None


@dataclass(slots=True)
class _NodeKey:
    key: Ed25519PublicKey
    team: object
    revoked: bool = False


def _node_key(e: Entry, nodes: dict[str, _NodeKey]) -> str | None:
    body = e.body
    action, kid, text = body.get("action"), body.get("key_id"), body.get("public_key")
    if action == "revoke":
        held = nodes.get(kid) if isinstance(kid, str) else None
        if held is not None:
            held.revoked = True
        return None
    if action != "register" or not isinstance(kid, str) or not isinstance(text, str):
        return f"node_key entry {e.seq} is neither a registration nor a revocation of a key"
    try:
        key = decode_public(text)
    except LedgerError as err:
        return f"node_key entry {e.seq} holds no readable public key: {err}"
    if key_id(key) != kid:
        return f"node_key entry {e.seq}: key id {kid} does not match its public key"
    nodes[kid] = _NodeKey(key, body.get("team"))
    return None


def _run_report(e: Entry, nodes: Mapping[str, _NodeKey], v: Verdict) -> str | None:
    v.reports += 1
    report = e.body.get("signed_report")
    if report is None:
        v.reports_unsigned += 1
        return None
    bad = shape_problem(report)
    if bad is not None:
        return f"run entry {e.seq}'s signed report is malformed ({bad})"
    assert isinstance(report, Mapping)
    body = e.body
    for k in ("run_id", "seq", "status", "started_at", "ended_at", "summary_sha256"):
        if body.get(k) != report[k]:
            return f"run entry {e.seq}'s {k} differs from its signed report's"
    node = nodes.get(report["signed_by"])
    if node is None or node.revoked or node.team != body.get("team"):
        v.reports_unknown_key += 1
        return None
    if not report_valid(report, node.key):
        return (
            f"run entry {e.seq}'s signed report does not match its signature by node key "
            f"{report['signed_by']} (changed after signing)"
        )
    v.reports_signed += 1
    return None


def _fail(v: Verdict, seq: int, what: str, message: str) -> Verdict:
    v.problem = Problem(seq, what, message)
    return v


def export_lines(header: Mapping[str, Any], entries: Iterable[Entry]) -> Iterable[bytes]:
    """The lines of an export file (each ending in a newline): the header, then the entries."""
    yield canonical(header) + b"\n"
    for e in entries:
        yield canonical(e.to_json()) + b"\n"
