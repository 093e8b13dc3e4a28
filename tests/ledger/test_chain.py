"""The ledger's chain and its verification: every kind of tampering is caught and named."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger.chain import GENESIS, Entry, LedgerError, canonical, next_entry
from computewatch.ledger.keys import (
    CHECKPOINT_KIND,
    checkpoint_body,
    load_or_create_private_key,
    report_valid,
    sign_report,
)
from computewatch.ledger.verify import (
    Header,
    export_lines,
    header_json,
    read_export,
    verify,
)

KEY = Ed25519PrivateKey.generate()


def _chain(n: int = 30, every: int = 10, key: Ed25519PrivateKey = KEY) -> list[Entry]:
    out: list[Entry] = []
    for i in range(n):
        last = out[-1] if out else None
        out.append(next_entry(last, "run", {"run": f"r{i}", "gpu_hours": i * 0.5}))
        if (i + 1) % every == 0:
            out.append(next_entry(out[-1], CHECKPOINT_KIND, checkpoint_body(out[-1], key)))
    return out


def _header(entries: list[Entry]) -> Header:
    return Header({}, entries=None)


def _export(tmp_path: Path, entries: list[Entry], key: Ed25519PrivateKey = KEY) -> Path:
    p = tmp_path / "ledger.jsonl"
    head = header_json([key.public_key()], exported_at="2026-11-30T00:00:00.000000Z",
                       entries=len(entries))  # fmt: skip
    p.write_bytes(b"".join(export_lines(head, entries)))
    return p


def _verify_file(p: Path, trusted: Ed25519PrivateKey | None = None) -> tuple[bool, str, int]:
    header, entries = read_export(p)
    v = verify(entries, header, None if trusted is None else trusted.public_key())
    if v.problem is None:
        return True, "", -1
    return False, v.problem.what, v.problem.seq


def test_an_intact_export_verifies(tmp_path: Path) -> None:
    entries = _chain()
    p = _export(tmp_path, entries)
    header, read = read_export(p)
    assert read == entries
    v = verify(read, header, KEY.public_key())
    assert v.ok and v.entries == len(entries) and v.checkpoints == 3
    assert v.last_signed_seq == entries[-2].seq


def test_first_entry_links_to_genesis() -> None:
    e = next_entry(None, "run", {"a": 1})
    assert e.seq == 1 and e.prev == GENESIS and e.recomputed() == e.hash


def _rewrite(p: Path, edit: object) -> None:
    lines = p.read_bytes().splitlines(keepends=True)
    assert callable(edit)
    p.write_bytes(b"".join(edit(lines)))


def test_one_byte_changed_is_named(tmp_path: Path) -> None:
    p = _export(tmp_path, _chain())
    _rewrite(p, lambda ls: [*ls[:5], ls[5].replace(b'"r4"', b'"r5"'), *ls[6:]])
    assert _verify_file(p, KEY) == (False, "altered", 5)


def test_an_entry_removed_is_named(tmp_path: Path) -> None:
    p = _export(tmp_path, _chain())
    _rewrite(p, lambda ls: [*ls[:7], *ls[8:]])  # line 8 holds seq 7
    assert _verify_file(p, KEY) == (False, "removed", 7)


def test_the_last_entries_removed_are_named(tmp_path: Path) -> None:
    p = _export(tmp_path, _chain())
    _rewrite(p, lambda ls: ls[:-3])
    ok, what, _ = _verify_file(p, KEY)
    assert (ok, what) == (False, "removed")


def test_two_entries_swapped_are_named(tmp_path: Path) -> None:
    p = _export(tmp_path, _chain())
    _rewrite(p, lambda ls: [*ls[:4], ls[5], ls[4], *ls[6:]])  # seq 4 and 5 swapped
    assert _verify_file(p, KEY) == (False, "reordered", 4)


def test_an_entry_inserted_is_named(tmp_path: Path) -> None:
    entries = _chain()
    forged = next_entry(entries[2], "run", {"run": "forged", "gpu_hours": 0})  # seq 4, valid hash
    p = _export(tmp_path, entries)
    _rewrite(p, lambda ls: [*ls[:4], canonical(forged.to_json()) + b"\n", *ls[4:]])
    ok, what, seq = _verify_file(p, KEY)
    assert (ok, what, seq) == (False, "inserted", 4)


def test_rehashing_everything_after_a_change_is_caught_by_the_signature(tmp_path: Path) -> None:
    entries = _chain()
    forged: list[Entry] = []
    for e in entries:  # an operator who rewrites history and recomputes every hash
        body = dict(e.body)
        if e.seq == 3:
            body["gpu_hours"] = 0.0
        if e.kind == CHECKPOINT_KIND:
            forged.append(next_entry(forged[-1], e.kind, body, e.time))
        else:
            forged.append(next_entry(forged[-1] if forged else None, e.kind, body, e.time))
    p = _export(tmp_path, forged)
    assert _verify_file(p, KEY) == (False, "signature", 11)  # the first checkpoint


def test_a_checkpoint_from_an_untrusted_key_fails(tmp_path: Path) -> None:
    other = Ed25519PrivateKey.generate()
    p = _export(tmp_path, _chain(key=other), key=other)
    assert _verify_file(p, None)[0]  # consistent with the keys it carries
    assert _verify_file(p, KEY) == (False, "signature", 11)  # not with the auditor's key


def test_unsigned_tail_can_be_required_signed() -> None:
    entries = _chain(25)
    v = verify(entries, Header({}), KEY.public_key(), require_signed_head=True)
    assert v.problem is not None and v.problem.what == "unsigned"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"not json\n", ":1: not a JSON line"),
        (b'{"format": "other"}\n', "not a computewatch-ledger export"),
        (b'{"format": "computewatch-ledger", "version": 9}\n', "version 9"),
        (
            b'{"format": "computewatch-ledger", "version": 1}\n{"seq": 1}\n',
            ":2: ledger entry without",
        ),
        (b'{"format": "computewatch-ledger", "version": 1}\n\xff\n', ":2: not a JSON line"),
    ],
)
def test_malformed_exports_name_the_line(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    with pytest.raises(LedgerError, match=message):
        read_export(p)


def test_signed_reports(tmp_path: Path) -> None:
    node = load_or_create_private_key(tmp_path / "node.pem")
    assert (tmp_path / "node.pem").stat().st_mode & 0o777 == 0o600
    again = load_or_create_private_key(tmp_path / "node.pem")
    assert again.public_key() == node.public_key()
    report = sign_report({"node": "n1", "gpu_hours": 12.5}, node)
    assert report_valid(report, node.public_key())
    assert not report_valid({**report, "gpu_hours": 13.0}, node.public_key())
    assert not report_valid(report, KEY.public_key())
    assert json.loads(canonical(report))["signed_by"] == report["signed_by"]
    assert len(base64.b64decode(report["signature"])) == 64


def test_non_json_bodies_are_refused() -> None:
    with pytest.raises(LedgerError, match="NaN"):
        next_entry(None, "run", {"x": float("nan")})
    with pytest.raises(LedgerError, match="not plain JSON"):
        next_entry(None, "run", {"x": object()})


def test_a_pruned_chain_verifies_only_with_its_prune_entry() -> None:
    from computewatch.ledger.verify import PRUNE_KIND

    entries = _chain(30)
    kept = entries[10:]
    start = Header({}, first_seq=kept[0].seq, first_prev=kept[0].prev)
    v = verify(kept, start, KEY.public_key())
    assert v.problem is not None and v.problem.what == "removed"  # no record of the pruning
    body = {"first_seq": kept[0].seq, "first_prev": kept[0].prev, "before": "x", "deleted": 10}
    kept.append(next_entry(kept[-1], PRUNE_KIND, body))
    v = verify(kept, start, KEY.public_key())
    assert v.ok, v.problem
    assert any("pruned" in n for n in v.notes)


def test_a_lone_surrogate_is_a_ledger_error_not_a_crash() -> None:
    with pytest.raises(LedgerError, match="not valid Unicode"):
        canonical({"name": "bad\udcff"})
