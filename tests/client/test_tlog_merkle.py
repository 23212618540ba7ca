"""``ldpmarket_client.tlog.merkle`` (RFC 6962 / RFC 9162 proofs) against the service's ``accounts.ledger.merkle``,
whose proof generators follow RFC 6962's recursive PATH and PROOF, for every tree of 1 to 64 leaves: every inclusion
and consistency proof verifies, and every changed proof, index, size or root does not.  Roots are also checked
against the recursive definition written here and against transparency-dev/merkle's known answers.
"""
from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts.ledger import merkle as service
from ldpmarket_client.tlog import merkle

MAX = 64
LEAVES = [merkle.leaf_hash(b"leaf %d" % i) for i in range(MAX)]
ROOTS = [merkle.root(LEAVES[:n]) for n in range(MAX + 1)]


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1: MTH, recursively, splitting at the largest power of two below n."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def flipped(h: bytes, bit: int = 0) -> bytes:
    return bytes([h[0] ^ (1 << bit)]) + h[1:]


# transparency-dev/merkle at commit 417fb0c314750d94e53942e9f92e79b6d35915db: testonly/constants.go (LeafInputs,
# RootHashes) and testdata/{inclusion,consistency}/*/happy-path.json.
TD_LEAF_INPUTS = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
TD_ROOTS = ["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"]
TD_INCLUSION = [  # (leaf index, tree size, proof)
    (0, 1, []),
    (0, 8, ["lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=", "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
            "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ="]),
    (5, 8, ["vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=", "yoVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
            "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc="]),
    (2, 3, ["+sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU="]),
    (1, 5, ["bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=", "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
            "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms="]),
]
TD_CONSISTENCY = [  # (size1, size2, proof)
    (1, 1, []),
    (1, 8, ["lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=", "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
            "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ="]),
    (6, 8, ["DrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=", "yoVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
            "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc="]),
    (2, 5, ["Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=", "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms="]),
    (6, 7, ["DrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=", "sIaT7C5yFZcTBkHoIR5+7cy0wmQTlj7ubB4u0W/7Gl8=",
            "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc="]),
]
TD_LEAVES = [merkle.leaf_hash(bytes.fromhex(x)) for x in TD_LEAF_INPUTS]


def test_known_roots():
    for n, want in enumerate(TD_ROOTS):
        assert merkle.root(TD_LEAVES[:n]).hex() == want == mth(TD_LEAVES[:n]).hex()
    assert merkle.EMPTY_ROOT.hex() == TD_ROOTS[0]


@pytest.mark.parametrize("index, size, proof", TD_INCLUSION)
def test_known_inclusion_proofs(index, size, proof):
    hashes = [base64.b64decode(h) for h in proof]
    assert service.inclusion_proof(index, TD_LEAVES[:size]) == hashes
    assert merkle.verify_inclusion(index, size, TD_LEAVES[index], hashes, bytes.fromhex(TD_ROOTS[size]))


@pytest.mark.parametrize("m, n, proof", TD_CONSISTENCY)
def test_known_consistency_proofs(m, n, proof):
    hashes = [base64.b64decode(h) for h in proof]
    assert service.consistency_proof(m, TD_LEAVES[:n]) == hashes
    assert merkle.verify_consistency(m, n, bytes.fromhex(TD_ROOTS[m]), bytes.fromhex(TD_ROOTS[n]), hashes)


def test_roots_agree():
    for n in range(MAX + 1):
        assert ROOTS[n] == service.root(LEAVES[:n]) == mth(LEAVES[:n]) == service.Tree(LEAVES[:n]).root


def inclusion_mutations(index: int, size: int, proof: list[bytes]):
    """Changed (index, size, leaf, proof, root) tuples, none of which may verify."""
    leaf, root = LEAVES[index], ROOTS[size]
    for i in range(len(proof)):
        for bit in (0, 7):
            yield index, size, leaf, proof[:i] + [flipped(proof[i], bit)] + proof[i + 1:], root
    yield index, size, leaf, proof + [root], root  # trailing garbage
    yield index, size, leaf, [leaf] + proof, root  # preceding garbage
    if proof:
        yield index, size, leaf, proof[:-1], root  # truncated
        yield index, size, leaf, proof[1:], root  # first removed
    if len(proof) > 1:
        yield index, size, leaf, proof[::-1], root
    yield index, size, flipped(leaf), proof, root
    yield index, size, leaf, proof, flipped(root)
    yield index, size, leaf, proof, merkle.EMPTY_ROOT
    for other in {index + 1, index - 1, index ^ 2, size, -1}:
        if other != index and (other < 0 or other >= size or LEAVES[other] != leaf):
            yield other, size, leaf, proof, root
    # Another size, with that tree's root (the root is what binds a size), unless the proof is the same there.
    for other in {size + 1, size * 2, size // 2, size - 1, 0}:
        if other != size and other <= MAX and not (other > index
                                                   and service.inclusion_proof(index, LEAVES[:other]) == proof):
            yield index, other, leaf, proof, ROOTS[other]


def test_every_inclusion_proof_of_1_to_64_leaves():
    checked = refused = 0
    for size in range(1, MAX + 1):
        tree = service.Tree(LEAVES[:size])
        for index in range(size):
            proof = service.inclusion_proof(index, LEAVES[:size])
            assert tree.inclusion_proof(index) == proof
            assert merkle.verify_inclusion(index, size, LEAVES[index], proof, ROOTS[size]), (index, size)
            checked += 1
            for i, s, leaf, p, r in inclusion_mutations(index, size, proof):
                assert not merkle.verify_inclusion(i, s, leaf, p, r), (index, size, i, s)
                assert not service.verify_inclusion(i, s, leaf, p, r)
                refused += 1
    assert checked == MAX * (MAX + 1) // 2 and refused > 20 * checked


def consistency_mutations(m: int, n: int, proof: list[bytes]):
    """Changed (m, n, first root, second root, proof) tuples, none of which may verify."""
    first, second = ROOTS[m], ROOTS[n]
    for i in range(len(proof)):
        for bit in (0, 7):
            yield m, n, first, second, proof[:i] + [flipped(proof[i], bit)] + proof[i + 1:]
    yield m, n, first, second, proof + [second]
    yield m, n, first, second, [first] + proof
    if proof:
        yield m, n, first, second, proof[:-1]
        yield m, n, first, second, proof[1:]
    yield m, n, flipped(first), second, proof
    yield m, n, first, flipped(second), proof
    if m != n:
        yield m, n, second, first, proof  # swapped roots
        yield n, m, second, first, proof  # swapped sizes
    for other in {m + 1, m - 1, m * 2, m // 2}:
        if 0 < other <= n and other != m and service.consistency_proof(other, LEAVES[:n]) != proof:
            yield other, n, ROOTS[other], second, proof
    for other in {n + 1, n - 1, n * 2}:
        if m <= other <= MAX and other != n and (m == other or service.consistency_proof(m, LEAVES[:other]) != proof):
            yield m, other, first, ROOTS[other], proof


def test_every_consistency_proof_of_1_to_64_leaves():
    checked = refused = 0
    for n in range(1, MAX + 1):
        for m in range(1, n + 1):
            proof = service.consistency_proof(m, LEAVES[:n])
            assert merkle.verify_consistency(m, n, ROOTS[m], ROOTS[n], proof), (m, n)
            assert service.verify_consistency(m, n, ROOTS[m], ROOTS[n], proof)
            checked += 1
            for a, b, r1, r2, p in consistency_mutations(m, n, proof):
                assert not merkle.verify_consistency(a, b, r1, r2, p), (m, n, a, b)
                assert not service.verify_consistency(a, b, r1, r2, p)
                refused += 1
    assert checked == MAX * (MAX + 1) // 2 and refused > 10 * checked


def test_consistency_from_the_empty_tree():
    """tlog-witness: an old size of zero is consistent with every tree, with an empty proof (transparency-dev/merkle
    refuses size1 = 0 outright: "consistency proof from empty tree is meaningless"); a proof given is refused."""
    for n in range(MAX + 1):
        assert merkle.verify_consistency(0, n, merkle.EMPTY_ROOT, ROOTS[n], [])
        assert not merkle.verify_consistency(0, n, merkle.EMPTY_ROOT, ROOTS[n], [ROOTS[n]])
        assert not merkle.verify_consistency(0, n, merkle.EMPTY_ROOT, ROOTS[n], [merkle.EMPTY_ROOT])
    assert not merkle.verify_consistency(0, -1, merkle.EMPTY_ROOT, ROOTS[1], [])


def test_degenerate_arguments():
    assert not merkle.verify_inclusion(0, 0, LEAVES[0], [], ROOTS[0])
    assert not merkle.verify_inclusion(-1, 3, LEAVES[0], [], ROOTS[3])
    assert merkle.verify_inclusion(0, 1, LEAVES[0], [], LEAVES[0])
    assert not merkle.verify_inclusion(0, 1, LEAVES[0], [LEAVES[1]], LEAVES[0])
    assert not merkle.verify_consistency(5, 4, ROOTS[5], ROOTS[4], [])
    assert not merkle.verify_consistency(-1, 4, ROOTS[1], ROOTS[4], [])
    assert merkle.verify_consistency(3, 3, ROOTS[3], ROOTS[3], [])
    assert not merkle.verify_consistency(3, 3, ROOTS[3], ROOTS[3], [ROOTS[3]])
    assert not merkle.verify_consistency(3, 3, ROOTS[3], ROOTS[4], [])
    assert not merkle.verify_consistency(3, 4, ROOTS[3], ROOTS[4], [])


hashes = st.lists(st.sampled_from(LEAVES[:8] + ROOTS[:9]) | st.binary(min_size=32, max_size=32), max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.integers(-2, 70), st.integers(-2, 70), st.sampled_from(LEAVES + ROOTS), hashes, st.sampled_from(ROOTS))
def test_random_proofs_agree_with_the_service(a, b, h, proof, r):
    """On arbitrary inputs the two verifiers give the same answer (m = 0 aside, which only the client accepts)."""
    assert merkle.verify_inclusion(a, b, h, proof, r) == service.verify_inclusion(a, b, h, proof, r)
    if a != 0:
        assert merkle.verify_consistency(a, b, h, r, proof) == service.verify_consistency(a, b, h, r, proof)
