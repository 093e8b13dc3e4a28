"""The RFC 9162 (Certificate Transparency 2.0) Merkle tree over the ledger's entries.

A leaf's hash is SHA-256(0x00 ‖ entry bytes), an interior node's SHA-256(0x01 ‖ left ‖ right),
and the tree of ``n`` leaves splits at ``k``, the largest power of two below ``n``
(RFC 9162 section 2.1.1). Inclusion proofs (audit paths) show that an entry is in a tree of a
given size and root; consistency proofs show that a tree of size ``m`` is a prefix of a tree of
size ``n`` (sections 2.1.3 and 2.1.4).

Proofs are built from complete, aligned subtrees: ``node(level, index)`` is the hash of leaves
``index * 2**level`` to ``(index + 1) * 2**level - 1``. A store keeps those hashes, so a proof
reads about two dozen of them instead of rebuilding the tree (:func:`needed_nodes`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from computewatch.ledger.chain import LedgerError

__all__ = [
    "EMPTY_ROOT",
    "CompactRange",
    "aligned_subtrees",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "needed_nodes",
    "node_hash",
    "root_of",
    "subtree_hash",
    "verify_consistency",
    "verify_inclusion",
]

NodeGetter = Callable[[int, int], bytes]
"""``(level, index) -> hash`` of a complete aligned subtree."""

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


@dataclass(slots=True)
class CompactRange:
    """The root of a growing tree in O(log n) memory: the hashes of its complete subtrees,
    largest first (a verifier streams a million entries through one)."""

    size: int = 0
    stack: list[tuple[int, bytes]] = field(default_factory=list)
    """``(level, hash)`` of each complete subtree, left to right."""

    def append_hash(self, leaf: bytes) -> None:
        level, h = 0, leaf
        while self.stack and self.stack[-1][0] == level:
            _, left = self.stack.pop()
            h = node_hash(left, h)
            level += 1
        self.stack.append((level, h))
        self.size += 1

    def append(self, data: bytes) -> None:
        self.append_hash(leaf_hash(data))

    def extend(self, leaves: bytes) -> None:
        """Append the leaf hashes packed in ``leaves`` (32 bytes each, in order)."""
        stack, sha = self.stack, hashlib.sha256
        for at in range(0, len(leaves), 32):
            level, h = 0, leaves[at : at + 32]
            while stack and stack[-1][0] == level:
                h = sha(b"\x01" + stack.pop()[1] + h).digest()
                level += 1
            stack.append((level, h))
        self.size += len(leaves) // 32

    def append_subtree(self, level: int, h: bytes) -> None:
        """Append the complete subtree of ``2**level`` leaves whose hash is ``h`` (where the
        tree's size is a multiple of ``2**level``, as :func:`aligned_subtrees` gives them)."""
        if self.size & ((1 << level) - 1):
            raise LedgerError(f"a subtree of {1 << level} leaves does not start at {self.size}")
        self.size += 1 << level
        stack = self.stack
        while stack and stack[-1][0] == level:
            h = node_hash(stack.pop()[1], h)
            level += 1
        stack.append((level, h))

    def root(self) -> bytes:
        if not self.stack:
            return EMPTY_ROOT
        h = self.stack[-1][1]
        for _, left in reversed(self.stack[:-1]):
            h = node_hash(left, h)
        return h


def aligned_subtrees(start: int, leaves: bytes) -> list[tuple[int, bytes]]:
    """``(level, hash)`` of the complete aligned subtrees that cover the leaves from index
    ``start`` whose hashes are packed in ``leaves`` (32 bytes each), left to right: appended in
    order (:meth:`CompactRange.append_subtree`) to the compact range of the first ``start``
    leaves, they make that of all of them. Work a verifier's workers do for it."""
    out: list[tuple[int, bytes]] = []
    n, i, sha = len(leaves) // 32, 0, hashlib.sha256
    while i < n:
        at = start + i
        level = (at & -at).bit_length() - 1 if at else (n - i).bit_length() - 1
        while 1 << level > n - i:
            level -= 1
        layer = [leaves[k : k + 32] for k in range(32 * i, 32 * (i + (1 << level)), 32)]
        while len(layer) > 1:
            pairs = zip(layer[::2], layer[1::2], strict=True)  # a power of two: even
            layer = [sha(b"\x01" + a + b).digest() for a, b in pairs]
        out.append((level, layer[0]))
        i += 1 << level
    return out


def root_of(leaves: Iterable[bytes]) -> bytes:
    """The root of the tree whose leaves' hashes are ``leaves``."""
    r = CompactRange()
    for h in leaves:
        r.append_hash(h)
    return r.root()


def subtree_hash(node: NodeGetter, start: int, end: int) -> bytes:
    """MTH of leaves ``start`` to ``end - 1`` (a subtree of the RFC's split: ``start`` is a
    multiple of the largest power of two not above its size) from complete subtrees."""
    n = end - start
    if n <= 0:
        raise LedgerError("an empty range has no subtree hash")
    if n & (n - 1) == 0:
        level = n.bit_length() - 1
        return node(level, start >> level)
    k = _split(n)
    return node_hash(subtree_hash(node, start, start + k), subtree_hash(node, start + k, end))


def inclusion_proof(node: NodeGetter, index: int, size: int) -> list[bytes]:
    """The audit path of leaf ``index`` (0-based) in the tree of ``size`` leaves
    (RFC 9162 2.1.3.1), leaf side first."""
    if not 0 <= index < size:
        raise LedgerError(f"entry {index + 1} is not in a tree of {size} entries")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(subtree_hash(node, start + k, end))
            end = start + k
        else:
            path.append(subtree_hash(node, start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof(node: NodeGetter, old: int, new: int) -> list[bytes]:
    """The proof that the tree of ``old`` leaves is a prefix of the tree of ``new``
    (RFC 9162 2.1.4.1)."""
    if not 0 <= old <= new:
        raise LedgerError(f"no consistency proof from size {old} to size {new}")
    if old in (0, new):
        return []
    proof: list[bytes] = []
    start, end, m, first = 0, new, old, True
    while True:
        n = end - start
        if m == n:
            if not first:
                proof.append(subtree_hash(node, start, end))
            break
        k = _split(n)
        if m <= k:
            proof.append(subtree_hash(node, start + k, end))
            end = start + k
        else:
            proof.append(subtree_hash(node, start, start + k))
            start, m, first = start + k, m - k, False
    proof.reverse()
    return proof


def needed_nodes(build: Callable[[NodeGetter], object]) -> list[tuple[int, int]]:
    """The complete subtrees ``build`` reads (run once with placeholders): a store fetches them
    in one query, then builds the proof for real."""
    wanted: list[tuple[int, int]] = []

    def record(level: int, index: int) -> bytes:
        wanted.append((level, index))
        return bytes(32)

    build(record)
    return sorted(set(wanted))


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes],
                     root: bytes) -> bool:  # fmt: skip
    """RFC 9162 2.1.3.2: whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of
    ``size`` leaves whose root is ``root``."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> bool:  # fmt: skip
    """RFC 9162 2.1.4.2: whether ``proof`` shows the tree (``old``, ``old_root``) is a prefix of
    the tree (``new``, ``new_root``)."""
    if old > new or old < 0:
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0:
        return not proof
    if not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0
