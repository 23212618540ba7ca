"""RFC 6962 / RFC 9162 Merkle trees (docs/receipts.md#where-the-entries-sit-two-trees).

``leaf = SHA-256(0x00 || data)``, ``node = SHA-256(0x01 || left || right)``, the tree over ``n`` leaves split at the
largest power of two below ``n``.  Verifying inclusion (RFC 9162 section 2.1.3.2) and consistency (section
2.1.4.2) proofs, and the root over a list of leaf hashes.
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


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over the leaves (given as their leaf hashes); the empty tree's root is SHA-256 of nothing."""
    level = list(leaf_hashes)
    if not level:
        return EMPTY_ROOT
    while len(level) > 1:  # bottom-up, an odd last node promoted: the same tree as the recursive split
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


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


def verify_consistency(m: int, n: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]) -> bool:
    """Whether the tree of size ``m`` with ``first_root`` is a prefix of the tree of size ``n`` with
    ``second_root`` (RFC 9162 section 2.1.4.2; ``m = 0`` is a prefix of every tree, with an empty proof)."""
    if m == 0:
        return not proof and 0 <= n
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
