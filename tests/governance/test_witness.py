"""The witness's poll against a log in memory (a fake of its one boundary, the LogClient
protocol): the first head trusted on first use and cosigned, a consistent newer head cosigned,
a rewritten history, a rollback and a second head of one size refused with evidence kept once
per refused head (a witness that keeps watching polls the same refused head again and again),
and nothing cosigned after a refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.governance.witness import open_state, poll_once
from computewatch.ledger import merkle
from computewatch.ledger.note import parse_checkpoint, sign_checkpoint

ORIGIN = "computewatch.ledger/witness-test"


class FakeLog:
    """A log of ``entries`` whose newest head the operator signs with ``key``."""

    def __init__(self, key: Ed25519PrivateKey, entries: list[bytes]) -> None:
        self.key = key
        self.entries = list(entries)
        self.cosigned: list[tuple[int, str]] = []

    def _leaves(self) -> list[bytes]:
        return [merkle.leaf_hash(e) for e in self.entries]

    def _node(self, level: int, index: int) -> bytes:
        return merkle.root_of(self._leaves()[index << level : (index + 1) << level])

    def _head(self) -> str:
        n = len(self.entries)
        return sign_checkpoint(ORIGIN, n, merkle.root_of(self._leaves()), 1, self.key).text()

    def ledger_head(self) -> dict[str, Any]:
        return {"checkpoint": self._head()}

    def consistency_proof(self, old: int, new: int | None = None) -> dict[str, Any]:
        n = len(self.entries)
        proof = merkle.consistency_proof(self._node, min(old, n), n) if old <= n else []
        return {"old_size": old, "size": n, "proof": [h.hex() for h in proof],
                "checkpoint": self._head()}  # fmt: skip

    def post_cosignature(self, size: int, line: str, public_key: str) -> dict[str, Any]:
        self.cosigned.append((size, line))
        return {"size": size, "stored": True}


def _entries(n: int, start: int = 1) -> list[bytes]:
    return [b'{"body":{"n":%d},"kind":"note","seq":%d,"time":""}' % (i, i)
            for i in range(start, start + n)]  # fmt: skip


def test_consistent_heads_are_cosigned_and_a_rewrite_is_refused_once(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    log = FakeLog(key, _entries(7))
    state = open_state(tmp_path / "w", "witness.example/a")
    first = poll_once(state, log, key.public_key())
    assert first.ok and first.cosigned and "trusted on first use" in first.message
    log.entries += _entries(3, 8)
    second = poll_once(state, log, key.public_key())
    assert second.ok and second.cosigned and "consistent with size 7" in second.message
    assert [s for s, _ in log.cosigned] == [7, 10]
    honest = state.last
    assert honest is not None and honest.size == 10

    log.entries[4] = b'{"body":{"n":0},"kind":"note","seq":5,"time":""}'  # entry 5 rewritten
    log.entries += _entries(1, 11)
    refusals = [poll_once(state, log, key.public_key()) for _ in range(3)]
    for r in refusals:
        assert not r.ok and not r.cosigned and "INCONSISTENT LOG" in r.message
        assert "does not extend the head at size 10" in r.message
    evidence = sorted((tmp_path / "w" / "evidence").glob("*.json"))
    assert len(evidence) == 1, evidence  # the same refused head, polled three times
    assert {r.evidence for r in refusals} == {evidence[0]}
    doc = json.loads(evidence[0].read_text())
    assert parse_checkpoint(doc["cosigned_checkpoint"]).root == honest.root
    assert parse_checkpoint(doc["checkpoint"]).size == 11
    assert [s for s, _ in log.cosigned] == [7, 10]  # nothing cosigned after the refusal
    assert state.last == honest

    log.entries += _entries(1, 12)  # another refused head: kept beside the first
    assert not poll_once(state, log, key.public_key()).ok
    assert len(list((tmp_path / "w" / "evidence").glob("*.json"))) == 2


def test_a_rollback_and_a_second_head_of_one_size_are_refused(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    log = FakeLog(key, _entries(6))
    state = open_state(tmp_path / "w")
    assert poll_once(state, log, key.public_key()).cosigned
    log.entries = log.entries[:4]
    back = poll_once(state, log, key.public_key())
    assert not back.ok and "went back from size 6 to 4" in back.message
    log.entries = _entries(6, 100)
    split = poll_once(state, log, key.public_key())
    assert not split.ok and "two heads of size 6 with different roots" in split.message
    assert len(list((tmp_path / "w" / "evidence").glob("*.json"))) == 2
    other = Ed25519PrivateKey.generate()
    assert not poll_once(state, FakeLog(other, _entries(8)), key.public_key()).ok
