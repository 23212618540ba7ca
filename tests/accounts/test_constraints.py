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
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone as djtz

from accounts.ledger import hashchain as ledger
from accounts.models import (
    BudgetAccount,
    LedgerBlock,
    LedgerEntry,
    LedgerEvent,
    LedgerHead,
    LedgerRelease,
    MoneyAccount,
    MoneyEntry,
    User,
)
from accounts.services import budget_set_paused
from market.models import Purchase
from tests.factories import BuyerFactory, OwnerFactory, contribute
from tests.ledger_checks import hash_chain_problems

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
    refused(lambda: BudgetAccount.objects.create(value_id=b.value_id, attribute_id=b.attribute_id, ceiling=1))


# ---------------------------------------------------------------------------------------------
# Ledger
# ---------------------------------------------------------------------------------------------

def _block() -> LedgerBlock:
    n = LedgerBlock.objects.count()  # a shard of its own: a second block after genesis in one shard is a fork
    return LedgerBlock.objects.create(shard=10**6 + n, prev_hash=ledger.GENESIS, hash=f"{n:064x}", entry_count=1,
                                      created_at=djtz.now())


def _entry(value_id, **fields):
    """A ledger event row (budget events; releases written before the compact ledger were such rows too:
    the per-entry CHECKs still state the release rules)."""
    block = _block()
    base = dict(block=block, shard=block.shard, position=0, value_id=value_id, kind="ceiling", created_at=djtz.now(),
                epsilon=None, chain_loss_before=0, chain_loss_after=0, oneshot_loss_before=0, oneshot_loss_after=0,
                ceiling=1)
    return LedgerEvent.objects.create(**{**base, **fields})


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


# The compact releases: one row per purchase and chain block, the per-value columns as arrays (micro-epsilons).
# Both backends check the row's shape (count, value bounds, epsilon, guarantee); PostgreSQL also checks every
# value's losses against the release rules (``ledger_release_arrays_valid``, accounts/migrations/0013).

M = 1_000_000


@pytest.fixture
def release(categorical):
    """The fields of a valid compact chain release of three values (epsilon 0.5, ceiling 1, from no loss)."""
    vs = sorted(contribute(categorical, ["red", "green", "blue"], ceiling="1.0"), key=lambda v: v.id)
    purchase = Purchase.objects.create(buyer=BuyerFactory(), attribute=categorical, epsilon=D("0.5"),
                                       idempotency_key="compact")
    return dict(block=_block(), position=0, shard=categorical.id, purchase=purchase, kind="chain_release",
                guarantee="", epsilon=D("0.5"), created_at=djtz.now(), count=3, first_value=vs[0].id,
                last_value=vs[-1].id, value_ids=[v.id for v in vs], owner_ids=[v.owner_id for v in vs],
                chain_before=[0] * 3, chain_after=[M // 2] * 3, oneshot_before=[0] * 3, oneshot_after=[0] * 3,
                ceiling=[M] * 3, earnings=[100] * 3)


def _release(fields, **changes):
    return LedgerRelease.objects.create(**{**fields, **changes})


ONESHOT = dict(kind="oneshot_release", guarantee="ldp", chain_after=[0] * 3, oneshot_after=[M // 2] * 3)


def test_compact_release_valid_rows_are_accepted(release):
    accepted(lambda: _release(release))
    accepted(lambda: _release(release, position=3, chain_before=[M // 2, 7 * M // 10, 0],
                              chain_after=[M // 2, 7 * M // 10, M], earnings=None))  # at or below the chain loss
    accepted(lambda: _release(release, position=6, **ONESHOT))
    accepted(lambda: _release(release, position=9, **{**ONESHOT, "guarantee": "per_report_non_collusion",
                                                     "oneshot_before": [M // 2, 0, 0],
                                                     "oneshot_after": [M, M // 2, M // 2]}))
    v = release["value_ids"]
    accepted(lambda: _release(release, position=12, count=1, value_ids=v[1:2], first_value=v[1], last_value=v[1],
                              **{n: release[n][:1] for n in ("owner_ids", "chain_before", "chain_after",
                                                             "oneshot_before", "oneshot_after", "ceiling",
                                                             "earnings")}))
    assert LedgerRelease.objects.filter(block=release["block"]).count() == 5


@pytest.mark.parametrize("change", [
    dict(count=0),
    dict(epsilon=D("0")),
    dict(guarantee="uldp"),                                               # a chain release is epsilon-LDP at most
    dict(guarantee="per_report_non_collusion"),
    dict(ONESHOT, guarantee=""),                                          # a one-shot release names its guarantee
    dict(ONESHOT, guarantee="strong"),
    dict(kind="ceiling"),                                                 # only releases are stored compactly
], ids=repr)
def test_compact_release_rows_are_well_formed(release, change):
    accepted(lambda: _release(release))
    refused(lambda: _release(release, position=3, **change))


def test_compact_release_values_are_bounded(release):
    v = release["value_ids"]
    refused(lambda: _release(release, first_value=v[-1], last_value=v[0]))


def _swap(r):
    v = r["value_ids"]
    return dict(value_ids=[v[0], v[2], v[1]], last_value=v[1])


@pytest.mark.postgres
@pytest.mark.parametrize("change", [
    pytest.param(lambda r: dict(chain_before=[0, 6 * M // 10, 0]), id="chain loss goes down"),
    pytest.param(lambda r: dict(ONESHOT, oneshot_before=[0, M // 2, 0], oneshot_after=[M // 2, M // 4, M // 2]),
                 id="one-shot loss goes down"),
    pytest.param(lambda r: dict(ceiling=[M, M // 2 - 1, M]), id="ceiling below the chain loss after"),
    pytest.param(lambda r: dict(oneshot_before=[0, 3 * M // 10, 0], oneshot_after=[0, 3 * M // 10, 0],
                                ceiling=[M, 8 * M // 10 - 1, M]), id="ceiling below the chain + one-shot loss"),
    pytest.param(lambda r: dict(chain_after=[M // 2] * 2), id="chain_after shorter"),
    pytest.param(lambda r: dict(owner_ids=r["owner_ids"][:2]), id="owner_ids shorter"),
    pytest.param(lambda r: dict(ceiling=[M] * 4), id="ceiling longer"),
    pytest.param(lambda r: dict(earnings=[100] * 2), id="earnings shorter"),
    pytest.param(lambda r: dict(count=2, last_value=r["value_ids"][1]), id="count below the arrays' length"),
    pytest.param(_swap, id="value ids not increasing"),
    pytest.param(lambda r: dict(value_ids=[r["value_ids"][0]] * 2 + [r["value_ids"][2]]), id="a value twice"),
    pytest.param(lambda r: dict(first_value=r["value_ids"][0] - 1), id="first_value not the first value"),
    pytest.param(lambda r: dict(last_value=r["value_ids"][2] + 1), id="last_value not the last value"),
    pytest.param(lambda r: dict(chain_after=[M // 2, M // 2 - 1, M // 2]), id="chain loss after below epsilon"),
    pytest.param(lambda r: dict(oneshot_after=[0, 1, 0]), id="chain release adds one-shot loss"),
    pytest.param(lambda r: dict(ONESHOT, oneshot_after=[M // 2, 4 * M // 10, M // 2]),
                 id="one-shot release does not add its epsilon"),
    pytest.param(lambda r: dict(ONESHOT, chain_after=[0, 1, 0]), id="one-shot release adds chain loss"),
    pytest.param(lambda r: dict(chain_before=[-1, 0, 0]), id="negative loss before"),
    pytest.param(lambda r: dict(earnings=[100, -1, 100]), id="negative earnings"),
])
def test_compact_release_arrays_follow_the_release_rules(release, change):
    accepted(lambda: _release(release))
    refused(lambda: _release(release, position=3, **change(release)), "ledger_release_arrays_valid")


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
    entry = LedgerEntry.objects.filter(value_id=value_id).order_by("id").last()
    event = LedgerEvent.objects.get(block=entry.block, position=entry.id % ledger.ID_SHIFT)
    block = entry.block
    credit = MoneyAccount.objects.create(user=BuyerFactory(), kind="buyer_credit", balance=D("5"))
    money = MoneyEntry.objects.create(account=credit, amount=D("5"), balance_after=D("5"))
    append_only = r"append-only"
    refused(lambda: LedgerEvent.objects.filter(id=event.id).update(ceiling=D("9")), append_only)
    refused(lambda: LedgerEvent.objects.filter(id=event.id).delete(), append_only)
    refused(lambda: LedgerBlock.objects.filter(id=block.id).update(entry_count=7), append_only)
    refused(lambda: LedgerBlock.objects.filter(id=block.id).update(hash="f" * 64), append_only)
    refused(lambda: MoneyEntry.objects.filter(id=money.id).update(amount=D("500")), append_only)
    refused(lambda: MoneyEntry.objects.filter(id=money.id).delete(), append_only)

    def raw(sql):
        with connection.cursor() as cur:
            cur.execute(sql)

    refused(lambda: raw(f"UPDATE accounts_ledgerevent SET kind = 'resume' WHERE id = {event.id}"), append_only)
    refused(lambda: raw("DELETE FROM accounts_ledgerblock"), append_only)
    refused(lambda: raw("UPDATE accounts_moneyentry SET memo = 'edited'"), append_only)
    # appending still works, and the chain is intact
    budget_set_paused(value_id=value_id, paused=False)
    assert LedgerEntry.objects.get(id=entry.id).ceiling == entry.ceiling
    assert hash_chain_problems() == []


@pytest.mark.postgres
def test_compact_releases_refuse_update_and_delete(release):
    row = _release(release)
    append_only = r"append-only"
    refused(lambda: LedgerRelease.objects.filter(id=row.id).update(epsilon=D("0.4")), append_only)
    refused(lambda: LedgerRelease.objects.filter(id=row.id).update(chain_after=[M] * 3), append_only)
    refused(lambda: LedgerRelease.objects.filter(id=row.id).delete(), append_only)
    with connection.cursor() as cur:
        for sql in (f"UPDATE accounts_ledgerrelease SET count = 2 WHERE id = {row.id}",
                    f"UPDATE accounts_ledgerrelease SET earnings = NULL WHERE id = {row.id}",
                    "DELETE FROM accounts_ledgerrelease"):
            refused(lambda: cur.execute(sql), append_only)
    # appending still works
    accepted(lambda: _release(release, position=3))
    stored = LedgerRelease.objects.get(id=row.id)
    assert (stored.epsilon, stored.count, stored.chain_after.tolist(), stored.earnings.tolist()) == (
        D("0.5"), 3, [M // 2] * 3, [100] * 3)
    assert list(LedgerEntry.objects.filter(block=release["block"]).values_list("chain_loss_after", flat=True)) == [
        D("0.5")] * 6


def test_the_ledger_view_is_read_only(release):
    """``LedgerEntry`` is a view over the events and the compact releases: nobody writes through it."""
    _release(release)
    entry = LedgerEntry.objects.filter(block=release["block"]).order_by("id").first()
    assert entry.id == release["block"].id * ledger.ID_SHIFT and entry.value_id == release["value_ids"][0]
    for write in (lambda: LedgerEntry.objects.filter(id=entry.id).update(ceiling=D("9")),
                  lambda: LedgerEntry.objects.filter(id=entry.id).delete(),
                  lambda: LedgerEntry.objects.create(id=entry.id + 7, block=entry.block, value_id=entry.value_id,
                                                     kind="ceiling", created_at=djtz.now(), chain_loss_before=0,
                                                     chain_loss_after=0, oneshot_loss_before=0,
                                                     oneshot_loss_after=0, ceiling=1)):
        with pytest.raises(DatabaseError), transaction.atomic():
            write()
    assert LedgerEntry.objects.filter(block=release["block"]).count() == 3
