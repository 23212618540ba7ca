"""The client's receipts verifier on version-2 (blinded) receipts (docs/receipts.md#entry-data): each entry's data
holds its own key after the marker, and the block leaf's marker says that its entries are hashed so.  Files of
version-2 blocks, and files mixing version-1 and version-2 blocks, verify; the version of an entry must be the one
its block states; a changed key, field or marker is caught.  No database."""
from __future__ import annotations

import copy
import hashlib
import hmac
import struct

import numpy as np
import pytest

from accounts.ledger import hashchain as ledger
from accounts.ledger.leaves import block_leaf, entry_keys, entry_leaf_data, entry_leaf_hashes, position_ids
from ldpmarket_client.receipts import PROOFS, decode_block, decode_entry, verify_bundle
from tests.client import receipt_fixtures as rf
from tests.client.test_receipts_verify import HISTORIES, PLACES, at, failed, flip, standard_blocks


def verify(fx: rf.Fixture):
    return verify_bundle(fx.bundle, fx.checkpoint, fx.public_key_pem)


@pytest.fixture(scope="module")
def blinded() -> rf.Fixture:
    """The standard blocks (1, 2, 3, 5, 17 and 2049 entries) with version-2 leaves."""
    return rf.build(standard_blocks(), values=HISTORIES, foreign_leaves=3, trailing_leaves=2, version=2)


@pytest.fixture
def fx(blinded) -> rf.Fixture:
    return copy.deepcopy(blinded)


def test_the_fixtures_lay_version_2_entries_and_blocks_out_as_the_ledger_does():
    """The layout the verifiers decode is the service's (``accounts.ledger.leaves``), not only the fixtures'."""
    rec = rf.record(7, "oneshot_release", epsilon=400_000, purchase=13, chain=(1, 2), oneshot=(3, 4), ceiling=5,
                    guarantee="uldp", schedule_start_at=6)
    record = np.array([tuple(rec[f] for f in rf.FIELDS)], dtype=ledger.ENTRY)
    entry_id = 105 * 2 ** 24 + 3
    [key] = entry_keys([entry_id], rf.BLINDING_KEY)
    assert key == rf.entry_key(entry_id) == hmac.new(rf.BLINDING_KEY, struct.pack(">q", entry_id),
                                                     hashlib.sha256).digest()
    data = rf.entry_data(rec, 2, key)
    assert data == entry_leaf_data(record[0], 2, key) and len(data) == 191 and data[31:63] == key
    assert entry_leaf_hashes(record, 2, [entry_id], rf.BLINDING_KEY) == [hashlib.sha256(b"\x00" + data).digest()]
    assert entry_leaf_hashes(np.repeat(record, 2), 2, position_ids(105, 3, 5), rf.BLINDING_KEY)[0] == \
        hashlib.sha256(b"\x00" + data).digest()
    assert rf.block_data(4, 9, 105, 3, 1234, b"h" * 32, b"r" * 32, 2) == block_leaf(
        4, 9, 105, 3, 1234, (b"h" * 32).hex(), (b"r" * 32).hex(), 2)
    assert rf.block_data(4, 9, 105, 3, 1234, b"h" * 32, b"r" * 32, 2)[:31] == b"ldpmarket-ledger-block-leaf-v2\x00"


def test_decoding_names_the_version():
    rec = rf.record(7, "chain_release", epsilon=500_000, purchase=3, chain=(0, 500_000))
    one, two = decode_entry(rf.entry_data(rec)), decode_entry(rf.entry_data(rec, 2, bytes(range(32))))
    assert one.pop("version") == 1 and two.pop("version") == 2 and one == two == rec
    block = rf.block_data(3, 1, 100, 1, 0, bytes(32), bytes(32), 2)
    assert decode_block(block)["version"] == 2 and decode_block(rf.block_data(3, 1, 100, 1, 0, bytes(32),
                                                                              bytes(32)))["version"] == 1
    with pytest.raises(ValueError, match="is 159 bytes, not 191 \\(version 2\\)"):
        decode_entry(rf.ENTRY_MARKER_V2 + rf.entry_data(rec)[31:])
    with pytest.raises(ValueError, match="is 191 bytes, not 159 \\(version 1\\)"):
        decode_entry(rf.ENTRY_MARKER + rf.entry_data(rec, 2, bytes(32))[31:])
    with pytest.raises(ValueError, match="is 135 bytes, not 159 or 191"):
        decode_entry(block)


def test_a_valid_blinded_file_verifies(blinded):
    report = verify(blinded)
    assert report.ok, report.problems
    assert report.receipts == sum(len(places) for places in PLACES.values()) and report.values == 3
    assert {len(bytes.fromhex(r["entry_data"])) for r in blinded.bundle["receipts"]} == {191}


@pytest.mark.parametrize("versions", [(1, 1, 2, 2, 2, 2), (2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2)])
def test_a_file_mixing_version_1_and_version_2_blocks_verifies(versions):
    fx = rf.build(standard_blocks(), values=HISTORIES, foreign_leaves=3, version=list(versions))
    report = verify(fx)
    assert report.ok, report.problems
    assert {len(bytes.fromhex(r["entry_data"])) for r in fx.bundle["receipts"]} == {159, 191}


def test_a_changed_key_byte_fails_its_proof(fx):
    i, r = at(fx, 7, 4)   # in the block of 17
    r["entry_data"] = flip(r["entry_data"], rf.KEY_OFFSET + 5)
    report = verify(fx)
    assert failed(report) == {PROOFS}
    [problem] = report.problems
    assert problem.startswith(f"proofs: receipts[{i}] ") and "entry_data is not leaf 16 of the entry tree" in problem


def test_another_entrys_key_fails_its_proof(fx):
    (i, r), (_, other) = at(fx, 7, 2), at(fx, 7, 3)   # positions 3 and 4 of the block of 5
    key = slice(2 * rf.KEY_OFFSET, 2 * rf.KEY_OFFSET + 64)   # hex digits
    r["entry_data"] = r["entry_data"][:key.start] + other["entry_data"][key] + r["entry_data"][key.stop:]
    report = verify(fx)
    assert failed(report) == {PROOFS} and len(report.problems) == 1 and f"receipts[{i}] " in report.problems[0]


@pytest.mark.parametrize("name, shown", [("epsilon", "epsilon"), ("ceiling", "ceiling")])
def test_a_changed_field_byte_fails_its_proof_and_differs_from_the_entry_shown(fx, name, shown):
    i, r = at(fx, 8, 1)
    r["entry_data"] = flip(r["entry_data"], rf.OFFSETS_V2[name], 1)
    problems = verify(fx).problems
    assert any(f"receipts[{i}] " in p and "entry_data is not leaf" in p for p in problems)
    assert any(f"receipts[{i}] " in p and f"entry.{shown} says " in p for p in problems)


def test_a_version_2_entry_without_its_key_cannot_be_read(fx):
    i, r = at(fx, 9, 0)
    r["entry_data"] = r["entry_data"][:2 * rf.KEY_OFFSET] + r["entry_data"][2 * rf.KEY_OFFSET + 64:]
    report = verify(fx)
    assert failed(report) == {PROOFS}
    assert any(f"receipts[{i}] " in p and "entry_data is 159 bytes, not 191 (version 2)" in p for p in report.problems)


@pytest.mark.parametrize("block, entries", [(2, 1), (1, 2)])
def test_an_entry_of_another_version_than_its_block_states_is_refused(block, entries):
    """A faulty service: block leaves of one version over entry trees of the other.  Every proof verifies, and
    still each receipt is refused: the signed block leaf says how its entries are hashed."""
    fx = rf.build(standard_blocks(), values=HISTORIES, foreign_leaves=3, version=block, entry_version=entries)
    report = verify(fx)
    assert failed(report) == {PROOFS}
    assert len(report.problems) == len(fx.bundle["receipts"])
    assert all(f"entry_data is a version-{entries} entry, but block_data proves that the entries of block" in p
               and f"are version {block}" in p and "is not leaf" not in p for p in report.problems)


def test_a_version_2_block_leaf_relabelled_version_1_is_refused(fx):
    i, r = at(fx, 7, 0)
    data = bytearray.fromhex(r["block_data"])
    data[:31] = rf.BLOCK_MARKER
    r["block_data"] = data.hex()
    problems = verify(fx).problems
    mine = [p for p in problems if f"receipts[{i}] " in p]
    assert any("is not leaf" in p and "of the checkpoint's log" in p for p in mine)
    assert any("entry_data is a version-2 entry, but block_data proves" in p for p in mine)
