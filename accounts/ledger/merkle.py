"""Merkle trees as RFC 6962 / RFC 9162 hash them (docs/budget-rules.md#checkpoints): the ledger's checkpoints.

``leaf = SHA-256(0x00 || data)``, ``node = SHA-256(0x01 || left || right)``; the tree over ``n`` leaves splits at
the largest power of two below ``n`` (RFC 9162 section 2.1.1).  Inclusion proofs (section 2.1.3) show a leaf is
in a tree of a given root; consistency proofs (section 2.1.4) show a tree of size ``m`` is a prefix of one of
size ``n``: whoever holds an old root can check the log only grew.  Pure Python and ``hashlib``.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

LEAF_PREFIX, NODE_PREFIX = b"\x00", b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over the leaves (given as their leaf hashes); the empty tree's root is SHA-256 of nothing."""
    level = list(leaf_hashes)
    if not level:
        return EMPTY_ROOT
    # Bottom-up, pairing left to right and promoting an odd last node: the same tree as the recursive split.
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def inclusion_proof(index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree over ``leaf_hashes`` (RFC 6962 PATH(m, D[n]))."""
    n = len(leaf_hashes)
    if not 0 <= index < n:
        raise ValueError(f"leaf index {index} is outside a tree of {n} leaves")
    if n == 1:
        return []
    k = _split(n)
    if index < k:
        return inclusion_proof(index, leaf_hashes[:k]) + [root(leaf_hashes[k:])]
    return inclusion_proof(index - k, leaf_hashes[k:]) + [root(leaf_hashes[:k])]


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], expected_root: bytes) -> bool:
    """Whether ``leaf`` (a leaf hash) is leaf ``index`` of the tree of ``size`` leaves with ``expected_root``
    (RFC 9162 section 2.1.3.2)."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == expected_root


def consistency_proof(m: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """The proof that the tree of the first ``m`` leaves is a prefix of the tree over all of them (RFC 6962
    PROOF(m, D[n]))."""
    n = len(leaf_hashes)
    if not 0 < m <= n:
        raise ValueError(f"a consistency proof needs 0 < m <= n, got m = {m}, n = {n}")
    return _subproof(m, list(leaf_hashes), True)


def _subproof(m: int, leaves: list[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root(leaves)]
    k = _split(n)
    if m <= k:
        return _subproof(m, leaves[:k], complete) + [root(leaves[k:])]
    return _subproof(m - k, leaves[k:], False) + [root(leaves[:k])]


def verify_consistency(m: int, n: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]) -> bool:
    """Whether the tree of size ``m`` with ``first_root`` is a prefix of the tree of size ``n`` with
    ``second_root`` (RFC 9162 section 2.1.4.2)."""
    if not 0 < m <= n:
        return False
    if m == n:
        return not proof and first_root == second_root
    proof = list(proof)
    if m & (m - 1) == 0:  # m a power of two: the first root is the proof's implicit first node
        proof = [first_root] + proof
    if not proof:
        return False
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root


class Tree:
    """Every level of the RFC 6962 tree over ``leaf_hashes``, built once (``n - 1`` node hashes), so each
    inclusion proof after that is ``O(log n)`` look-ups (receipts prove many leaves of one tree:
    docs/receipts.md).

    Level 0 is the leaves; each level pairs its nodes left to right and promotes an odd last node unchanged,
    which is the tree the recursive split builds (``root``): a leaf's audit path is its sibling on every level
    where it has one."""

    def __init__(self, leaf_hashes: Sequence[bytes]):
        self.levels: list[list[bytes]] = [list(leaf_hashes)]
        while len(self.levels[-1]) > 1:
            level = self.levels[-1]
            nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            self.levels.append(nxt)

    @property
    def size(self) -> int:
        return len(self.levels[0])

    @property
    def root(self) -> bytes:
        return self.levels[-1][0] if self.levels[0] else EMPTY_ROOT

    def inclusion_proof(self, index: int) -> list[bytes]:
        """The audit path of leaf ``index``: the same list as ``inclusion_proof(index, leaves)``."""
        if not 0 <= index < self.size:
            raise ValueError(f"leaf index {index} is outside a tree of {self.size} leaves")
        path = []
        for level in self.levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                path.append(level[sibling])
            index >>= 1
        return path
