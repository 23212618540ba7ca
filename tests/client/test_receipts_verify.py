"""The client's receipts verifier (docs/receipts.md#checking-receipts, docs/client.md#verifying-receipts) against
receipts files built by ``tests.client.receipt_fixtures``: a valid file verifies, each kind of tampering is
caught with a message that names the receipt and the value, and its Merkle code agrees with ``accounts.ledger.merkle``.
No database: the verifier and the builder need none."""
from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts.ledger import merkle
from ldpmarket_client import cli, receipts
from ldpmarket_client.receipts import CHECKPOINT, FILE_CHECKPOINT, LOSSES, PROOFS, SAME_LOG, verify_bundle
from tests.client import receipt_fixtures as rf

SIZES = (1, 2, 3, 5, 17, 2049)
#: Where the owner's values sit: block number -> {position: (value, step in its history)}.
PLACES = {
    0: {0: (7, 0)},
    1: {1: (8, 0)},
    2: {0: (7, 1), 1: (8, 1)},
    3: {1: (9, 0), 3: (7, 2), 4: (7, 3)},
    4: {0: (8, 2), 5: (9, 1), 16: (7, 4)},
    5: {0: (9, 2), 1024: (8, 3), 2047: (7, 5), 2048: (7, 6)},
}
HISTORIES = {
    7: [("ceiling", 1_000_000), ("chain", 200_000), ("oneshot", 100_000), ("pause",), ("chain", 500_000),
        ("oneshot", 150_000, "uldp"), ("ceiling", 900_000)],
    8: [("ceiling", 2_000_000), ("chain", 300_000), ("oneshot", 1_000_000), ("chain", 900_000)],
    9: [("ceiling", 500_000), ("oneshot", 250_000, "per_report_non_collusion"), ("chain", 100_000)],
}


def standard_blocks() -> list[list[dict]]:
    histories = {v: rf.history(v, steps, purchase=10 * v) for v, steps in HISTORIES.items()}
    blocks = []
    for n, size in enumerate(SIZES):
        block = [rf.filler(10_000 + 3000 * n + p) for p in range(size)]
        for position, (value, step) in PLACES[n].items():
            block[position] = histories[value][step]
        blocks.append(block)
    return blocks


@pytest.fixture(scope="module")
def standard() -> rf.Fixture:
    """Values 7, 8 and 9 over blocks of 1, 2, 3, 5, 17 and 2049 entries, after 3 foreign leaves, 2 more after."""
    return rf.build(standard_blocks(), values=HISTORIES, foreign_leaves=3, trailing_leaves=2)


@pytest.fixture
def fx(standard) -> rf.Fixture:
    """A copy of the standard fixture to tamper with."""
    return copy.deepcopy(standard)


def at(fx: rf.Fixture, value: int, step: int) -> tuple[int, dict]:
    """The index and receipt of ``value``'s ``step``-th entry."""
    found = [(i, r) for i, r in enumerate(fx.bundle["receipts"]) if r["entry"]["value"] == value]
    return found[step]


def verify(fx: rf.Fixture, checkpoint=None, consistency=None, key=None):
    return verify_bundle(fx.bundle, fx.checkpoint if checkpoint is None else checkpoint,
                         fx.public_key_pem if key is None else key, consistency)


def failed(report) -> set[str]:
    return {c.name for c in report.checks if not c.ok}


def flip(hex_text: str, byte: int, bit: int = 0) -> str:
    raw = bytearray(bytes.fromhex(hex_text))
    raw[byte] ^= 1 << bit
    return raw.hex()


def only(report, name: str) -> list[str]:
    """The problems of check ``name``, after asserting that no other check failed."""
    assert failed(report) == {name}, report.problems
    return report.check(name).problems


# ------------------------------------------------------------------------------------------------- valid

def test_a_valid_file_verifies(standard):
    report = verify(standard)
    assert report.ok, report.problems
    assert (report.receipts, report.values, report.tree_size) == (14, 3, 3 + 6 + 2)
    assert report.summary() == "verified: 14 receipts of 3 values against the checkpoint of tree size 11"
    assert [c.name for c in report.checks] == ["file", CHECKPOINT, FILE_CHECKPOINT, SAME_LOG, PROOFS, LOSSES]
    got = standard.bundle["receipts"]
    # the trees the test means to exercise: every block size, deep and lopsided paths, blocks not at leaf 0
    assert {r["block_size"] for r in got} == set(SIZES)
    assert max(len(r["entry_proof"]) for r in got) == 12  # 2049 leaves: 11 levels under the last leaf's split
    assert min(r["block_index"] for r in got) == 3
    assert {(r["block_size"], r["entry_index"]) for r in got} >= {(2049, 2048), (17, 16), (5, 4), (1, 0)}


def test_entries_of_other_values_and_the_order_of_the_file_do_not_matter(fx):
    fx.bundle["receipts"].reverse()  # the verifier orders each value's receipts by their proven positions
    assert verify(fx).ok


def test_a_later_checkpoint_with_a_valid_consistency_proof_passes_both_ways(fx):
    newer, proof = fx.grow(5)
    report = verify(fx, checkpoint=newer, consistency=proof)  # the owner's checkpoint is the newer one
    assert report.ok, report.problems
    assert report.summary().endswith("tree size 11 (consistent with yours of tree size 16)")
    older = fx.checkpoint_of(9)  # the owner kept an older one, the file is at the latest
    report = verify(fx, checkpoint=older, consistency=fx.consistency(9, 11))
    assert report.ok, report.problems
    for power_of_two in (1, 2, 4, 8):  # the proof's implicit first node
        report = verify(fx, checkpoint=fx.checkpoint_of(power_of_two), consistency=fx.consistency(power_of_two, 11))
        assert report.ok, report.problems


# ---------------------------------------------------------------------------------------- 3: tampered entries

@pytest.mark.parametrize("name, shown", [("value", "value"), ("epsilon", "epsilon"),
                                         ("chain_after", "chain_loss_after"), ("oneshot_before", "oneshot_loss_before"),
                                         ("ceiling", "ceiling"), ("kind", "kind"), ("purchase", "purchase")])
def test_a_changed_byte_of_entry_data_fails_its_proof_and_differs_from_the_entry_shown(fx, name, shown):
    i, r = at(fx, 7, 4)  # the chain release at 0.5 in the block of 17, position 16
    r["entry_data"] = flip(r["entry_data"], rf.OFFSETS[name], 1)
    problems = verify(fx).check(PROOFS).problems
    label = f"receipts[{i}] (entry {r['entry']['id']}, value "
    assert any(p.startswith(label) and "entry_data is not leaf 16 of the entry tree of 17 leaves" in p
               for p in problems), problems
    assert any(p.startswith(label) and f"entry.{shown} says " in p and "but entry_data proves" in p
               for p in problems), problems


def test_a_changed_field_of_the_entry_shown_is_refused(fx):
    i, r = at(fx, 8, 2)
    assert r["entry"]["epsilon"] == "1.000000"
    r["entry"]["epsilon"] = "0.100000"
    problems = only(verify(fx), PROOFS)
    assert problems == [(f"receipts[{i}] (entry {r['entry']['id']}, value 8): entry.epsilon says '0.100000', but "
                         f"entry_data proves 1.000000")]


@pytest.mark.parametrize("key, value, proves", [
    ("kind", "chain_release", "'oneshot_release'"), ("guarantee", "ldp", "'uldp'"), ("purchase", 3, "73"),
    ("value", 8, "7"), ("chain_loss_before", "0.2", "0.500000"), ("created_at", "2026-03-01T11:55:00Z", "2026-"),
])
def test_every_field_of_the_entry_shown_is_compared(fx, key, value, proves):
    i, r = at(fx, 7, 5)  # the one-shot uldp release at 0.15, purchase 73
    r["entry"][key] = value
    problems = only(verify(fx), PROOFS)
    assert len(problems) == 1 and problems[0].startswith(f"receipts[{i}] ") and f"entry.{key} says" in problems[0]
    assert proves in problems[0].split("proves", 1)[1]


def test_equal_numbers_written_otherwise_are_the_same(fx):
    _, r = at(fx, 7, 5)
    r["entry"].update(epsilon="0.15", chain_loss_before=0.5, guarantee="uldp")
    _, r = at(fx, 7, 0)
    r["entry"].update(guarantee=None, created_at=r["entry"]["created_at"].replace("Z", "+00:00"))
    assert verify(fx).ok


def test_entry_data_that_is_no_entry_data_is_refused(fx):
    i, r = at(fx, 9, 0)
    r["entry_data"] = r["entry_data"][:-2]
    j, s = at(fx, 9, 1)
    s["entry_data"] = "00" + s["entry_data"][2:]
    problems = verify(fx).check(PROOFS).problems
    assert any(p.startswith(f"receipts[{i}] ") and "entry_data is 158 bytes, not 159" in p for p in problems)
    assert any(p.startswith(f"receipts[{j}] ") and "entry_data does not start with the marker" in p for p in problems)


# -------------------------------------------------------------------------------------------- 3: tampered proofs

def test_swapped_positions_of_two_receipts_fail_both(fx):
    i, a = at(fx, 8, 2)  # both in the block of 17: positions 0 and 5
    j, b = at(fx, 9, 1)
    a["entry_index"], b["entry_index"] = b["entry_index"], a["entry_index"]
    a["entry_proof"], b["entry_proof"] = b["entry_proof"], a["entry_proof"]
    problems = verify(fx).check(PROOFS).problems
    assert any(p.startswith(f"receipts[{i}] ") and "entry_data is not leaf 5 of the entry tree of 17" in p
               for p in problems), problems
    assert any(p.startswith(f"receipts[{j}] ") and "entry_data is not leaf 0 of the entry tree of 17" in p
               for p in problems), problems


def test_two_entries_of_a_value_reordered_across_blocks_fail(fx):
    i, a = at(fx, 7, 1)  # block of 3, and block of 5 (position 3)
    j, b = at(fx, 7, 2)
    for name in ("block_data", "block_index", "block_proof", "block_size"):
        a[name], b[name] = b[name], a[name]
    problems = verify(fx).check(PROOFS).problems
    assert any(p.startswith(f"receipts[{i}] ") and "entry_data is not leaf 0 of the entry tree of 5" in p
               for p in problems), problems
    assert any(p.startswith(f"receipts[{j}] ") and "entry_index 3 is outside a block of 3 entries" in p
               for p in problems), problems


@pytest.mark.parametrize("proof, where", [("entry_proof", 0), ("entry_proof", -1), ("block_proof", 0),
                                          ("block_proof", -1)])
def test_a_changed_proof_hash_fails(fx, proof, where):
    i, r = at(fx, 8, 3)  # the block of 2049, position 1024
    r[proof][where] = flip(r[proof][where], 31, 7)
    problems = only(verify(fx), PROOFS)
    assert len(problems) == 1 and problems[0].startswith(f"receipts[{i}] (entry {r['entry']['id']}, value 8): ")
    if proof == "entry_proof":
        assert "entry_data is not leaf 1024 of the entry tree of 2049 leaves" in problems[0]
    else:
        assert f"block_data (block 105) is not leaf {r['block_index']} of the checkpoint's log of 11" in problems[0]


def test_a_missing_or_extra_proof_hash_fails(fx):
    _, r = at(fx, 8, 3)
    r["entry_proof"].pop()
    _, s = at(fx, 9, 0)
    s["block_proof"].append(s["block_proof"][0])
    assert len(only(verify(fx), PROOFS)) == 2


@pytest.mark.parametrize("delta", [1, -1, 20])
def test_a_wrong_block_index_fails(fx, delta):
    i, r = at(fx, 9, 2)
    r["block_index"] += delta  # (a smaller one also moves the entry before another of value 9: a gap too)
    problems = verify(fx).check(PROOFS).problems
    assert len(problems) == 1 and problems[0].startswith(f"receipts[{i}] ")
    expected = "is outside the checkpoint's log of 11 leaves" if r["block_index"] >= 11 else "is not leaf"
    assert expected in problems[0]


@pytest.mark.parametrize("part, entry_fails", [("entries_root", True), ("block_hash", False), ("shard", False),
                                               ("created_at", False)])
def test_changed_block_data_fails(fx, part, entry_fails):
    i, r = at(fx, 7, 2)
    r["block_data"] = flip(r["block_data"], rf.BLOCK_OFFSETS[part] + 2)
    problems = verify(fx).check(PROOFS).problems
    assert all(p.startswith(f"receipts[{i}] ") for p in problems)
    assert any("block_data (block 103) is not leaf 6 of the checkpoint's log" in p for p in problems), problems
    assert any("entry_data is not leaf 3 of the entry tree of 5 leaves" in p for p in problems) == entry_fails
    assert any("entry.created_at says" in p for p in problems) == (part == "created_at")


def test_a_block_size_other_than_the_blocks_entry_count_fails(fx):
    _, r = at(fx, 9, 0)
    r["block_size"] = 4
    problems = only(verify(fx), PROOFS)
    assert any("block_size 4 is not the entry count 5 that block_data proves for block 103" in p
               for p in problems), problems


# ---------------------------------------------------------------------------------------------- 4: losses

def test_a_receipt_left_out_of_the_middle_shows_as_a_gap(fx):
    i, _ = at(fx, 7, 3)  # a pause: the release after it goes
    j, _ = at(fx, 7, 4)
    del fx.bundle["receipts"][j]
    problems = only(verify(fx), LOSSES)
    assert len(problems) == 1
    assert problems[0].startswith(f"receipts[{j}] (entry {fx.bundle['receipts'][j]['entry']['id']}, value 7): a gap "
                                  f"in value 7's history")
    assert "starts from chain 0.500000, one-shot 0.100000" in problems[0]
    assert f"receipts[{i}], ends at chain 0.200000, one-shot 0.100000" in problems[0]


@pytest.mark.parametrize("value, loss", [(8, "chain 0.300000, one-shot 0.000000"),
                                         (9, "chain 0.000000, one-shot 0.250000")])
def test_a_value_whose_first_receipts_are_left_out_starts_from_a_loss(fx, value, loss):
    for step in (1, 0):
        del fx.bundle["receipts"][at(fx, value, step)[0]]
    problems = only(verify(fx), LOSSES)
    assert len(problems) == 1 and f"value {value}'s first receipt" in problems[0]
    assert f"starts from a loss ({loss})" in problems[0]


def test_every_value_with_a_gap_is_reported(fx):
    for value, step in ((7, 1), (8, 2), (9, 1)):  # chain, one-shot, one-shot losses missing
        del fx.bundle["receipts"][at(fx, value, step)[0]]
    problems = only(verify(fx), LOSSES)
    assert [p.split("gap in value ")[1][:1] for p in problems] == ["7", "8", "9"]


def test_the_same_entry_twice_is_reported(fx):
    _, r = at(fx, 9, 1)
    fx.bundle["receipts"].append(copy.deepcopy(r))
    problems = only(verify(fx), LOSSES)
    assert len(problems) == 1 and "the same ledger entry (block_index 7, entry_index 5)" in problems[0]


def losses_fixture(records: list[dict]) -> rf.Fixture:
    return rf.build([records[:1], [rf.filler(1), *records[1:]]], values=[5], foreign_leaves=1)


def test_a_loss_above_its_ceiling_is_caught_by_the_loss_rule():
    """Valid proofs of an entry whose loss after is above its ceiling: only the loss rule can refuse it."""
    records = rf.history(5, [("ceiling", 1_000_000), ("chain", 700_000)])
    records.append(rf.record(5, "oneshot_release", epsilon=400_000, purchase=3, chain=(700_000, 700_000),
                             oneshot=(0, 400_000), ceiling=1_000_000, guarantee="ldp"))
    fx = losses_fixture(records)
    problems = only(verify(fx), LOSSES)
    assert problems == [(f"receipts[2] (entry {fx.bundle['receipts'][2]['entry']['id']}, value 5): the loss "
                         f"after, 1.100000 (chain 0.700000 + one-shot 0.400000), is above the ceiling 1.000000")]
    records[-1]["ceiling"] = 1_100_000  # at the ceiling is allowed
    assert verify(losses_fixture(records)).ok


@pytest.mark.parametrize("kind, chain, oneshot, says", [
    ("chain_release", (500_000, 400_000), (0, 0), "the chain loss goes down, from 0.500000 to 0.400000"),
    ("oneshot_release", (500_000, 500_000), (0, -1), "the one-shot loss goes down, from 0.000000 to null"),
])
def test_a_loss_that_goes_down_is_refused(kind, chain, oneshot, says):
    records = rf.history(5, [("ceiling", 1_000_000), ("chain", 500_000)])
    records.append(rf.record(5, kind, epsilon=100_000, purchase=4, chain=chain, oneshot=oneshot))
    problems = only(verify(losses_fixture(records)), LOSSES)
    assert len(problems) == 1 and problems[0].endswith(says)


# ------------------------------------------------------------------------------------- 1, 2: the checkpoints

@pytest.mark.parametrize("whose", ["mine", "file's"])
def test_a_flipped_bit_of_a_signature_fails(fx, whose):
    checkpoint = fx.checkpoint if whose == "mine" else fx.bundle["checkpoint"]
    checkpoint["signature"] = flip(checkpoint["signature"], 10, 3)
    report = verify(fx)
    name = CHECKPOINT if whose == "mine" else FILE_CHECKPOINT
    problems = only(report, name)
    assert len(problems) == 1 and "the signature does not verify over the statement" in problems[0]
    assert problems[0].startswith("your checkpoint: " if whose == "mine" else "the receipts file's checkpoint: ")


@pytest.mark.parametrize("change, says", [
    (lambda c: c.update(tree_size=c["tree_size"] + 1),
     "the statement says tree size 11, the checkpoint's tree_size is 12"),
    (lambda c: c.update(root_hash="ab" * 32), "the statement says root "),
    (lambda c: c.update(created_at="2026-03-01T12:00:01Z"),
     "created_at '2026-03-01T12:00:01Z' is not the statement's time"),
])
def test_a_statement_that_does_not_state_the_checkpoints_fields_fails(fx, change, says):
    change(fx.checkpoint)
    report = verify(fx)
    assert CHECKPOINT in failed(report)
    assert any(says in p for p in report.check(CHECKPOINT).problems), report.problems


@pytest.mark.parametrize("statement, says", [
    ("ldpmarket ledger checkpoint v2\n11\n{root}\n2026-03-01T12:00:00.000000+00:00\n", "first line"),
    ("ldpmarket ledger checkpoint v1\n11\n{root}\n2026-03-01T12:00:00.000000+00:00", "four lines"),
    ("ldpmarket ledger checkpoint v1\n11\n{root}\nyesterday\n", "is not an ISO 8601 time"),
])
def test_a_signed_statement_of_another_form_fails(fx, statement, says):
    checkpoint = fx.sign(11, fx.checkpoint["root_hash"], statement=statement.format(root=fx.checkpoint["root_hash"]))
    report = verify(fx, checkpoint=checkpoint)
    assert failed(report) == {CHECKPOINT}
    assert any(says in p for p in report.check(CHECKPOINT).problems), report.problems


def test_another_public_key_fails_both_checkpoints(fx):
    report = verify(fx, key=rf.public_pem(rf.new_key()))
    assert failed(report) == {CHECKPOINT, FILE_CHECKPOINT}
    for name in (CHECKPOINT, FILE_CHECKPOINT):
        problems = report.check(name).problems
        assert any("is not the SHA-256 of the public key given" in p for p in problems)
        assert any("the signature does not verify" in p for p in problems)


def test_a_key_that_is_no_ed25519_pem_fails():
    report = verify(rf.build([[rf.filler(1)]]), key=b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    assert failed(report) == {CHECKPOINT} and "the public key given is not a PEM public key" in report.problems[0]


def test_two_signed_roots_of_one_size_are_a_forked_log(fx):
    fork = fx.sign(11, "cd" * 32)
    problems = only(verify(fx, checkpoint=fork), SAME_LOG)
    assert len(problems) == 1 and problems[0].startswith("forked log: your checkpoint and the receipts file's both "
                                                         "have tree size 11 but different roots")


def test_a_consistency_proof_that_does_not_verify_is_a_forked_log(fx):
    forked, proof = fx.grow(4, rewrite={5: rf.head_leaf(77, 1)})  # the block at leaf 5 rewritten, then grown
    problems = only(verify(fx, checkpoint=forked, consistency=proof), SAME_LOG)
    assert len(problems) == 1 and problems[0].startswith("forked log: the consistency proof does not show that the "
                                                         "log of tree size 11")
    genuine, proof = fx.grow(4)
    proof["proof"][0] = flip(proof["proof"][0], 0)
    assert only(verify(fx, checkpoint=genuine, consistency=proof), SAME_LOG)[0].startswith("forked log")


def test_without_a_consistency_proof_the_verifier_says_which_command_gets_one(fx):
    newer, _ = fx.grow(3)
    problems = only(verify(fx, checkpoint=newer), SAME_LOG)
    assert problems == [(
        "your checkpoint has tree size 14, the receipts file's 11: a consistency proof must link them; get it with "
        "`ldpmarket-client ledger consistency --first 11 --second 14 --out proof.json` "
        "(GET /api/v1/ledger/consistency/?first=11&second=14) and pass --consistency proof.json, or get receipts at "
        "your checkpoint with `ldpmarket-client owner receipts --tree-size 14`")]


def test_a_consistency_proof_of_other_sizes_or_roots_fails(fx):
    newer, proof = fx.grow(3)
    wrong_sizes = dict(proof, first=10)
    assert "is between tree sizes 10 and 14, not 11 and 14" in only(
        verify(fx, checkpoint=newer, consistency=wrong_sizes), SAME_LOG)[0]
    wrong_root = dict(proof, second_root="00" * 32)
    assert only(verify(fx, checkpoint=newer, consistency=wrong_root), SAME_LOG) == [(
        f"the consistency proof's second_root '{'00' * 32}' is not the signed root of tree size 14 "
        f"({newer['root_hash']})")]


# ------------------------------------------------------------------------------------------ shape and notes

def test_a_file_of_another_shape_fails_without_raising(fx):
    report = verify_bundle({"format": "other", "checkpoint": None, "receipts": [1, {"entry": []}]}, fx.checkpoint,
                           fx.public_key_pem)
    assert not report.ok and {"file", FILE_CHECKPOINT, SAME_LOG, PROOFS} <= failed(report)
    assert "receipts[0] is not a JSON object" in report.check(PROOFS).problems
    assert not verify_bundle([], [], b"", None).ok


def test_pending_entries_and_further_pages_are_notes_not_failures(fx):
    fx.bundle["pending"] = [{"id": 1, "value": 7, "kind": "ceiling"}]
    fx.bundle["next"] = "http://service/api/v1/owner/receipts/?cursor=x"
    report = verify(fx)
    assert report.ok and len(report.notes) == 2 and "1 entry pending" in report.notes[0]


# ---------------------------------------------------------------------------------- the Merkle code agrees

@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_clients_merkle_verification_agrees_with_the_services(data):
    n = data.draw(st.integers(1, 300), label="size")
    leaves = [merkle.leaf_hash(i.to_bytes(4, "little")) for i in range(n)]
    root = merkle.root(leaves)
    index = data.draw(st.integers(0, n - 1), label="index")
    proof = merkle.inclusion_proof(index, leaves)
    assert receipts.verify_inclusion(index, n, leaves[index], proof, root)
    assert merkle.verify_inclusion(index, n, leaves[index], proof, root)
    assert receipts.leaf_hash(b"x") == merkle.leaf_hash(b"x") and receipts.node_hash(root, root) == merkle.node_hash(
        root, root)

    m = data.draw(st.integers(1, n), label="m")
    cproof = merkle.consistency_proof(m, leaves)
    first = merkle.root(leaves[:m])
    assert receipts.verify_consistency(m, n, first, root, cproof)
    assert merkle.verify_consistency(m, n, first, root, cproof)

    # one bit changed anywhere: both refuse
    bit = data.draw(st.integers(0, 255), label="bit")

    def changed(h: bytes) -> bytes:
        return (int.from_bytes(h, "big") ^ (1 << bit)).to_bytes(32, "big")

    what = data.draw(st.sampled_from(["leaf", "root", "proof"]), label="what")
    if what == "proof" and not proof:
        what = "leaf"
    leaf, bad_root, bad_proof = leaves[index], root, list(proof)
    if what == "leaf":
        leaf = changed(leaf)
    elif what == "root":
        bad_root = changed(root)
    else:
        k = data.draw(st.integers(0, len(proof) - 1), label="k")
        bad_proof[k] = changed(proof[k])
    assert not receipts.verify_inclusion(index, n, leaf, bad_proof, bad_root)
    assert not merkle.verify_inclusion(index, n, leaf, bad_proof, bad_root)
    other = data.draw(st.integers(0, n), label="other index")  # another position (or outside): both agree
    assert (receipts.verify_inclusion(other, n, leaves[index], proof, root)
            == merkle.verify_inclusion(other, n, leaves[index], proof, root) == (other == index))

    if m < n:
        which = data.draw(st.sampled_from(["first", "second"] + ["proof"] * bool(cproof)), label="which")
        a, b, p = first, root, list(cproof)
        if which == "first":
            a = changed(a)
        elif which == "second":
            b = changed(b)
        else:
            k = data.draw(st.integers(0, len(p) - 1), label="k")
            p[k] = changed(p[k])
        assert not receipts.verify_consistency(m, n, a, b, p)
        assert not merkle.verify_consistency(m, n, a, b, p)


# ------------------------------------------------------------------------------------------------ the CLI

def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def files(tmp_path, standard):
    paths = {name: tmp_path / f"{name}.json" for name in ("receipts", "checkpoint", "proof")}
    paths["receipts"].write_text(json.dumps(standard.bundle))
    paths["checkpoint"].write_text(json.dumps(standard.checkpoint))
    paths["key"] = tmp_path / "key.pem"
    paths["key"].write_bytes(standard.public_key_pem)
    return paths


def verify_cli(capsys, files, *extra):
    return run(capsys, "verify", str(files["receipts"]), "--checkpoint", str(files["checkpoint"]),
               "--public-key", str(files["key"]), *extra)


def test_verify_exits_0_when_everything_verifies(capsys, files):
    code, out, err = verify_cli(capsys, files)
    assert (code, out, err) == (0, "verified: 14 receipts of 3 values against the checkpoint of tree size 11\n", "")


def test_verify_exits_1_with_each_failure_on_its_line(capsys, files, fx):
    del fx.bundle["receipts"][at(fx, 7, 4)[0]]
    _, r = at(fx, 9, 0)
    r["entry"]["ceiling"] = "9.000000"
    files["receipts"].write_text(json.dumps(fx.bundle))
    code, out, _ = verify_cli(capsys, files)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3
    assert lines[0].startswith("FAILED proofs: receipts[") and "entry.ceiling says '9.000000'" in lines[0]
    assert lines[1].startswith("FAILED losses: receipts[") and "a gap in value 7's history" in lines[1]
    assert lines[2] == "NOT verified: 2 problems in 13 receipts of 3 values against the checkpoint of tree size 11"


def test_verify_takes_the_consistency_proof(capsys, files, fx):
    newer, proof = fx.grow(2)
    files["checkpoint"].write_text(json.dumps(newer))
    code, out, _ = verify_cli(capsys, files)
    assert code == 1 and "ledger consistency --first 11 --second 13" in out
    files["proof"].write_text(json.dumps(proof))
    code, out, _ = verify_cli(capsys, files, "--consistency", str(files["proof"]))
    assert code == 0 and out.endswith("tree size 11 (consistent with yours of tree size 13)\n")


def test_verify_takes_an_older_receipts_file_as_the_checkpoint(capsys, files):
    files["checkpoint"].write_text(files["receipts"].read_text())
    assert verify_cli(capsys, files)[0] == 0


@pytest.mark.parametrize("target, content, says", [
    ("receipts", None, "cannot read the receipts file"),
    ("receipts", "{not json", "is not JSON"),
    ("receipts", "[]", "is not a JSON object but a list"),
    ("receipts", '{"format": "other"}', "is not a receipts file"),
    ("checkpoint", '{"results": [], "next": null}', "is a page of checkpoints, not one"),
    ("checkpoint", b"\xff\xfe", "is not JSON"),
    ("key", "not a key", "the public key"),
    ("key", None, "cannot read the public key"),
])
def test_verify_exits_2_for_unreadable_input(capsys, files, target, content, says):
    if content is None:
        files[target].unlink()
    elif isinstance(content, bytes):
        files[target].write_bytes(content)
    else:
        files[target].write_text(content)
    code, out, err = verify_cli(capsys, files)
    assert code == 2 and out == "" and err.startswith("ldpmarket-client verify: ") and says in err


def test_verify_exits_2_for_an_unreadable_consistency_proof(capsys, files):
    code, _, err = verify_cli(capsys, files, "--consistency", str(files["proof"]))
    assert code == 2 and "cannot read the consistency proof" in err


class FakeService:
    """A tiny HTTP server answering fixed JSON per path (the ledger and owner endpoints), recording requests."""

    def __init__(self, answers: dict[str, list[dict] | dict]):
        self.answers, self.requests = answers, []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                service.requests.append((url.path, parse_qs(url.query), self.headers.get("Authorization")))
                answer = service.answers.get(url.path + ("?" + url.query if "cursor" in url.query else ""))
                body = json.dumps(answer).encode()
                self.send_response(200 if answer is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN", "LDPMARKET_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LDPMARKET_CONFIG", str(tmp_path / "config.json"))


def test_the_ledger_verbs_save_what_verify_needs(capsys, tmp_path, standard, no_env):
    _, proof = copy.deepcopy(standard).grow(2)
    answers = {"/api/v1/ledger/checkpoints/": {"next": None, "previous": None,
                                               "results": [standard.checkpoint, {"tree_size": 1}]},
               "/api/v1/ledger/public-key/": {"algorithm": "Ed25519", "key_id": standard.checkpoint["key_id"],
                                              "public_key_pem": standard.public_key_pem.decode()},
               "/api/v1/ledger/consistency/": proof}
    with FakeService(answers) as service:
        for verb, out in (("checkpoint", "checkpoint.json"), ("public-key", "key.pem"),
                          ("consistency", "proof.json")):
            extra = ["--first", "11", "--second", "13"] if verb == "consistency" else []
            code, _, err = run(capsys, "--url", service.url, "ledger", verb, *extra, "--out", str(tmp_path / out))
            assert code == 0 and err.startswith("wrote "), err
        code, out, _ = run(capsys, "--url", service.url, "ledger", "public-key")
    assert code == 0 and out == standard.public_key_pem.decode()
    assert json.loads((tmp_path / "checkpoint.json").read_text()) == standard.checkpoint
    assert json.loads((tmp_path / "proof.json").read_text()) == proof
    assert ("/api/v1/ledger/consistency/", {"first": ["11"], "second": ["13"]}, None) in service.requests
    assert all(auth is None for *_, auth in service.requests)  # no token needed, none sent
    (tmp_path / "receipts.json").write_text(json.dumps(standard.bundle))
    code, out, _ = run(capsys, "verify", str(tmp_path / "receipts.json"), "--checkpoint",
                       str(tmp_path / "checkpoint.json"), "--public-key", str(tmp_path / "key.pem"))
    assert code == 0, out


def test_ledger_checkpoint_without_any_checkpoint_exits_1(capsys, no_env):
    with FakeService({"/api/v1/ledger/checkpoints/": {"next": None, "results": []}}) as service:
        code, out, err = run(capsys, "--url", service.url, "ledger", "checkpoint")
    assert code == 1 and out == "" and "has signed no checkpoint yet" in err


def paged(bundle: dict, url: str, per_page: int) -> dict[str, dict]:
    """``bundle`` as the service pages it: ``per_page`` receipts a page, ``next`` a cursor URL."""
    pages, rows = {}, bundle["receipts"]
    for n, start in enumerate(range(0, len(rows), per_page)):
        key = "/api/v1/owner/receipts/" + (f"?cursor={n}" if n else "")
        more = start + per_page < len(rows)
        pages[key] = dict(bundle, receipts=rows[start:start + per_page], pending=[{"id": n}],
                          next=f"{url}/api/v1/owner/receipts/?cursor={n + 1}" if more else None)
    return pages


def test_owner_receipts_merges_every_page_into_one_file(capsys, tmp_path, standard, no_env):
    with FakeService({}) as service:
        service.answers = paged(standard.bundle, service.url, 5)
        out = tmp_path / "receipts.json"
        code, _, err = run(capsys, "--url", service.url, "--token", "tok", "owner", "receipts", "--value", "7",
                           "--tree-size", "11", "--out", str(out))
    assert code == 0, err
    assert "wrote 14 receipts against the checkpoint of tree size 11" in err
    merged = json.loads(out.read_text())
    assert merged == dict(standard.bundle, pending=[{"id": 0}, {"id": 1}, {"id": 2}])
    assert service.requests[0][1] == {"value": ["7"], "tree_size": ["11"]}
    assert len(service.requests) == 3 and all(auth == "Token tok" for *_, auth in service.requests)


def test_owner_receipts_refuses_pages_against_different_checkpoints(capsys, tmp_path, standard, no_env):
    with FakeService({}) as service:
        service.answers = paged(standard.bundle, service.url, 10)
        service.answers["/api/v1/owner/receipts/?cursor=1"]["checkpoint"] = dict(standard.checkpoint, tree_size=12)
        code, _, err = run(capsys, "--url", service.url, "--token", "tok", "owner", "receipts",
                           "--out", str(tmp_path / "r.json"))
    assert code == 1 and not (tmp_path / "r.json").exists()
    assert "against different checkpoints" in err and "--tree-size 11" in err
