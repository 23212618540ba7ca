"""Merkle trees as RFC 6962 / RFC 9162 hash them (docs/budget-rules.md#checkpoints): the ledger's checkpoints.

``leaf = SHA-256(0x00 || data)``, ``node = SHA-256(0x01 || left || right)``; the tree over ``n`` leaves splits at
the largest power of two below ``n`` (RFC 9162 section 2.1.1).  Inclusion proofs (section 2.1.3) show a leaf is
in a tree of a given root; consistency proofs (section 2.1.4) show a tree of size ``m`` is a prefix of one of
size ``n``: whoever holds an old root can check the log only grew.  Pure Python.
"""
from __future__ import annotations

from collections.abc import Sequence

# Hashing, roots and verifying proofs: the client package's (one implementation, which verifiers outside the service
# run too); this module builds the proofs.  tests/client/test_tlog_merkle.py checks them against each other and against
# the RFC's recursive definition.
from ldpmarket_client.tlog.merkle import (  # noqa: F401 (re-exported)
    EMPTY_ROOT,
    LEAF_PREFIX,
    NODE_PREFIX,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


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
