"""Receipts (docs/receipts.md): block leaves in the checkpoint log, each block's entry tree, the receipts file, and
the audit catching what would make a receipt lie.  The owner's and the auditor's HTTP paths and the client's
verifier: tests/market/api/test_receipts_api.py, tests/client/test_receipts_verify.py."""
from __future__ import annotations

import io
import threading
from decimal import Decimal

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from accounts.ledger import hashchain as ledger
from accounts.ledger import merkle, signing
from accounts.ledger.checkpoints import blocks_awaiting_checkpoint, checkpoint_make
from accounts.ledger.leaves import (
    BLOCK_LEAF_MARKERS,
    ENTRY_LEAF_MARKERS,
    LEAF_VERSION,
    TREE_CHUNK,
    TREE_WINDOW,
    block_tree,
    entry_keys,
    entry_leaf_data,
    entry_leaf_hashes,
    entry_tree,
    head_leaf,
    log_leaf_hashes,
    position_ids,
    records_at,
)
from accounts.ledger.receipts import receipts_bundle
from accounts.models import LedgerBlock, LedgerCheckpoint, LedgerCheckpointLeaf, LedgerEntry, LedgerHead
from accounts.services import budget_set_ceiling
from audit.budget_audit import audit_budgets
from ldpmarket.problems import NoSuchCheckpoint
from market.models import Value
from market.purchases.pricing import DEFAULT_POLICY
from tests.audit.conftest import buy, sql, tampering
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund
from tests.ledger_edits import edit_entry
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values

pytestmark = pytest.mark.django_db

KIND_NAMES = ledger.KINDS
MICRO = 10 ** 6


def proven_entry(data: bytes) -> dict:
    """Decode a receipt's entry data (docs/receipts.md#entry-data): version 1 (159 bytes) or 2 (191 bytes, the
    entry's key after the marker); ``version`` says which."""
    version = next(v for v, marker in ENTRY_LEAF_MARKERS.items() if data[:31] == marker)
    assert len(data) == {1: 159, 2: 191}[version]
    f = np.frombuffer(data[-128:], dtype="<i8")
    return {**dict(zip(ledger.ENTRY.names, (int(x) for x in f))), "version": version}


def verify_with_merkle(bundle) -> int:
    """Check every receipt of ``bundle`` with ``accounts.ledger.merkle``, and that its shown entry is the proven one."""
    cp = bundle["checkpoint"]
    assert signing.verify(cp["statement"].encode(), cp["signature"])
    assert cp["statement"].split("\n")[1:3] == [str(cp["tree_size"]), cp["root_hash"]]
    root = bytes.fromhex(cp["root_hash"])
    for r in bundle["receipts"]:
        block = bytes.fromhex(r["block_data"])
        assert block[:31] in BLOCK_LEAF_MARKERS.values() and len(block) == 135
        assert proven_entry(bytes.fromhex(r["entry_data"]))["version"] == (
            1 if block[:31] == BLOCK_LEAF_MARKERS[1] else 2)  # the block leaf states its entries' version
        entries_root = block[-32:]
        assert merkle.verify_inclusion(r["entry_index"], r["block_size"],
                                       merkle.leaf_hash(bytes.fromhex(r["entry_data"])),
                                       [bytes.fromhex(p) for p in r["entry_proof"]], entries_root)
        assert merkle.verify_inclusion(r["block_index"], cp["tree_size"], merkle.leaf_hash(block),
                                       [bytes.fromhex(p) for p in r["block_proof"]], root)
        e, shown = proven_entry(bytes.fromhex(r["entry_data"])), r["entry"]
        eps = lambda v: None if v < 0 else f"{Decimal(v) / MICRO:.6f}"  # noqa: E731
        assert (e["value"], KIND_NAMES[e["kind"]], eps(e["epsilon"]), eps(e["chain_after"]), eps(e["ceiling"])) == (
            shown["value"], shown["kind"], shown["epsilon"], shown["chain_loss_after"], shown["ceiling"])
        assert e["chain_after"] + e["oneshot_after"] <= e["ceiling"]
    return len(bundle["receipts"])


def receipts_chain(bundle) -> None:
    """Each value's receipts, in order, start from no loss and chain: befores equal the previous afters."""
    by_value: dict[int, list[dict]] = {}
    for r in bundle["receipts"]:
        by_value.setdefault(r["entry"]["value"], []).append(proven_entry(bytes.fromhex(r["entry_data"])))
    for entries in by_value.values():
        assert (entries[0]["chain_before"], entries[0]["oneshot_before"]) == (0, 0)
        for a, b in zip(entries, entries[1:]):
            assert (b["chain_before"], b["oneshot_before"]) == (a["chain_after"], a["oneshot_after"])


def all_value_ids():
    return list(Value.objects.order_by("id").values_list("id", flat=True))


def test_records_at_reads_what_the_hash_covers(market):
    for block in LedgerBlock.objects.order_by("id"):
        stored = ledger.stored_records(block)
        assert records_at(block.id, 0, block.entry_count).tobytes() == stored.tobytes()
        if block.entry_count > 3:
            assert records_at(block.id, 1, 3).tobytes() == stored[1:3].tobytes()


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 2047, 2048, 2049, 4097, 6145])
def test_the_entries_root_is_the_rfc6962_root_over_every_entry(n, version):
    rng = np.random.default_rng(n)
    records = np.zeros(n, dtype=ledger.ENTRY)
    for name in ledger.ENTRY.names:
        records[name] = rng.integers(-1, 10 ** 9, n)
    ids = position_ids(7, 0, n) if version == 2 else None
    root, chunks = entry_tree(records, version, ids)
    keys = entry_keys(ids) if version == 2 else [None] * n
    leaves = [merkle.leaf_hash(entry_leaf_data(r, version, k)) for r, k in zip(records, keys)]
    assert leaves == entry_leaf_hashes(records, version, ids)
    assert root == merkle.root(leaves) and len(chunks) == -(-n // TREE_CHUNK)
    tree = merkle.Tree(leaves)
    for i in {0, n // 2, n - 1}:
        assert tree.inclusion_proof(i) == merkle.inclusion_proof(i, leaves)


def test_every_entry_of_every_value_has_a_receipt_that_verifies(market):
    checkpoint = checkpoint_make()
    assert checkpoint.appended == LedgerBlock.objects.count() == LedgerCheckpointLeaf.objects.count()
    assert blocks_awaiting_checkpoint() == 0
    assert set(LedgerCheckpointLeaf.objects.values_list("version", flat=True)) == {LEAF_VERSION} == {2}
    bundle = receipts_bundle(value_ids=all_value_ids())
    assert bundle["format"] == "ldpmarket-receipts-v1" and not bundle["pending"]
    assert bundle["checkpoint"]["tree_size"] == checkpoint.tree_size
    assert verify_with_merkle(bundle) == LedgerEntry.objects.count()
    assert [r["entry"]["id"] for r in bundle["receipts"]] == list(
        LedgerEntry.objects.order_by("value_id", "id").values_list("id", flat=True))
    receipts_chain(bundle)
    kinds = {r["entry"]["kind"] for r in bundle["receipts"]}
    assert {"ceiling", "schedule", "chain_release", "pause", "resume", "raw_deleted"} <= kinds
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_oneshot_releases_and_surveys_have_receipts(db):
    rng = np.random.default_rng(3)
    buyer = funded_buyer()
    from tests.factories import BinaryAttributeFactory, UrrAttributeFactory  # noqa: PLC0415 -- this test only
    urr = UrrAttributeFactory(price_policy=POLICY)
    values(urr, ["a", "b", "c", "d", "e"] * 2, ceiling="3")
    run(buyer, urr, epsilon="1", rng=rng)
    binary = BinaryAttributeFactory(price_policy=POLICY)
    values(binary, ["yes", "no"] * 5, ceiling="3")
    run(buyer, binary, mechanism="improved_christofides", epsilon="1", p2="0.1", rng=rng)
    checkpoint_make()
    bundle = receipts_bundle(value_ids=all_value_ids())
    assert verify_with_merkle(bundle) == LedgerEntry.objects.count()
    receipts_chain(bundle)
    for block in LedgerBlock.objects.all():  # v2-hashed blocks (guarantees) re-hash a window at a time too
        assert block_tree(block.id, block.shard, block.prev_hash, block.created_at, block.entry_count,
                                 TREE_CHUNK, version=LEAF_VERSION)[0] == block.hash
    guarantees = {r["entry"]["guarantee"] for r in bundle["receipts"] if r["entry"]["kind"] == "oneshot_release"}
    assert guarantees == {"uldp", "per_report_non_collusion"}
    assert all(proven_entry(bytes.fromhex(r["entry_data"]))["guarantee"] > 0 for r in bundle["receipts"]
               if r["entry"]["kind"] == "oneshot_release")


def test_entries_after_a_checkpoint_are_pending_until_the_next(market):
    first = checkpoint_make()
    value = market.fixed[4]
    budget_set_ceiling(value_id=value.id, ceiling="1.5")
    bundle = receipts_bundle(value_ids=[value.id])
    newest = LedgerEntry.objects.filter(value=value).order_by("-id").first()
    assert bundle["pending"] == [{"id": newest.id, "value": value.id, "kind": "ceiling"}]
    assert newest.id not in {r["entry"]["id"] for r in bundle["receipts"]}
    verify_with_merkle(bundle)
    second = checkpoint_make()
    assert second.tree_size == first.tree_size + 1
    bundle = receipts_bundle(value_ids=[value.id])
    assert not bundle["pending"] and bundle["receipts"][-1]["entry"]["id"] == newest.id
    verify_with_merkle(bundle)
    receipts_chain(bundle)
    # Against the older checkpoint: the newest entry is pending there, the rest verify against its root.
    old = receipts_bundle(value_ids=[value.id], tree_size=first.tree_size)
    assert old["checkpoint"]["root_hash"] == first.root_hash and [p["id"] for p in old["pending"]] == [newest.id]
    verify_with_merkle(old)
    with pytest.raises(NoSuchCheckpoint):
        receipts_bundle(value_ids=[value.id], tree_size=first.tree_size + 5)


def test_before_any_checkpoint_every_entry_is_pending(market):
    bundle = receipts_bundle(value_ids=[market.fixed[3].id])
    assert bundle["checkpoint"] is None and bundle["receipts"] == []
    assert len(bundle["pending"]) == LedgerEntry.objects.filter(value=market.fixed[3]).count() > 0


def test_a_receipt_deep_in_a_large_block(db):
    """A purchase of 4,200 values: its block's entry tree has three chunks; a receipt from the third verifies and
    reads only that chunk's entries."""
    rng = np.random.default_rng(5)
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    vs = contribute(attribute, ["red", "green", "blue"] * 1400, prefix="deep", ceiling="2", rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "100000")
    buy(buyer, attribute, "0.5", rng)
    checkpoint_make()
    release = LedgerEntry.objects.filter(kind="chain_release").order_by("id")
    assert release.count() == 4200
    last = [vs[-1].id, vs[2100].id]
    bundle = receipts_bundle(value_ids=last)
    assert verify_with_merkle(bundle) == LedgerEntry.objects.filter(value_id__in=last).count()
    deep = [r for r in bundle["receipts"] if r["entry"]["kind"] == "chain_release"]
    assert sorted(r["entry_index"] // TREE_CHUNK for r in deep) == [1, 2]
    assert all(r["block_size"] == 4200 and len(r["entry_proof"]) <= 13 for r in deep)  # ceil(log2 4200) = 13
    # The checkpoint read these blocks (the contribution's 4,200 events, the purchase's 4,200 releases) a window at
    # a time: any window gives the block's hash and the same tree.
    blocks = list(LedgerBlock.objects.filter(entry_count=4200))
    assert len(blocks) == 2
    for block in blocks:
        for version in (1, 2):
            ids = position_ids(block.id, 0, 4200) if version == 2 else None
            whole = entry_tree(ledger.stored_records(block), version, ids)
            for window in (TREE_CHUNK, 2 * TREE_CHUNK, TREE_WINDOW):
                assert block_tree(block.id, block.shard, block.prev_hash, block.created_at, 4200, window,
                                  version=version) == (block.hash, *whole)
        leaf = LedgerCheckpointLeaf.objects.get(block_id=block.id)
        assert leaf.version == 2 and leaf.entries_root == entry_tree(
            ledger.stored_records(block), 2, position_ids(block.id, 0, 4200))[0].hex()
    with pytest.raises(ValueError):
        block_tree(block.id, block.shard, block.prev_hash, block.created_at, 4200, 1000)


def test_a_log_of_shard_heads_gets_block_leaves_after_it(market):
    """A ledger checkpointed before receipts existed (head leaves only): the next checkpoint appends a leaf for
    every block, old ones included; the log stays consistent and the audit passes."""
    now = timezone.now()
    heads = list(LedgerHead.objects.select_related("last_block").order_by("shard"))
    hashes = [merkle.leaf_hash(head_leaf(h.shard, h.blocks, h.last_block.hash)) for h in heads]
    root = merkle.root(hashes).hex()
    old = LedgerCheckpoint.objects.create(created_at=now, tree_size=len(heads), root_hash=root,
                                          key_id=signing.key_id(),
                                          signature=signing.sign(signing.statement(len(heads), root, now)))
    LedgerCheckpointLeaf.objects.bulk_create([LedgerCheckpointLeaf(index=i, checkpoint=old, shard=h.shard,
                                                                   blocks=h.blocks, head_hash=h.last_block.hash)
                                              for i, h in enumerate(heads)])
    new = checkpoint_make()
    assert new.tree_size == len(heads) + LedgerBlock.objects.count()
    log = log_leaf_hashes()
    assert merkle.verify_consistency(old.tree_size, new.tree_size, bytes.fromhex(old.root_hash),
                                     bytes.fromhex(new.root_hash), merkle.consistency_proof(old.tree_size, log))
    bundle = receipts_bundle(value_ids=all_value_ids())
    assert verify_with_merkle(bundle) == LedgerEntry.objects.count()
    assert min(r["block_index"] for r in bundle["receipts"]) >= len(heads)
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_one_checkpoint_takes_at_most_max_entries(market, capsys):
    blocks = LedgerBlock.objects.count()
    made = checkpoint_make(max_entries=1)  # one block at a time, however large
    assert made.appended == 1 and blocks_awaiting_checkpoint() == blocks - 1
    while blocks_awaiting_checkpoint():
        assert checkpoint_make(max_entries=1).appended == 1
    assert LedgerCheckpoint.objects.count() == blocks
    assert [leaf.blocks for leaf in LedgerCheckpointLeaf.objects.order_by("index")] == list(range(1, blocks + 1))
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_the_command_goes_on_until_every_block_is_in(market, settings, capsys):
    settings.LDP_CHECKPOINT_MAX_ENTRIES = 1
    call_command("ledger_checkpoint")
    out = capsys.readouterr().out
    assert blocks_awaiting_checkpoint() == 0
    assert out.count("checkpoint ") == LedgerBlock.objects.count() == LedgerCheckpoint.objects.count()


def test_a_block_whose_entries_changed_gets_no_leaf(market):
    """The checkpoint recomputes each block's hash from the entries its tree covers: a block edited before its
    first checkpoint gets no leaf, nor do the later blocks of its shard; the other shards go on."""
    other = CategoricalAttributeFactory()
    contribute(other, ["red", "green"], prefix="other", ceiling="1", rng=np.random.default_rng(1))
    shard = market.attribute.id
    blocks = list(LedgerBlock.objects.filter(shard=shard).order_by("id"))
    k = 1  # the scheduled values' contribution: a block of budget events
    assert LedgerEntry.objects.filter(block=blocks[k], kind="schedule").count() == 12
    with tampering():
        sql("UPDATE accounts_ledgerevent SET ceiling = ceiling + 0.5 WHERE block_id = %s AND position = 3",
            [blocks[k].id])
    checkpoint_make()
    covered = set(LedgerCheckpointLeaf.objects.values_list("block_id", flat=True))
    assert covered == {b.id for b in blocks[:k]} | set(
        LedgerBlock.objects.filter(shard=other.id).values_list("id", flat=True))
    assert blocks_awaiting_checkpoint() == len(blocks) - k
    err = io.StringIO()
    call_command("ledger_checkpoint", stderr=err)
    assert f"{len(blocks) - k} block(s) got no leaf" in err.getvalue()


def failed_names(report) -> set[str]:
    return {c.name for c in report.failed}


ROOTED = "every block leaf's entries root recomputes from the block's stored entries (receipts)"
NAMED = "every block a checkpoint leaf names is still in the chain as it was (id, shard, hash, entries, time)"
MERKLE = "each checkpoint's Merkle root recomputes from the leaves it covers (RFC 6962)"


def test_an_entry_edited_after_its_checkpoint_is_caught(market):
    checkpoint_make()
    entry = LedgerEntry.objects.filter(kind="schedule").order_by("id")[3]
    with tampering():
        edit_entry(entry, ceiling=entry.ceiling + Decimal("0.1"))
    names = failed_names(audit_budgets())
    assert ROOTED in names and "each block's hash recomputes from its stored entries" in names


def test_a_leaf_whose_entries_root_was_rewritten_is_caught(market):
    checkpoint_make()
    leaf = LedgerCheckpointLeaf.objects.order_by("index")[2]
    with tampering():
        sql('UPDATE accounts_ledgercheckpointleaf SET entries_root = %s WHERE "index" = %s', ["cd" * 32, leaf.index])
    names = failed_names(audit_budgets())
    assert {ROOTED, MERKLE} <= names


def test_chunk_roots_rewritten_alone_are_caught(market):
    """The chunk roots are not in the signed leaf (only the entries root is): the audit recomputes them too, so
    receipts built from them cannot be made to fail in silence."""
    checkpoint_make()
    leaf = LedgerCheckpointLeaf.objects.order_by("index")[1]
    with tampering():
        sql('UPDATE accounts_ledgercheckpointleaf SET chunk_roots = %s WHERE "index" = %s', [b"\x00" * 32, leaf.index])
    report = audit_budgets()
    assert failed_names(report) == {ROOTED}, report.as_text()


def test_a_block_time_changed_after_its_checkpoint_is_caught(market):
    checkpoint_make()
    block = LedgerBlock.objects.order_by("id")[1]
    with tampering():
        sql("UPDATE accounts_ledgerblock SET created_at = created_at + interval '1 second' WHERE id = %s"
            if connection.vendor == "postgresql" else
            "UPDATE accounts_ledgerblock SET created_at = datetime(created_at, '+1 second') WHERE id = %s", [block.id])
    assert NAMED in failed_names(audit_budgets())


@pytest.mark.django_db(transaction=True)
def test_two_checkpoints_at_once_append_each_block_once():
    """PostgreSQL: two checkpoint makers at once (beat and the command) never leaf a block twice: the second waits
    for the first's lock and then finds nothing new."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set DATABASE_URL (CI runs these)")
    attribute = CategoricalAttributeFactory()
    contribute(attribute, ["red", "green", "blue"] * 10, prefix="first", ceiling="2", rng=np.random.default_rng(1))
    checkpoint_make()  # a first checkpoint, whose row the makers lock
    for k in range(3):
        contribute(attribute, ["red", "green"] * 50, prefix=f"more{k}", ceiling="2", rng=np.random.default_rng(2))
    results, errors = [], []
    barrier = threading.Barrier(2)

    def make():
        try:
            barrier.wait()
            results.append(checkpoint_make())
        except Exception as exc:  # noqa: BLE001 -- reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=make) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(c.appended for c in results)[0] == 0 or len({c.tree_size for c in results}) == 2
    leaves = list(LedgerCheckpointLeaf.objects.values_list("block_id", flat=True))
    assert len(leaves) == len(set(leaves)) == LedgerBlock.objects.count()
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_owner_held_values_custody_and_uploads_and_sales_have_receipts(db):
    """An owner-held value's ledger: its custody event, each chain upload (epsilon = the new upload level) and
    the releases sold from the uploaded chain, each with a receipt that verifies and chains."""
    from tests.market.test_custody import LABELS, grid_points, held_market, honest  # noqa: PLC0415 -- its helpers

    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    held = held_market(attribute, 6, honest)
    buyer = BuyerFactory()
    fund(buyer, "100")
    buy(buyer, attribute, "0.35", np.random.default_rng(4))
    checkpoint_make()
    bundle = receipts_bundle(value_ids=[v.id for v in held])
    assert verify_with_merkle(bundle) == LedgerEntry.objects.filter(value__in=held).count()
    receipts_chain(bundle)
    kinds = [r["entry"]["kind"] for r in bundle["receipts"] if r["entry"]["value"] == held[0].id]
    assert kinds[0] == "ceiling" and "owner_custody" in kinds and kinds[-1] == "chain_release"
    upload = next(r for r in bundle["receipts"] if r["entry"]["kind"] == "owner_upload")
    assert upload["entry"]["epsilon"] == f"{Decimal(grid_points('0.1', '0.6')[-1]):.6f}"


def test_the_checkpoint_task_enqueues_the_next_while_blocks_remain(market, settings, monkeypatch):
    """Beat's task takes at most LDP_CHECKPOINT_MAX_ENTRIES entries' blocks and enqueues the next checkpoint while
    blocks remain; not when none remain, nor when it could append none (a block whose entries changed)."""
    from market import tasks  # noqa: PLC0415 -- the interface under test, this test only

    sent = []
    monkeypatch.setattr(tasks.make_ledger_checkpoint, "delay", lambda: sent.append(1))
    settings.LDP_CHECKPOINT_MAX_ENTRIES = 1
    blocks = LedgerBlock.objects.count()
    assert tasks.make_ledger_checkpoint.apply().get() == 1 and sent == [1]
    while blocks_awaiting_checkpoint():
        tasks.make_ledger_checkpoint.apply()
    assert len(sent) == blocks - 1  # the last one found nothing left
    tasks.make_ledger_checkpoint.apply()
    assert len(sent) == blocks - 1
    budget_set_ceiling(value_id=market.fixed[9].id, ceiling="1.2")
    budget_set_ceiling(value_id=market.fixed[9].id, ceiling="1.3")
    first = LedgerBlock.objects.order_by("-id")[1]
    with tampering():
        sql("UPDATE accounts_ledgerevent SET ceiling = ceiling + 0.5 WHERE block_id = %s", [first.id])
    tasks.make_ledger_checkpoint.apply()
    assert blocks_awaiting_checkpoint() == 2 and len(sent) == blocks - 1  # no progress: not enqueued again
