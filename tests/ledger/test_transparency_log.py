"""The export of the transparency log and its streaming verification (computewatch.ledger.audit),
on logs built here: every tampering named, heads from other keys and retired keys refused, an
earlier export or head compared (a fork named at its first differing entry), witnesses'
cosignatures required, and C2SP cosignatures and verifier keys."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger import merkle
from computewatch.ledger.audit import Previous, WitnessKey, verify_log
from computewatch.ledger.jcs import dumps
from computewatch.ledger.keys import ROTATION_KIND, encode_public, key_id, rotation_body
from computewatch.ledger.log import LogHeader, entry_line, prefix_range
from computewatch.ledger.note import (
    cosign,
    parse_checkpoint,
    parse_vkey,
    sign_checkpoint,
    signature_line,
    vkey,
)
from computewatch.ledger.verify import Verdict

KEY = Ed25519PrivateKey.generate()
ORIGIN = "computewatch.ledger/test"


def _lines(n: int, start: int = 1) -> list[bytes]:
    return [
        entry_line(seq, f"2026-12-01T10:00:{seq % 60:02d}.000000Z", "note", {"n": seq, "x": 0.5})
        for seq in range(start, start + n)
    ]


def _head(lines: list[bytes], size: int, key: Ed25519PrivateKey = KEY) -> str:
    root = merkle.root_of(merkle.leaf_hash(x) for x in lines[:size])
    return sign_checkpoint(ORIGIN, size, root, 1_800_000_000, key).text()


def _header(lines: list[bytes], heads: list[str], **over: Any) -> LogHeader:
    keys = {key_id(k.public_key()): encode_public(k.public_key()) for k in (KEY,)}
    doc: dict[str, Any] = dict(
        origin=ORIGIN,
        public_keys=keys,
        first_seq=1,
        prefix=(),
        entries=len(lines),
        heads=tuple(heads),
    )
    doc.update(over)
    return LogHeader(**doc)


def _verify(lines: list[bytes], heads: list[str] | None = None, **kw: Any) -> Verdict:
    heads = [_head(lines, len(lines))] if heads is None else heads
    header = kw.pop("header", None) or _header(lines, heads)
    return verify_log(header, lines, kw.pop("trusted", KEY.public_key()), **kw)


def _what(v: Verdict) -> tuple[str, int]:
    assert v.problem is not None
    return v.problem.what, v.problem.seq


def test_an_intact_log_verifies_and_every_head_is_checked() -> None:
    lines = _lines(20)
    v = _verify(lines, [_head(lines, 7), _head(lines, 13), _head(lines, 20)])
    assert v.ok and v.entries == 20 and v.checkpoints == 3 and v.last_signed_seq == 20
    assert v.root == merkle.root_of(merkle.leaf_hash(x) for x in lines).hex()


@pytest.mark.parametrize(
    ("edit", "what", "seq"),
    [
        (lambda ls: [*ls[:4], ls[4].replace(b'"x":0.5', b'"x":0.6'), *ls[5:]], "altered", 20),
        (lambda ls: [*ls[:4], ls[4].replace(b'"x":0.5', b'"x":0.50'), *ls[5:]], "altered", 5),
        (lambda ls: [*ls[:4], *ls[5:]], "removed", 5),
        (lambda ls: [*ls[:5], ls[4], *ls[5:]], "inserted", 5),
        (lambda ls: [*ls[:4], ls[5], ls[4], *ls[6:]], "reordered", 5),
    ],
    ids=["a value (still canonical)", "a number respelled", "removed", "inserted", "swapped"],
)
def test_tampering_is_named(
    edit: Callable[[list[bytes]], list[bytes]], what: str, seq: int
) -> None:
    lines = _lines(20)
    v = _verify(edit(lines), [_head(lines, 20)], header=_header(lines, [_head(lines, 20)]))
    assert _what(v) == (what, seq), v.problem


def test_heads_by_another_key_or_retired_keys_are_refused() -> None:
    lines = _lines(10)
    other = Ed25519PrivateKey.generate()
    v = _verify(lines, [_head(lines, 10, other)])
    assert _what(v)[0] == "signature"  # signed by a key the export does not hold
    keys = {key_id(k.public_key()): encode_public(k.public_key()) for k in (KEY, other)}
    header = _header(lines, [_head(lines, 10, other)], public_keys=keys)
    v = verify_log(header, lines, KEY.public_key())
    assert _what(v) == ("signature", 10) and "not a trusted key" in str(v.problem)
    assert verify_log(header, lines, None).ok  # the header's own keys: unchanged since signed
    new = Ed25519PrivateKey.generate()  # a rotation at entry 6: the old key signs before it
    rotated = [
        *lines[:5],
        entry_line(6, "t", ROTATION_KIND, rotation_body(KEY, new.public_key())),
        *_lines(4, 7),
    ]
    keys = {key_id(k.public_key()): encode_public(k.public_key()) for k in (KEY, new)}
    heads = [_head(rotated, 5, KEY), _head(rotated, 10, new)]
    assert verify_log(_header(rotated, heads, public_keys=keys), rotated, new.public_key()).ok
    late = [_head(rotated, 7, KEY), _head(rotated, 10, new)]  # the old key after its retirement
    v = verify_log(_header(rotated, late, public_keys=keys), rotated, new.public_key())
    assert _what(v) == ("signature", 7) and "retired" in str(v.problem)


def test_an_unsigned_tail_and_a_cut_export() -> None:
    lines = _lines(12)
    v = _verify(lines, [_head(lines, 8)])
    assert _what(v) == ("unsigned", 9)
    assert _verify(lines, [_head(lines, 8)], require_signed_head=False).ok
    v = _verify(lines[:9], [_head(lines, 12)], header=_header(lines[:9], [_head(lines, 12)]))
    assert _what(v) == ("removed", 10)
    v = _verify(lines[:9], [_head(lines, 12)], header=_header(lines, [_head(lines, 12)]))
    assert _what(v) == ("removed", 10)  # the header's count


def test_a_pruned_log_verifies_from_its_prefix() -> None:
    lines = _lines(20)
    leaves = [merkle.leaf_hash(x) for x in lines]
    rng = merkle.CompactRange()
    for h in leaves[:11]:
        rng.append_hash(h)
    prune = entry_line(21, "t", "prune", {"first_seq": 12, "before": "t", "deleted": 11})
    kept = [*lines[11:], prune]
    full = [*lines, prune]
    header = _header(kept, [_head(full, 21)], first_seq=12, prefix=tuple(h for _, h in rng.stack))
    assert verify_log(header, kept, KEY.public_key()).ok
    assert prefix_range(header.prefix, 11).root() == merkle.root_of(leaves[:11])
    no_prune = _header(
        lines[11:], [_head(lines, 20)], first_seq=12, prefix=tuple(h for _, h in rng.stack)
    )
    assert _what(verify_log(no_prune, lines[11:], KEY.public_key()))[0] == "removed"


def test_an_earlier_export_or_head_names_a_fork() -> None:
    old = _lines(10)
    new = [*old, *_lines(5, 11)]
    rewritten = [*new[:6], new[6].replace(b'"x":0.5', b'"x":0.25'), *new[7:]]
    header = _header(rewritten, [_head(rewritten, 15)])

    def previous() -> Previous:
        return Previous("old.jsonl", header=_header(old, [_head(old, 10)]), lines=iter(old))

    assert _verify(new, previous=previous()).ok
    v = verify_log(header, rewritten, KEY.public_key(), previous=previous())
    assert _what(v) == ("fork", 7) and "entry 7 differs from the earlier export" in str(v.problem)
    head = parse_checkpoint(_head(old, 10))
    assert _verify(new, previous=Previous("head", head=head)).ok
    v = verify_log(header, rewritten, KEY.public_key(), previous=Previous("head", head=head))
    assert _what(v) == ("fork", 10)
    shorter = _header(old[:8], [_head(old, 8)])
    v = verify_log(shorter, old[:8], KEY.public_key(), previous=previous())
    assert _what(v) == ("removed", 9)


def test_witnesses_required() -> None:
    lines = _lines(9)
    w1, w2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    cp = parse_checkpoint(_head(lines, 9))
    both = cp.with_signature(cosign(cp, w1, "w1.example", 1)).with_signature(
        cosign(cp, w2, "w2.example", 2)
    )
    keys = [WitnessKey("w1.example", w1.public_key()), WitnessKey("w2.example", w2.public_key())]
    assert _verify(lines, [both.text()], witnesses=keys, witnesses_required=2).witnessed_size == 9
    one = cp.with_signature(cosign(cp, w1, "w1.example", 1))
    v = _verify(lines, [one.text()], witnesses=keys, witnesses_required=2)
    assert _what(v)[0] == "unwitnessed"
    older = parse_checkpoint(_head(lines, 6))
    older = older.with_signature(cosign(older, w1, "w1.example", 1))
    v = _verify(lines, [older.text(), cp.text()], witnesses=keys[:1], witnesses_required=1)
    assert _what(v) == ("unwitnessed", 7)
    forged = cp.with_signature(cosign(parse_checkpoint(_head(lines, 8)), w1, "w1.example", 1))
    v = _verify(lines, [forged.text()], witnesses=keys[:1], witnesses_required=1)
    assert _what(v)[0] == "unwitnessed"  # a cosignature of another head is none of this one


def test_cosignatures_and_verifier_keys_follow_c2sp() -> None:
    w = Ed25519PrivateKey.generate()
    cp = parse_checkpoint(_head(_lines(3), 3))
    sig = cosign(cp, w, "witness.example/w", 1_700_000_000)
    assert len(sig.signature) == 72 and sig.signature[:8] == (1_700_000_000).to_bytes(8, "big")
    w.public_key().verify(
        sig.signature[8:], b"cosignature/v1\ntime 1700000000\n" + cp.body.encode()
    )
    again = parse_checkpoint(cp.with_signature(sig).text())
    assert again.cosigned_by("witness.example/w", w.public_key()) == 1_700_000_000
    assert signature_line(sig) in again.text()
    name, key, cosigner = parse_vkey(vkey("witness.example/w", w.public_key(), cosigner=True))
    assert (name, cosigner) == ("witness.example/w", True) and key_id(key) == key_id(w.public_key())
    log = vkey(ORIGIN, KEY.public_key())
    assert parse_vkey(log)[2] is False
    with pytest.raises(Exception, match="hash does not match"):
        parse_vkey(log.replace(ORIGIN, ORIGIN + "x", 1))


def test_the_export_header_is_canonical_json() -> None:
    lines = _lines(3)
    from computewatch.ledger.log import header_json

    doc = header_json(
        origin=ORIGIN,
        exported_at="t",
        public_keys={},
        first_seq=1,
        prefix=[],
        entries=3,
        heads=[_head(lines, 3)],
    )
    assert json.loads(dumps(doc))["version"] == 2


@pytest.mark.parametrize("jobs", [1, 3])
def test_chunks_checked_in_workers_agree(jobs: int) -> None:
    """Several chunks: a node key registered in the first chunk signs reports in the third;
    a report altered in the third is named, whether checked here or in worker processes."""
    from computewatch.ledger import audit
    from computewatch.ledger.keys import sign_report
    from computewatch.ledger.reports import usage_report

    node = Ed25519PrivateKey.generate()
    pub = node.public_key()
    lines = [
        entry_line(
            1,
            "t",
            "node_key",
            {
                "action": "register",
                "key_id": key_id(pub),
                "public_key": encode_public(pub),
                "team": "lab",
                "name": "n",
                "registered_at": 1,
                "revoked_at": None,
            },
        )
    ]
    lines += _lines(2 * audit.CHUNK + 10, 2)
    start = len(lines) + 1
    for seq in range(start, start + 5):
        report = sign_report(
            usage_report(
                run_id=f"r{seq}",
                seq=1,
                final=True,
                status="completed",
                exit_code=0,
                started_at=1.7e9,
                ended_at=1.7e9 + 1,
                summary={},
                meta={},
                figures=None,
            ),
            node,
        )
        lines.append(
            entry_line(
                seq,
                "t",
                "run",
                {
                    "run_id": f"r{seq}",
                    "team": "lab",
                    "seq": 1,
                    "status": "completed",
                    "started_at": 1.7e9,
                    "ended_at": 1.7e9 + 1,
                    "summary_sha256": report["summary_sha256"],
                    "signature": "valid",
                    "signed_report": report,
                    "figures": None,
                },
            )
        )
    v = _verify(lines, jobs=jobs)
    assert v.ok, v.problem
    assert (v.reports, v.reports_signed) == (5, 5) and v.entries == len(lines)
    bad = list(lines)
    bad[-2] = bad[-2].replace(b'"exit_code":0', b'"exit_code":1')
    v = _verify(
        bad,
        [_head(lines, len(lines))],
        header=_header(lines, [_head(lines, len(lines))]),
        jobs=jobs,
    )
    assert _what(v) == ("report", len(lines) - 1)
    gap = [*lines[: audit.CHUNK + 5], *lines[audit.CHUNK + 6 :]]
    v = _verify(
        gap,
        [_head(lines, len(lines))],
        header=_header(lines, [_head(lines, len(lines))]),
        jobs=jobs,
    )
    assert _what(v) == ("removed", audit.CHUNK + 6)


def test_old_heads_are_thinned_to_one_an_hour_but_cosigned_ones_and_the_newest(
    tmp_path: Path,
) -> None:
    from sqlalchemy import select

    from computewatch.serverdb.engine import open_database, upgrade
    from computewatch.serverdb.governance_models import LedgerCosignature, LedgerHead
    from computewatch.serverdb.ledger_store import append, sign_head, thin_heads

    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    day = 86_400
    with db.session() as session:
        for i in range(12):  # a head every 20 minutes, three days ago
            append(session, "note", {"i": i})
            sign_head(session, KEY, now=1_800_000_000 - 3 * day + i * 1200)
        session.add(
            LedgerCosignature(
                size=5,
                witness="w",
                key_hash="00000000",
                public_key="",
                signed_at=0,
                line="",
                received_at=0.0,
            )
        )
        append(session, "note", {"i": 12})
        sign_head(session, KEY, now=1_800_000_000)
        assert thin_heads(session, 1_800_000_000) == 7
        kept = session.scalars(select(LedgerHead.size).order_by(LedgerHead.size)).all()
    assert kept == [1, 4, 5, 7, 10, 13]  # one an hour, the cosigned, the newest
    db.dispose()


def _export_file(path: Path, lines: list[bytes], heads: list[str], **over: Any) -> Path:
    from computewatch.ledger.log import export_lines, header_json

    keys = {key_id(KEY.public_key()): encode_public(KEY.public_key())}
    doc: dict[str, Any] = dict(
        origin=ORIGIN, exported_at="t", public_keys=keys, first_seq=1, prefix=[],
        entries=len(lines), heads=heads,
    )  # fmt: skip
    doc.update(over)
    path.write_bytes(b"".join(export_lines(header_json(**doc), lines)))
    return path


def _summary(v: Verdict) -> tuple[object, ...]:
    p = v.problem
    return (None if p is None else (p.what, p.seq, p.message), v.entries, v.checkpoints, v.root)


@pytest.mark.parametrize(
    ("edit", "what", "seq"),
    [
        (lambda ls: ls, None, 0),
        (lambda ls: [*ls[:149], ls[149].replace(b'"x":0.5', b'"x":0.6'), *ls[150:]], "altered",
         300),
        (lambda ls: [*ls[:149], ls[149].replace(b'"x":0.5', b'"x": 0.5'), *ls[150:]], "altered",
         150),
        (lambda ls: [*ls[:39], *ls[40:250], ls[39], *ls[250:]], "reordered", 40),
        (lambda ls: [*ls[:39], *ls[40:]], "removed", 40),
        (lambda ls: [*ls[:200], b"", *ls[200:]], "format", 0),
    ],
    ids=["intact", "a value", "a space", "moved far ahead", "removed", "an empty line"],
)  # fmt: skip
@pytest.mark.parametrize("jobs", [1, 3])
def test_an_export_file_is_checked_in_blocks_as_its_lines_are(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    edit: Callable[[list[bytes]], list[bytes]],
    what: str | None,
    seq: int,
    jobs: int,
) -> None:
    """An export file is read in blocks of whole lines, handed to the workers as they are: the
    verdict is the one its lines give one by one, wherever a head, a change, a move or an empty
    line falls (blocks of 4 KiB here: about 40 entries each). An entry moved far ahead, past
    blocks already sent to workers, is found there ("reordered", not "removed")."""
    from computewatch.ledger import audit, log
    from computewatch.ledger.log import open_export

    monkeypatch.setattr(log, "BLOCK", 4096)
    monkeypatch.setattr(audit, "SPAN", 1)  # (the workers' units: these blocks)
    lines = _lines(300)
    heads = [_head(lines, 100), _head(lines, 300)]
    path = _export_file(tmp_path / "log.jsonl", edit(lines), heads, entries=300)
    by_line = _verify(edit(lines), heads, header=_header(lines, heads), jobs=jobs)
    ex = open_export(path)
    v = verify_log(ex.header, ex.lines(), KEY.public_key(), jobs=jobs)
    if what is None:
        assert v.ok and v.entries == 300 and v.checkpoints == 2
    else:
        assert _what(v) == (what, seq), v.problem
    if what == "format":  # the line-by-line reader names the file's line, as the blocks do
        assert v.problem is not None and v.problem.message == f"{path}:202: an empty line"
        ex = open_export(path)
        one_by_one = verify_log(ex.header, (x for x in ex.lines()), KEY.public_key(), jobs=jobs)
        assert one_by_one.problem == v.problem
    else:
        assert _summary(v) == _summary(by_line)


@pytest.mark.parametrize("claim", ["earlier", "one more", "far ahead", "no seq"])
@pytest.mark.parametrize("jobs", [1, 3])
def test_a_block_whose_last_line_lies_about_its_seq_is_checked_as_its_lines_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claim: str, jobs: int
) -> None:
    """A block's entries are counted from its last line's seq (not its newlines): where that
    line says another seq, or none, the verdict is still the one the lines give one by one,
    for the last line of each of the first blocks (whose claim the next blocks are numbered
    from, a head among them)."""
    from computewatch.ledger import audit, log
    from computewatch.ledger.log import open_export

    monkeypatch.setattr(log, "BLOCK", 4096)
    monkeypatch.setattr(audit, "SPAN", 1)  # (the workers' units: these blocks)
    lines = _lines(300)
    heads = [_head(lines, 100), _head(lines, 300)]
    ends = [
        int(b.rsplit(b'"seq":', 1)[1].split(b",")[0])
        for b in open_export(_export_file(tmp_path / "a.jsonl", lines, heads)).lines().blocks()
    ]
    assert len(ends) > 4 and ends[1] < 100 < ends[2]  # fmt: skip
    for seq in ends[:4]:
        new = {"earlier": seq - 45, "one more": seq + 1, "far ahead": 250, "no seq": None}[claim]
        i = seq - 1
        bad = (lines[i].replace(b'"seq":%d,' % seq, b'"seq":%d,' % new) if new is not None
               else lines[i].replace(b'"seq":', b'"sequence":'))  # fmt: skip
        edited = [*lines[:i], bad, *lines[i + 1 :]]
        path = _export_file(tmp_path / "log.jsonl", edited, heads, entries=300)
        by_line = _verify(edited, heads, header=_header(lines, heads), jobs=jobs)
        ex = open_export(path)
        v = verify_log(ex.header, ex.lines(), KEY.public_key(), jobs=jobs)
        assert v.problem is not None and _summary(v) == _summary(by_line), (seq, v.problem)


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_pruned_export_file_is_checked_in_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """Blocks start where the pruned prefix ends (an odd size): the tree takes each block's
    aligned subtrees on top of the prefix, and the root is the whole log's."""
    from computewatch.ledger import audit, log
    from computewatch.ledger.log import open_export

    monkeypatch.setattr(log, "BLOCK", 4096)
    monkeypatch.setattr(audit, "SPAN", 1)  # (the workers' units: these blocks)
    lines = _lines(300)
    rng = merkle.CompactRange()
    for line in lines[:37]:
        rng.append(line)
    kept = [
        *lines[37:100],
        entry_line(101, "t", "prune", {"first_seq": 38, "first_prev": "x"}),
        *_lines(199, 102),
    ]
    full = [*lines[:37], *kept]
    heads = [_head(full, 300)]
    prefix = [h for _, h in rng.stack]
    path = _export_file(tmp_path / "log.jsonl", kept, heads, first_seq=38, prefix=prefix,
                        entries=len(kept))  # fmt: skip
    ex = open_export(path)
    v = verify_log(ex.header, ex.lines(), KEY.public_key(), jobs=jobs)
    assert v.ok, v.problem
    assert v.root == merkle.root_of(merkle.leaf_hash(x) for x in full).hex()
