"""Ledger entries and their hash chain.

Each entry is ``(seq, time, kind, body, prev, hash)``: ``seq`` counts from 1 (or from the first
kept entry after pruning), ``time`` is an ISO 8601 UTC string, ``kind`` names what happened,
``body`` is any JSON object, ``prev`` is the previous entry's hash (64 zeros before the first)
and ``hash`` is SHA-256 over the canonical JSON of the other five fields. Changing any byte of
an entry changes its hash; changing a hash breaks the next entry's ``prev``; recomputing every
hash after a change is caught by the signed checkpoints (:mod:`computewatch.ledger.keys`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computewatch.errors import ComputewatchError

GENESIS = "0" * 64
"""The ``prev`` of the first entry of a ledger."""


class LedgerError(ComputewatchError):
    """A ledger that cannot be read, written or verified as asked."""


def canonical(value: object) -> bytes:
    """The canonical JSON of ``value``: keys sorted, no spaces, UTF-8, no NaN or infinity.
    Numbers are written as Python writes them (shortest round-trip form), so a reader in another
    language must hash the bytes of the export, not re-encode parsed numbers."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as e:
        raise LedgerError(f"ledger entry is not plain JSON: {e}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (undecodable bytes read as text): not JSON
        raise LedgerError("ledger entry holds a string that is not valid Unicode") from None


def utc_now() -> str:
    return format_time(dt.datetime.now(dt.UTC))


def format_time(t: dt.datetime) -> str:
    """ISO 8601 UTC with microseconds and a ``Z``: one spelling per instant."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entry_hash(seq: int, time: str, kind: str, body: Mapping[str, Any], prev: str) -> str:
    doc = {"seq": seq, "time": time, "kind": kind, "body": body, "prev": prev}
    return hashlib.sha256(canonical(doc)).hexdigest()


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    time: str
    kind: str
    body: Mapping[str, Any]
    prev: str
    hash: str

    def recomputed(self) -> str:
        return entry_hash(self.seq, self.time, self.kind, self.body, self.prev)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": self.time,
            "kind": self.kind,
            "body": dict(self.body),
            "prev": self.prev,
            "hash": self.hash,
        }


def _clean(body: Mapping[str, Any]) -> Mapping[str, Any]:
    def check(v: object) -> None:
        if isinstance(v, float) and not math.isfinite(v):
            raise LedgerError("ledger entry holds NaN or infinity, which JSON cannot carry")
        if isinstance(v, Mapping):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise LedgerError(f"ledger entry key {k!r} is not a string")
                check(x)
        elif isinstance(v, list | tuple):
            for x in v:
                check(x)

    check(body)
    parsed: Mapping[str, Any] = json.loads(canonical(body))  # exactly what a reader will see
    return parsed


def next_entry(
    last: Entry | None, kind: str, body: Mapping[str, Any], time: str | None = None
) -> Entry:
    """The entry that follows ``last`` (None: the first of a new ledger)."""
    if not kind or not isinstance(kind, str):
        raise LedgerError("a ledger entry needs a kind")
    seq = 1 if last is None else last.seq + 1
    prev = GENESIS if last is None else last.hash
    when = time or utc_now()
    clean = _clean(body)
    return Entry(seq, when, kind, clean, prev, entry_hash(seq, when, kind, clean, prev))
