"""RFC 6962 / 9162 Merkle trees (accounts.ledger.merkle): the reference roots, and inclusion and consistency proofs that
verify for every leaf and every pair of sizes up to 33, and fail when anything is changed."""
from __future__ import annotations

import hashlib

import pytest

from accounts.ledger import merkle

#: The eight leaves of the RFC 6962 reference tests (certificate-transparency) and the roots of their prefixes.
LEAVES = [b"", b"\x00", b"\x10", b"\x20\x21", b"\x30\x31", b"\x40\x41\x42\x43", b"\x50\x51\x52\x53\x54\x55\x56\x57",
          bytes(range(0x60, 0x70))]
ROOTS = ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
         "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
         "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
         "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
         "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
         "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
         "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
         "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"]


def _mth(leaf_hashes):
    """RFC 6962's recursive definition, for comparison with the bottom-up ``merkle.root``."""
    n = len(leaf_hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hashes[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return merkle.node_hash(_mth(leaf_hashes[:k]), _mth(leaf_hashes[k:]))


HASHES = [merkle.leaf_hash(bytes([i]) * (i % 5)) for i in range(33)]


def test_the_reference_roots():
    hashes = [merkle.leaf_hash(x) for x in LEAVES]
    assert [merkle.root(hashes[:n]).hex() for n in range(1, 9)] == ROOTS
    assert merkle.root([]) == hashlib.sha256(b"").digest()


def test_the_root_is_the_recursive_definition():
    assert all(merkle.root(HASHES[:n]) == _mth(HASHES[:n]) for n in range(34))


def test_every_inclusion_proof_verifies_and_a_changed_one_does_not():
    for n in range(1, 34):
        r = merkle.root(HASHES[:n])
        for i in range(n):
            proof = merkle.inclusion_proof(i, HASHES[:n])
            assert merkle.verify_inclusion(i, n, HASHES[i], proof, r)
            assert not merkle.verify_inclusion(i, n, merkle.leaf_hash(b"other"), proof, r)
            if n > 1:
                assert not merkle.verify_inclusion((i + 1) % n, n, HASHES[i], proof, r)
                bad = list(proof)
                bad[0] = merkle.leaf_hash(b"x")
                assert not merkle.verify_inclusion(i, n, HASHES[i], bad, r)
                assert not merkle.verify_inclusion(i, n, HASHES[i], proof[:-1], r)


def test_every_consistency_proof_verifies_and_a_fork_does_not():
    forked = HASHES[:5] + [merkle.leaf_hash(b"fork")] + HASHES[6:]
    for n in range(1, 34):
        second = merkle.root(HASHES[:n])
        for m in range(1, n + 1):
            proof = merkle.consistency_proof(m, HASHES[:n])
            first = merkle.root(HASHES[:m])
            assert merkle.verify_consistency(m, n, first, second, proof), (m, n)
            if m > 5:  # a first tree that differs in leaf 5 is not a prefix of the second
                assert not merkle.verify_consistency(m, n, merkle.root(forked[:m]), second, proof)
            if m < n:
                assert not merkle.verify_consistency(m, n, first, merkle.root(forked[:n]) if n > 5 else
                                                     merkle.leaf_hash(b"?"), proof)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        merkle.inclusion_proof(3, HASHES[:3])
    with pytest.raises(ValueError):
        merkle.consistency_proof(0, HASHES[:3])
    assert not merkle.verify_inclusion(3, 3, HASHES[0], [], merkle.root(HASHES[:3]))
    assert not merkle.verify_consistency(4, 3, b"", b"", [])
