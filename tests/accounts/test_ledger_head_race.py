"""The ledger head under concurrent writers (issue 27, docs/budget-rules.md#the-ledger): real threads on PostgreSQL.

A red-team run saw 46 of 120 owners' pause/resume requests fail with ``AttributeError: 'NoneType' object has no
attribute 'hash'`` in ``ledger.append``: the head row was locked with the previous block joined into the same
SELECT, and after a lock wait PostgreSQL re-reads the head row but joins it with the block rows of the older
snapshot, so the block just appended by the other writer came back as NULL.  ``append`` now reads the previous
block after the lock.
"""
from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest
from django.db import transaction

from accounts import services as budget_services
from accounts.models import LedgerBlock, LedgerHead, User
from audit.budget_audit import audit_budgets
from market.models import Attribute, Dataset
from market.values import services
from tests.market.test_purchase_concurrency import run_concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def owners_values():
    dataset = Dataset.objects.create(title="head race")
    attribute = Attribute.objects.create(dataset=dataset, name="q", kind="binary", labels=["0", "1"],
                                         grid_start=Decimal("0.1"), grid_step=Decimal("0.1"))
    owners = [User.objects.create(username=f"race-owner-{i}", role="owner") for i in range(20)]
    values = services.values_create_many(attribute=attribute, owners=owners, raws=[i % 2 for i in range(20)],
                                         ceiling="1.0")
    return attribute, values


def _shard_is_one_chain(shard: int) -> None:
    blocks = list(LedgerBlock.objects.filter(shard=shard).order_by("id").values("prev_hash", "hash"))
    head = LedgerHead.objects.get(shard=shard)
    assert head.blocks == len(blocks)
    assert [b["prev_hash"] for b in blocks[1:]] == [b["hash"] for b in blocks[:-1]]
    assert LedgerBlock.objects.get(pk=head.last_block_id).hash == blocks[-1]["hash"]


def test_append_after_a_lock_wait_chains_to_the_block_just_committed(owners_values):
    """Deterministic: A appends and holds the head's lock; B's append waits for it; A commits; B must chain to
    A's block (the old code failed here with AttributeError on every run)."""
    attribute, values = owners_values
    a_appended, b_started, release_a = threading.Event(), threading.Event(), threading.Event()

    def writer_a():
        with transaction.atomic():
            budget_services.budget_set_paused(value_id=values[0].id, paused=True)
            a_appended.set()
            assert release_a.wait(60)

    def writer_b():
        assert a_appended.wait(60)
        b_started.set()
        budget_services.budget_set_paused(value_id=values[1].id, paused=True)

    def release():
        assert b_started.wait(60)
        # B is now blocked on the head's row lock (it can take no other lock first: its budget row is its own).
        time.sleep(1.0)
        release_a.set()

    errors = run_concurrently([writer_a, writer_b, release])
    assert errors == []
    _shard_is_one_chain(attribute.id)
    report = audit_budgets()
    assert report.ok, [c.name for c in report.failed]


def test_twenty_owners_pausing_and_resuming_at_once(owners_values):
    """The red team's load: 20 owners of one attribute pause, resume and pause again at once; 60 requests, no
    error, one unbroken chain of 60 new blocks."""
    attribute, values = owners_values
    before = LedgerHead.objects.get(shard=attribute.id).blocks

    def owner(value_id):
        def act():  # the owners start together (run_concurrently's barrier)
            for paused in (True, False, True):
                budget_services.budget_set_paused(value_id=value_id, paused=paused)
        return act

    errors = run_concurrently([owner(v.id) for v in values])
    assert errors == []
    assert LedgerHead.objects.get(shard=attribute.id).blocks == before + 3 * len(values)
    _shard_is_one_chain(attribute.id)
    report = audit_budgets()
    assert report.ok, [c.name for c in report.failed]
