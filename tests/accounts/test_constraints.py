"""The database itself refuses states that break the budget, ledger and money invariants.

Every refusal is an IntegrityError from a CHECK/UNIQUE constraint (or, on PostgreSQL, the append-only
trigger of accounts/migrations/0003), raised inside ``transaction.atomic`` so the test can go on.  Each
group also shows that a valid change of the same row is accepted, so the refusals are not vacuous.

Beware of NULL: a CHECK whose expression is NULL (unknown) passes, so a comparison with a nullable column
only constrains when the column is also required to be NOT NULL; several cases below test exactly that.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone as djtz

from accounts import ledger
from accounts.models import BudgetAccount, LedgerBlock, LedgerEntry, LedgerHead, MoneyAccount, MoneyEntry, User
from accounts.services import budget_set_paused
from tests.factories import BuyerFactory, OwnerFactory, contribute

D = Decimal
T0 = datetime(2033, 1, 1, tzinfo=timezone.utc)


def refused(fn, match: str | None = None):
    with pytest.raises(IntegrityError, match=match), transaction.atomic():
        fn()


def accepted(fn):
    with transaction.atomic():
        fn()


@pytest.fixture
def budget(categorical):
    value = contribute(categorical, ["red"], ceiling="1.0")[0]
    return BudgetAccount.objects.filter(value=value)


SCHEDULE = dict(schedule_shape="linear", schedule_start=D("0.5"), schedule_cap=D("2"), schedule_start_at=T0,
                schedule_end_at=T0 + timedelta(days=1), schedule_steps=None, ceiling=D("1.0"))


@pytest.mark.parametrize("change", [
    dict(chain_loss=D("1.000001")),                        # loss above the ceiling
    dict(chain_loss=D("0.6"), oneshot_loss=D("0.5")),      # loss = chain + one-shot, above the ceiling
    dict(oneshot_loss=D("1.5")),
    dict(ceiling=D("0.4"), chain_loss=D("0.5")),
    dict(chain_loss=D("-0.1")),
    dict(oneshot_loss=D("-0.000001")),
    dict(ceiling=D("-1")),
    dict(ceiling=D("700.000001")),
], ids=repr)
def test_budget_losses_and_ceiling(budget, change):
    refused(lambda: budget.update(**change))


def test_budget_valid_losses_are_accepted(budget):
    accepted(lambda: budget.update(chain_loss=D("0.6"), oneshot_loss=D("0.4")))  # exactly the ceiling
    accepted(lambda: budget.update(ceiling=D("700"), chain_loss=0, oneshot_loss=0))


@pytest.mark.parametrize("change", [
    dict(schedule_steps=3),                                          # linear with steps
    dict(schedule_shape="steps"),                                    # steps without a number
    dict(schedule_shape="steps", schedule_steps=0),
    dict(schedule_shape="expo"),
    dict(schedule_cap=D("0.4"), ceiling=D("0.45")),                  # cap below start
    dict(schedule_end_at=T0),                                        # ends when it starts
    dict(schedule_end_at=T0 - timedelta(seconds=1)),
    dict(ceiling=D("2.5")),                                          # ceiling above the cap
    dict(ceiling=D("0.4")),                                          # ceiling below the start
    dict(schedule_start=D("-0.1"), ceiling=D("0")),
    dict(schedule_start_at=None),                                    # incomplete schedules
    dict(schedule_end_at=None),
    dict(schedule_start=None),
    dict(schedule_cap=None),
    dict(schedule_shape="", schedule_start=D("0.5")),                # no schedule, but schedule fields
    dict(schedule_shape="", schedule_start=None, schedule_cap=None, schedule_start_at=None, schedule_end_at=None,
         schedule_steps=2),
], ids=repr)
def test_budget_schedule_must_be_consistent(budget, change):
    accepted(lambda: budget.update(**SCHEDULE))
    refused(lambda: budget.update(**{**SCHEDULE, **change}))


def test_budget_consistent_schedules_are_accepted(budget):
    accepted(lambda: budget.update(**SCHEDULE))
    accepted(lambda: budget.update(**{**SCHEDULE, "schedule_shape": "steps", "schedule_steps": 4}))
    accepted(lambda: budget.update(**{**SCHEDULE, "ceiling": D("2")}))
    accepted(lambda: budget.update(schedule_shape="", schedule_start=None, schedule_cap=None, schedule_start_at=None,
                                   schedule_end_at=None, schedule_steps=None))


def test_one_budget_per_value(budget):
    b = budget.get()
    refused(lambda: BudgetAccount.objects.create(value_id=b.value_id, ceiling=1))


# ---------------------------------------------------------------------------------------------
# Ledger
# ---------------------------------------------------------------------------------------------

def _entry(value_id, **fields):
    n = LedgerBlock.objects.count()  # a shard of its own: a second block after genesis in one shard is a fork
    block = LedgerBlock.objects.create(shard=10**6 + n, prev_hash=ledger.GENESIS, hash=f"{n:064x}", entry_count=1,
                                       created_at=djtz.now())
    base = dict(block=block, value_id=value_id, kind="ceiling", created_at=djtz.now(), epsilon=None,
                chain_loss_before=0, chain_loss_after=0, oneshot_loss_before=0, oneshot_loss_after=0, ceiling=1)
    return LedgerEntry.objects.create(**{**base, **fields})


@pytest.mark.parametrize("fields", [
    dict(kind="gift"),
    dict(chain_loss_before=D("0.5"), chain_loss_after=D("0.4")),            # losses never go down
    dict(oneshot_loss_before=D("0.5"), oneshot_loss_after=D("0.4")),
    dict(chain_loss_after=D("0.8"), oneshot_loss_after=D("0.3"), oneshot_loss_before=D("0.3"),
         chain_loss_before=D("0.8")),                                       # loss above the ceiling in force
    dict(kind="chain_release"),                                             # a release without an epsilon
    dict(kind="oneshot_release"),
    dict(kind="chain_release", epsilon=D("0")),
    dict(kind="ceiling", epsilon=D("0.5")),                                 # an epsilon on a policy entry
    dict(kind="chain_release", epsilon=D("0.5"), chain_loss_after=D("0.4")),  # chain loss below the release
    dict(kind="chain_release", epsilon=D("0.5"), chain_loss_after=D("0.5"), oneshot_loss_after=D("0.1")),
    dict(kind="oneshot_release", epsilon=D("0.3"), oneshot_loss_after=D("0.2")),  # one-shot adds exactly
    dict(kind="oneshot_release", epsilon=D("0.3"), oneshot_loss_after=D("0.3"), chain_loss_after=D("0.1")),
    dict(kind="oneshot_release", epsilon=D("0.3"), oneshot_loss_after=D("0.3")),  # a one-shot names its guarantee
    dict(kind="oneshot_release", epsilon=D("0.3"), oneshot_loss_after=D("0.3"), guarantee="strong"),
    dict(kind="ceiling", guarantee="ldp"),                                  # budget events carry none
    dict(kind="chain_release", epsilon=D("0.5"), chain_loss_after=D("0.5"), guarantee="per_report_non_collusion"),
], ids=repr)
def test_ledger_entries_follow_the_release_rules(budget, fields):
    value_id = budget.get().value_id
    refused(lambda: _entry(value_id, **fields))


def test_ledger_valid_entries_are_accepted(budget):
    value_id = budget.get().value_id
    accepted(lambda: _entry(value_id, kind="chain_release", epsilon=D("0.5"), chain_loss_after=D("0.5")))
    accepted(lambda: _entry(value_id, kind="chain_release", epsilon=D("0.3"), chain_loss_before=D("0.5"),
                            chain_loss_after=D("0.5")))  # at or below the chain loss: costs nothing
    accepted(lambda: _entry(value_id, kind="oneshot_release", epsilon=D("0.3"), oneshot_loss_before=D("0.2"),
                            oneshot_loss_after=D("0.5"), guarantee="ldp"))
    accepted(lambda: _entry(value_id, kind="oneshot_release", epsilon=D("0.2"), oneshot_loss_before=D("0.5"),
                            oneshot_loss_after=D("0.7"), guarantee="per_report_non_collusion"))


def test_ledger_blocks_and_head(budget):
    refused(lambda: LedgerBlock.objects.create(prev_hash="0" * 64, hash="a" * 64, entry_count=0,
                                               created_at=djtz.now()))
    existing = LedgerBlock.objects.first()
    refused(lambda: LedgerBlock.objects.create(prev_hash=existing.hash, hash=existing.hash, entry_count=1,
                                               created_at=djtz.now()))  # a block's hash is unique
    head = LedgerHead.objects.get()  # one head per shard: the budget's attribute
    refused(lambda: LedgerHead.objects.create(shard=head.shard))
    refused(lambda: LedgerBlock.objects.create(shard=existing.shard, prev_hash=existing.prev_hash, hash="b" * 64,
                                               entry_count=1, created_at=djtz.now()))  # no fork in a shard


# ---------------------------------------------------------------------------------------------
# Money and users
# ---------------------------------------------------------------------------------------------

def test_money_balances_never_negative_and_accounts_well_formed(db):
    buyer, owner = BuyerFactory(), OwnerFactory()
    credit = MoneyAccount.objects.create(user=buyer, kind="buyer_credit", balance=D("10"))
    refused(lambda: MoneyAccount.objects.filter(id=credit.id).update(balance=D("-0.0001")))
    refused(lambda: MoneyEntry.objects.create(account=credit, amount=D("-11"), balance_after=D("-1")))
    accepted(lambda: MoneyEntry.objects.create(account=credit, amount=D("-10"), balance_after=D("0")))
    refused(lambda: MoneyAccount.objects.create(user=buyer, kind="buyer_credit"))     # one per kind per user
    refused(lambda: MoneyAccount.objects.create(user=owner, kind="platform"))          # the platform has no user
    refused(lambda: MoneyAccount.objects.create(user=None, kind="owner_earnings"))     # earnings need an owner
    accepted(lambda: MoneyAccount.objects.create(user=None, kind="platform"))
    refused(lambda: MoneyAccount.objects.create(user=None, kind="platform"))           # a single platform account
    accepted(lambda: MoneyAccount.objects.create(user=owner, kind="owner_earnings"))


def test_user_role_must_be_known(db):
    refused(lambda: User.objects.create(username="mallory", role="superuser"))
    accepted(lambda: User.objects.create(username="alice", role="auditor"))


# ---------------------------------------------------------------------------------------------
# PostgreSQL: the ledger tables are append-only in the database itself
# ---------------------------------------------------------------------------------------------

@pytest.mark.postgres
def test_ledger_tables_refuse_update_and_delete(budget):
    value_id = budget.get().value_id
    budget_set_paused(value_id=value_id, paused=True)
    entry = LedgerEntry.objects.filter(value_id=value_id).last()
    block = entry.block
    credit = MoneyAccount.objects.create(user=BuyerFactory(), kind="buyer_credit", balance=D("5"))
    money = MoneyEntry.objects.create(account=credit, amount=D("5"), balance_after=D("5"))
    append_only = r"append-only"
    refused(lambda: LedgerEntry.objects.filter(id=entry.id).update(ceiling=D("9")), append_only)
    refused(lambda: LedgerEntry.objects.filter(id=entry.id).delete(), append_only)
    refused(lambda: LedgerBlock.objects.filter(id=block.id).update(entry_count=7), append_only)
    refused(lambda: LedgerBlock.objects.filter(id=block.id).update(hash="f" * 64), append_only)
    refused(lambda: MoneyEntry.objects.filter(id=money.id).update(amount=D("500")), append_only)
    refused(lambda: MoneyEntry.objects.filter(id=money.id).delete(), append_only)

    def raw(sql):
        with connection.cursor() as cur:
            cur.execute(sql)

    refused(lambda: raw(f"UPDATE accounts_ledgerentry SET kind = 'resume' WHERE id = {entry.id}"), append_only)
    refused(lambda: raw("DELETE FROM accounts_ledgerblock"), append_only)
    refused(lambda: raw("UPDATE accounts_moneyentry SET memo = 'edited'"), append_only)
    # appending still works, and the chain is intact
    budget_set_paused(value_id=value_id, paused=False)
    assert LedgerEntry.objects.get(id=entry.id).ceiling == entry.ceiling
    assert ledger.verify_chain() == []
