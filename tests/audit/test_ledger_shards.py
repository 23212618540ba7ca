"""The sharded ledger and its signed checkpoints (docs/budget-rules.md#the-ledger, #checkpoints): one hash chain
per attribute, no fork, no shared head; checkpoints that sign an append-only log of blocks; and the audit
catching a lost tail, a forged or re-rooted checkpoint and a block moved between shards.  Block leaves and
receipts: tests/audit/test_receipts.py."""
from __future__ import annotations

import base64
import threading

import numpy as np
import pytest
from django.db import IntegrityError, OperationalError, connection, connections, transaction
from django.utils import timezone

from accounts.ledger import hashchain as ledger
from accounts.ledger import merkle, signing
from accounts.ledger.checkpoints import checkpoint_make
from accounts.ledger.leaves import leaf_data
from accounts.models import BudgetAccount, LedgerBlock, LedgerCheckpointLeaf, LedgerEntry, LedgerHead
from accounts.services import budget_set_paused, event_rows
from audit.budget_audit import audit_budgets
from tests.audit.conftest import buy, sql, tampering
from tests.factories import CategoricalAttributeFactory, contribute
from tests.ledger_checks import hash_chain_problems

pytestmark = pytest.mark.django_db


def failed_names(report) -> set[str]:
    return {c.name for c in report.failed}


def second_attribute(market):
    other = CategoricalAttributeFactory(price_policy=market.attribute.price_policy)
    contribute(other, ["red", "green", "blue"] * 4, ceiling="2", rng=np.random.default_rng(1))
    buy(market.buyer, other, "0.5", np.random.default_rng(2))
    return other


def test_each_attribute_has_its_own_chain_from_genesis(market):
    other = second_attribute(market)
    shards = set(LedgerBlock.objects.values_list("shard", flat=True))
    assert shards == {market.attribute.id, other.id}
    for shard in shards:
        blocks = list(LedgerBlock.objects.filter(shard=shard).order_by("id"))
        assert blocks[0].prev_hash == ledger.GENESIS
        assert all(b.prev_hash == a.hash for a, b in zip(blocks, blocks[1:]))
        head = LedgerHead.objects.get(shard=shard)
        assert (head.last_block_id, head.blocks) == (blocks[-1].id, len(blocks))
    entries = LedgerEntry.objects.select_related("block", "value")
    assert all(e.block.shard == e.value.attribute_id for e in entries)
    assert hash_chain_problems() == []
    report = audit_budgets()
    assert report.ok, report.as_text()
    assert report.stats["shards"] == 2


def test_a_shard_cannot_fork(market):
    """UNIQUE (shard, prev_hash): a second block after the same block is refused, lock or no lock."""
    head = LedgerHead.objects.select_related("last_block").get(shard=market.attribute.id)
    with pytest.raises(IntegrityError), transaction.atomic():
        LedgerBlock.objects.create(shard=market.attribute.id, prev_hash=head.last_block.prev_hash, hash="f" * 64,
                                   entry_count=1, created_at=timezone.now())
    # the same prev_hash in another shard is another chain: allowed
    LedgerBlock.objects.create(shard=market.attribute.id + 1000, prev_hash=head.last_block.prev_hash,
                               hash="e" * 64, entry_count=1, created_at=timezone.now())


def test_a_block_moved_to_another_shard_is_caught(market):
    block = LedgerBlock.objects.filter(shard=market.attribute.id).order_by("id").last()
    with tampering():
        sql("UPDATE accounts_ledgerblock SET shard = %s WHERE id = %s", [market.attribute.id + 1, block.id])
        sql("UPDATE accounts_ledgerhead SET shard = %s WHERE shard = %s", [market.attribute.id + 1,
                                                                             market.attribute.id])
    report = audit_budgets()
    assert {"each block's hash recomputes from its stored entries",
            "blocks are linked: each prev_hash is the hash of the block before it in its shard (from genesis)",
            "each shard's head points at its last block and counts its blocks",
            "each entry of an attribute's shard is about a value of that attribute"} <= failed_names(report)


def test_checkpoints_sign_an_append_only_log_of_blocks(market):
    first = checkpoint_make()
    blocks = list(LedgerBlock.objects.order_by("id"))
    assert first.tree_size == len(blocks) == LedgerCheckpointLeaf.objects.count() == first.appended
    leaves = list(LedgerCheckpointLeaf.objects.order_by("index"))
    assert [leaf.block_id for leaf in leaves] == [b.id for b in blocks]
    assert [(leaf.shard, leaf.blocks, leaf.head_hash) for leaf in leaves] == [
        (b.shard, k + 1, b.hash) for k, b in enumerate(blocks)]  # one shard: heights 1, 2, 3, ...
    hashes = [merkle.leaf_hash(leaf_data(leaf)) for leaf in leaves]
    assert first.root_hash == merkle.root(hashes).hex()
    assert signing.verify(signing.statement(first.tree_size, first.root_hash, first.created_at), first.signature)
    assert first.key_id == signing.key_id()
    again = checkpoint_make()
    assert again.id == first.id and again.appended == 0  # no new block: nothing new to sign

    other = second_attribute(market)
    budget_set_paused(value_id=market.fixed[5].id, paused=True)
    second = checkpoint_make()
    new = list(LedgerCheckpointLeaf.objects.filter(index__gte=first.tree_size).order_by("index"))
    assert {leaf.shard for leaf in new} == {market.attribute.id, other.id}
    assert [leaf.blocks for leaf in new if leaf.shard == other.id] == list(
        range(1, LedgerBlock.objects.filter(shard=other.id).count() + 1))
    assert [leaf.blocks for leaf in new if leaf.shard == market.attribute.id] == [len(blocks) + 1]
    hashes = [merkle.leaf_hash(leaf_data(leaf)) for leaf in LedgerCheckpointLeaf.objects.order_by("index")]
    proof = merkle.consistency_proof(first.tree_size, hashes)
    assert merkle.verify_consistency(first.tree_size, second.tree_size, bytes.fromhex(first.root_hash),
                                     bytes.fromhex(second.root_hash), proof)
    report = audit_budgets()
    assert report.ok, report.as_text()
    assert report.stats["checkpoints"] == 2


def test_a_lost_tail_is_caught_even_with_its_head_moved_back(market):
    """Delete a shard's last block and its entries and move the head back: the chain alone still verifies; the
    checkpoint that saw the lost block does not."""
    checkpoint_make()
    shard = market.attribute.id
    last = LedgerBlock.objects.filter(shard=shard).order_by("id").last()
    before = LedgerBlock.objects.filter(shard=shard, id__lt=last.id).order_by("id").last()
    with tampering():
        sql("UPDATE accounts_ledgerhead SET last_block_id = %s, blocks = blocks - 1 WHERE shard = %s",
            [before.id, shard])
        sql("DELETE FROM accounts_ledgerevent WHERE block_id = %s", [last.id])
        sql("DELETE FROM accounts_ledgerrelease WHERE block_id = %s", [last.id])
        sql("DELETE FROM accounts_ledgerblock WHERE id = %s", [last.id])
    report = audit_budgets()
    lost = [c for c in report.failed if c.name.startswith("every head a checkpoint saw")]
    assert lost and f"shard {shard}" in lost[0].examples[0] and "tail was lost" in lost[0].examples[0]
    assert not [c for c in report.failed if c.section == "Hash chain"]  # the chain alone cannot tell


STATEMENT_SIGNED = "each checkpoint's statement is signed by a key of the log's key history (Ed25519)"
NOTE_SIGNED = ("each checkpoint's signed note states its size and root under the log's origin, and every log signature "
               "on it verifies (docs/receipts.md#checkpoints-as-signed-notes)")


def test_a_forged_or_rerooted_checkpoint_is_caught(market):
    checkpoint = checkpoint_make()
    with tampering():
        sql("UPDATE accounts_ledgercheckpoint SET signature = %s WHERE id = %s", ["00" * 64, checkpoint.id])
    assert STATEMENT_SIGNED in failed_names(audit_budgets())
    good = checkpoint.note
    root_line = good.split("\n")[2]
    other_root = base64.b64encode(bytes(32)).decode()
    for forged in (good.replace(root_line, other_root),          # another root under the same signature
                   good.replace("ldpmarket.test/log", "elsewhere.test/log"),  # another origin
                   good.split("\n\n")[0] + "\n\n"):            # no signature at all
        with tampering():
            sql("UPDATE accounts_ledgercheckpoint SET note = %s WHERE id = %s", [forged, checkpoint.id])
        assert NOTE_SIGNED in failed_names(audit_budgets()), forged
    with tampering():
        sql("UPDATE accounts_ledgercheckpoint SET note = %s WHERE id = %s", [good, checkpoint.id])
    assert NOTE_SIGNED not in failed_names(audit_budgets())
    with tampering():
        sql("UPDATE accounts_ledgercheckpointleaf SET head_hash = %s WHERE checkpoint_id = %s",
            ["ab" * 32, checkpoint.id])
    names = failed_names(audit_budgets())
    assert "each checkpoint's Merkle root recomputes from the leaves it covers (RFC 6962)" in names
    assert "every head a checkpoint saw is still in its shard's chain (no tail lost or rewritten)" in names


@pytest.mark.django_db(transaction=True)
def test_writers_of_different_attributes_do_not_wait_for_each_other():
    """PostgreSQL: while a transaction holds shard A's head (its purchase not yet committed), a block of shard B is
    appended at once, and one of shard A waits (lock_timeout)."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set DATABASE_URL (CI runs these)")
    a, b = CategoricalAttributeFactory(), CategoricalAttributeFactory()
    va = contribute(a, ["red"], ceiling="1")[0]
    vb = contribute(b, ["red"], ceiling="1")[0]
    holding, release = threading.Event(), threading.Event()

    def hold_a():
        try:
            with transaction.atomic():
                ledger.append(event_rows([BudgetAccount.objects.get(value=va)], LedgerEntry.Kind.PAUSE), shard=a.id)
                holding.set()
                release.wait(10)
        finally:
            connections.close_all()

    t = threading.Thread(target=hold_a)
    t.start()
    try:
        assert holding.wait(10)
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '1s'")
            ledger.append(event_rows([BudgetAccount.objects.get(value=vb)], LedgerEntry.Kind.PAUSE), shard=b.id)
        with pytest.raises(OperationalError), transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '300ms'")
            ledger.append(event_rows([BudgetAccount.objects.get(value=va)], LedgerEntry.Kind.RESUME), shard=a.id)
    finally:
        release.set()
        t.join()
    assert hash_chain_problems() == []
    assert LedgerHead.objects.get(shard=b.id).blocks == 2 and LedgerHead.objects.get(shard=a.id).blocks == 2


def test_shard_zero_hashes_as_the_ledger_did_before_shards():
    """The chain written before shards is shard 0: its blocks hash exactly as they did (anchors still verify);
    a block of another shard hashes its shard too, so it cannot be moved."""
    rows = ledger.Rows.empty(2)
    rows.records["value"] = [3, 4]
    rows.records["kind"] = ledger.KINDS.index("pause")
    when = timezone.now()
    legacy = ledger.block_hash(ledger.GENESIS, when, rows.records)
    assert ledger.block_hash(ledger.GENESIS, when, rows.records, ledger.LEGACY_SHARD) == legacy
    assert len({legacy, ledger.block_hash(ledger.GENESIS, when, rows.records, 5),
                ledger.block_hash(ledger.GENESIS, when, rows.records, 6)}) == 3


@pytest.mark.django_db(transaction=True)
def test_the_migration_makes_the_existing_chain_shard_zero():
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("accounts", "0011_money_entry_names")], [("accounts", "0012_ledger_shards_and_checkpoints")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Block, Head = old.get_model("accounts", "LedgerBlock"), old.get_model("accounts", "LedgerHead")
    first = Block.objects.create(prev_hash=ledger.GENESIS, hash="a" * 64, entry_count=1, created_at=timezone.now())
    second = Block.objects.create(prev_hash="a" * 64, hash="b" * 64, entry_count=1, created_at=timezone.now())
    Head.objects.create(id=1, last_block=second)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    head = new.get_model("accounts", "LedgerHead").objects.get()
    assert (head.shard, head.last_block_id, head.blocks) == (0, second.id, 2)
    assert set(new.get_model("accounts", "LedgerBlock").objects.values_list("shard", flat=True)) == {0}
    assert first.id < second.id
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
