"""The transparency log's parts: RFC 8785 canonical JSON (against the RFC's examples), the
RFC 9162 Merkle tree (roots, inclusion and consistency proofs against a naive tree, every size
up to 40), and C2SP checkpoint notes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger import merkle
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.jcs import canonical_value, dumps, number_text
from computewatch.ledger.note import parse_checkpoint, sign_checkpoint

VECTORS = Path(__file__).with_name("data") / "log-vectors.json"

# RFC 8785 appendix B: IEEE 754 bit patterns and their canonical text
NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), NUMBERS)
def test_numbers_are_written_as_ecmascript_writes_them(bits: str, text: str) -> None:
    x = float.fromhex(
        ("-" if int(bits, 16) >> 63 else "")
        + float.hex(abs(__import__("struct").unpack(">d", bytes.fromhex(bits))[0]))
    )
    assert number_text(x) == text


def test_the_rfc_example_object_and_ordering() -> None:
    # RFC 8785 section 3.2.2: the example object, and 3.2.3: sorting by UTF-16 code units
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert (
        dumps(value)
        == (
            '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
        ).encode()
    )
    order = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Dalet With Dagesh",
             "1": "One", "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
             "\u00f6": "Latin Small Letter O With Diaeresis"}  # fmt: skip
    keys = list(json.loads(dumps(order)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert canonical_value(dumps(order)) == order  # the full encoder decides there


def test_a_float_python_writes_its_own_way_is_canonical() -> None:
    assert dumps({"flop": 6591220000000000.0, "h": 8.0, "t": 1e16, "s": 1e-7}) == (
        b'{"flop":6591220000000000,"h":8,"s":1e-7,"t":10000000000000000}'
    )
    with pytest.raises(LedgerError, match="decimal string"):
        dumps({"flop": 10**25})
    with pytest.raises(LedgerError, match="decimal string"):  # beyond every double
        dumps({"exit_code": 10**400})
    with pytest.raises(LedgerError, match="canonical"):
        canonical_value(b'{"a":1' + b"0" * 400 + b"}")


def test_a_number_alone_is_written_and_checked_as_rfc_8785_says() -> None:
    """A JSON text that is one number (not an entry, but canonical_value and dumps take any
    value): ECMAScript's spelling there too, not Python's."""
    assert dumps(2.076210662001541e-05) == b"0.00002076210662001541"
    assert (dumps(8.0), dumps(1e16), dumps(-1e-7)) == (b"8", b"10000000000000000", b"-1e-7")
    assert canonical_value(b"0.00002076210662001541") == 2.076210662001541e-05
    for line in (b"8.0", b"1e+16", b"2.076210662001541e-05", b"-0.0"):
        with pytest.raises(LedgerError, match="canonical"):
            canonical_value(line)


@pytest.mark.parametrize(
    "line",
    [b'{"b":1,"a":2}', b'{"a": 1}', b'{"a":1.0}', b'{"a":1E3}', b'{"a":"\\u0041"}',
     b'{"a":1,"a":1}', b'{"a":-0}', b'{"a":12345678901234567890}', b'{"a":NaN}', b'{"a":"\\/"}',
     # integer tokens beyond 64 bits, and text after the value
     b'{"a":123456789012345678901234567890}', b'{"a":-9999999999999999999}',
     b'{"a":18446744073709551615}', b'{"a":1} ', b'{"a":1}{"b":2}',
     # nothing at all (an empty line)
     b""],
)  # fmt: skip
def test_non_canonical_lines_are_refused(line: bytes) -> None:
    with pytest.raises(LedgerError, match="canonical"):
        canonical_value(line)
    with pytest.raises(LedgerError, match="lone surrogate"):
        canonical_value(b'{"a":"\\ud800"}')


def _leaves(n: int) -> list[bytes]:
    return [merkle.leaf_hash(f"entry {i}".encode()) for i in range(n)]


def _naive(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.node_hash(_naive(leaves[:k]), _naive(leaves[k:]))


def _getter(leaves: list[bytes]) -> merkle.NodeGetter:
    def node(level: int, index: int) -> bytes:
        span = 1 << level
        chunk = leaves[index * span : (index + 1) * span]
        assert len(chunk) == span, "only complete subtrees are asked for"
        return _naive(chunk)

    return node


def test_roots_and_proofs_for_every_size_up_to_40() -> None:
    all_leaves = _leaves(40)
    for n in range(1, 41):
        leaves = all_leaves[:n]
        root = merkle.root_of(leaves)
        assert root == _naive(leaves)
        node = _getter(leaves)
        for i in range(n):
            proof = merkle.inclusion_proof(node, i, n)
            assert merkle.verify_inclusion(leaves[i], i, n, proof, root)
            assert not merkle.verify_inclusion(leaves[i], (i + 1) % n, n, proof, root) or n == 1
        for m in range(1, n + 1):
            proof = merkle.consistency_proof(node, m, n)
            old_root = merkle.root_of(leaves[:m])
            assert merkle.verify_consistency(m, n, old_root, root, proof), (m, n)
            if m < n:
                assert not merkle.verify_consistency(m, n, merkle.root_of(all_leaves[1 : m + 1]),
                                                     root, proof)  # fmt: skip
    assert merkle.root_of([]) == merkle.EMPTY_ROOT


def test_a_proof_reads_few_stored_subtrees() -> None:
    size = 1_000_000
    wanted = merkle.needed_nodes(lambda node: merkle.inclusion_proof(node, 123_456, size))
    assert len(wanted) <= 2 * 20
    wanted = merkle.needed_nodes(lambda node: merkle.consistency_proof(node, 777_777, size))
    assert len(wanted) <= 2 * 20


def test_checkpoint_notes_round_trip_and_name_their_key() -> None:
    key = Ed25519PrivateKey.generate()
    root = bytes(range(32))
    cp = sign_checkpoint("example.org/ledger", 7, root, 1_764_500_000, key)
    text = cp.text()
    assert text.startswith(
        f"example.org/ledger\n7\n{base64.b64encode(root).decode()}\ntime 1764500000\n\n\u2014 "
    )
    back = parse_checkpoint(text)
    assert (back.size, back.root, back.time) == (7, root, 1_764_500_000)
    assert back.signed_by("example.org/ledger", key.public_key())
    assert not back.signed_by("example.org/ledger", Ed25519PrivateKey.generate().public_key())
    forged = parse_checkpoint(text.replace("\n7\n", "\n8\n"))
    assert not forged.signed_by("example.org/ledger", key.public_key())
    with pytest.raises(LedgerError, match="blank line"):
        parse_checkpoint("a\n1\nAAAA\n")


def test_the_published_vectors_hold() -> None:
    """tests/ledger/data/log-vectors.json: what docs/ledger.md's example log computes to."""
    doc = json.loads(VECTORS.read_text())
    lines = [e.encode() for e in doc["entries"]]
    for line in lines:
        assert canonical_value(line) is not None and dumps(json.loads(line)) == line
    leaves = [merkle.leaf_hash(line) for line in lines]
    assert [h.hex() for h in leaves] == doc["leaf_hashes"]
    assert merkle.root_of(leaves).hex() == doc["root"]
    inc = doc["inclusion"]
    assert merkle.verify_inclusion(leaves[inc["index"]], inc["index"], inc["size"],
                                   [bytes.fromhex(p) for p in inc["path"]],
                                   bytes.fromhex(doc["root"]))  # fmt: skip
    con = doc["consistency"]
    assert merkle.verify_consistency(con["old_size"], con["size"], bytes.fromhex(con["old_root"]),
                                     bytes.fromhex(doc["root"]),
                                     [bytes.fromhex(p) for p in con["proof"]])  # fmt: skip
    cp = parse_checkpoint(doc["checkpoint"])
    from computewatch.ledger.keys import decode_public

    assert cp.root.hex() == doc["root"] and cp.size == len(lines)
    assert cp.signed_by(cp.origin, decode_public(doc["public_key"]))


@pytest.mark.parametrize("x", [3.2e18, 8e20, 2.0**60, -3.2e18, 1e16, 123456789012345680.0])
def test_a_double_written_whole_reads_back_the_same(x: float) -> None:
    """ECMAScript writes doubles from 1e16 up to 1e21 as integers (a run of 3.2e18 FLOP is
    3200000000000000000): such a line is canonical, read as that value, written back the
    same; an integer beyond 2**53 that is not a double's spelling is not."""
    line = dumps({"flop": x})
    read = canonical_value(line)
    assert isinstance(read, dict) and b"e" not in line
    assert float(read["flop"]) == x  # read as the integer it spells, whose double is x
    assert dumps(read) == line
    assert dumps({"flop": int(read["flop"])}) == line  # the integer it spells: the same bytes
    with pytest.raises(LedgerError, match="canonical"):
        canonical_value(b'{"flop":1152921504606846976}')  # 2**60 exactly: ES writes ...7000
    with pytest.raises(LedgerError, match="decimal string"):
        dumps({"flop": 2**53 + 1})
