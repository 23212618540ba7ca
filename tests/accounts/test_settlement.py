"""Owners' earnings settled in batches (docs/money.md#settlement): ``accounts.money.services.earnings_settle``.

A purchase debits its buyer, credits its attribute's pending account (``owners_pending``) with the owners' shares
and records each value's share in the compact ledger rows; a settlement of the attribute covers the release rows
with ids in ``(after_release, through_release]``, credits each owner exactly the sum of their values' earnings
there and debits the pending account the total.  Here the expected earnings are computed independently, from
the price policies and what each buyer bought (an upgrade pays only the difference), and compared exactly.

On PostgreSQL also: a settlement and purchases of the same attribute at once (real threads), a settlement waiting
for a purchase that holds the pending account, ``UNIQUE (shard, after_release)`` refusing a second settlement of
the same rows when the lock is bypassed, the deferred trigger that a settlement's money nets to zero, and the
append-only settlement table.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

import numpy as np
import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from accounts.ledger import hashchain as ledger
from accounts.models import LedgerEntry, LedgerRelease, MoneyAccount, MoneyEntry, Settlement
from accounts.money import services as money
from accounts.money.purchase import move_money
from accounts.money.services import release_earnings
from audit.budget_audit import audit_budgets
from ldpmarket import jobs
from market import tasks
from market.models import Purchase, Value
from market.purchases import execution as purchases
from market.purchases.pricing import PricePolicy
from market.values.services import values_create_many
from tests.audit.conftest import buy
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund, make_owners
from tests.ledger_checks import hash_chain_problems
from tests.market.test_purchase_concurrency import run_concurrently

D = Decimal
UNIT = D("0.0001")
#: Prices with awkward digits: owners' shares are rounded down per value, so sums must be exact in units.
POLICY_A = {"points": [["0", "0"], ["1", "0.0123"], ["10", "0.0517"]], "owner_share": "0.77"}
POLICY_B = {"points": [["0", "0"], ["2", "0.0333"]], "owner_share": "0.9"}
FREE = {"points": [["0", "0"]], "owner_share": "0.8"}
#: 0.0001 per value: the owners' share (0.8 of one unit) rounds down to nothing, the platform keeps it all.
CRUMB = {"points": [["0", "0.0001"]], "owner_share": "0.8"}
LABELS = ["red", "green", "blue"]


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------

def share(policy: dict, epsilon, held=None) -> Decimal:
    """An owner's share of one value bought at ``epsilon`` by a buyer who held it at ``held`` (None: not held),
    computed in Decimal from the policy: the price difference times the owner share, rounded down to a unit."""
    p = PricePolicy.parse(policy)
    e = D(str(epsilon))
    paid = p.price(e) - (p.price(min(D(str(held)), e)) if held is not None else 0)
    return (max(paid, D(0)) * p.owner_share).quantize(UNIT, rounding=ROUND_FLOOR)


class Expected:
    """What each owner should earn, from what each buyer bought (every value of the attribute is included: the
    ceilings admit every epsilon bought)."""

    def __init__(self):
        self.by_owner: dict[int, Decimal] = defaultdict(lambda: D(0))
        self.by_shard: dict[int, Decimal] = defaultdict(lambda: D(0))
        self.held: dict[tuple[int, int], str] = {}

    def bought(self, buyer, attribute, epsilon, values) -> None:
        for v in values:
            key = (buyer.id, v.id)
            s = share(attribute.price_policy, epsilon, self.held.get(key))
            self.by_owner[v.owner_id] += s
            self.by_shard[attribute.id] += s
            held = self.held.get(key)
            self.held[key] = epsilon if held is None or D(epsilon) > D(held) else held


def earnings_of(user_id) -> Decimal:
    account = MoneyAccount.objects.filter(user_id=user_id, kind=MoneyAccount.Kind.OWNER_EARNINGS).first()
    return account.balance if account else D(0)


def pending_of(attribute) -> MoneyAccount:
    return MoneyAccount.objects.get(kind=MoneyAccount.Kind.OWNERS_PENDING, shard=attribute.id)


def ledger_earnings_by_owner(attribute=None) -> dict[int, Decimal]:
    """Each owner's recorded earnings in the ledger's per-value view (the value's owner, not the row's)."""
    qs = LedgerEntry.objects.filter(kind__in=LedgerEntry.RELEASE_KINDS, earning__isnull=False)
    if attribute is not None:
        qs = qs.filter(value__attribute=attribute)
    owners = dict(Value.objects.values_list("id", "owner_id"))
    got: dict[int, Decimal] = defaultdict(lambda: D(0))
    for value_id, earning in qs.values_list("value_id", "earning"):
        got[owners[value_id]] += earning
    return got


def held() -> Decimal:
    """What all accounts hold (summed in Decimal here: SQLite's SUM of decimals is a float's)."""
    return sum(MoneyAccount.objects.values_list("balance", flat=True))


def rows_of(attribute):
    return LedgerRelease.objects.filter(shard=attribute.id)


def check_deferred() -> None:
    """PostgreSQL: run the deferred checks now (the settlement trigger), which a test's transaction never
    reaches at commit."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cur.execute("SET CONSTRAINTS ALL DEFERRED")


def assert_audit_ok() -> None:
    report = audit_budgets()
    assert report.ok, report.as_text()


def assert_contiguous(attribute) -> list[Settlement]:
    """The attribute's settlements follow each other without gap or overlap from row 0."""
    settlements = list(Settlement.objects.filter(shard=attribute.id).order_by("after_release"))
    prev = 0
    for s in settlements:
        assert s.after_release == prev, [(x.after_release, x.through_release) for x in settlements]
        assert s.through_release > s.after_release
        prev = s.through_release
    return settlements


def covering(attribute) -> dict[int, int]:
    """How many settlements cover each release row of the attribute."""
    spans = list(Settlement.objects.filter(shard=attribute.id).values_list("after_release", "through_release"))
    return {r: sum(a < r <= t for a, t in spans) for r in rows_of(attribute).values_list("id", flat=True)}


# ---------------------------------------------------------------------------------------------------------------
# A market of two attributes, several buyers and owners
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Two:
    a: object
    b: object
    va: list
    vb: list
    buyers: list
    expected: Expected


@pytest.fixture
def two(db, settings) -> Two:
    """Two attributes (blocks of 8 values: several compact rows per purchase): 12 owners with a value in each,
    6 more with a value in the second only; three buyers buy both, one of them upgrades."""
    settings.LDP_CHAIN_BLOCK = 8
    rng = np.random.default_rng(11)
    a = CategoricalAttributeFactory(price_policy=POLICY_A)
    b = CategoricalAttributeFactory(price_policy=POLICY_B)
    both = make_owners(12, "both")
    only_b = make_owners(6, "only-b")
    va = values_create_many(attribute=a, owners=both, raws=list(rng.choice(LABELS, 12)), ceiling="5", rng=rng)
    vb = values_create_many(attribute=b, owners=both + only_b, raws=list(rng.choice(LABELS, 18)), ceiling="5",
                            rng=rng)
    buyers = [BuyerFactory() for _ in range(3)]
    for buyer in buyers:
        fund(buyer, "50")
    expected = Expected()
    plan = [(0, a, va, "0.7"), (1, a, va, "1.3"), (0, b, vb, "0.4"), (2, b, vb, "2.5"), (0, a, va, "3.1"),
            (1, b, vb, "1.1"), (2, a, va, "0.2"), (0, b, vb, "1.7")]  # buyer 0 upgrades in both attributes
    for k, attribute, values, eps in plan:
        p = buy(buyers[k], attribute, eps, rng)
        assert p.status == Purchase.Status.COMPLETED and p.included == len(values)
        expected.bought(buyers[k], attribute, eps, values)
    return Two(a, b, va, vb, buyers, expected)


def test_the_expected_earnings_are_what_the_ledger_records_and_the_pending_accounts_hold(two):
    """The independent computation agrees with the purchases' own records before anything is settled."""
    a, b, expected = two.a, two.b, two.expected
    assert ledger_earnings_by_owner() == {o: s for o, s in expected.by_owner.items() if s}
    for attribute in (a, b):
        assert pending_of(attribute).balance == expected.by_shard[attribute.id] > 0
        credits = MoneyEntry.objects.filter(account=pending_of(attribute), purchase__isnull=False)
        assert sum(credits.values_list("amount", flat=True)) == expected.by_shard[attribute.id]
    assert not MoneyAccount.objects.filter(kind=MoneyAccount.Kind.OWNER_EARNINGS).exists()  # nobody paid yet
    assert_audit_ok()


def test_a_settlement_credits_each_owner_exactly_their_values_earnings(two):
    a, b, va, vb, expected = two.a, two.b, two.va, two.vb, two.expected
    assert_audit_ok()
    total_before = held()
    for attribute, values in ((a, va), (b, vb)):
        per_owner = ledger_earnings_by_owner(attribute)
        s = money.earnings_settle(shard=attribute.id)
        rows = rows_of(attribute)
        assert (s.shard, s.after_release, s.through_release, s.releases) == (
            attribute.id, 0, rows.aggregate(m=Max("id"))["m"], rows.count())
        assert s.releases > Purchase.objects.filter(attribute=attribute).count()  # several rows per purchase
        assert s.amount == expected.by_shard[attribute.id] and s.owners == len(values)
        assert pending_of(attribute).balance == 0
        # one credit per owner, of exactly their values' earnings in this attribute; one debit of the total
        entries = MoneyEntry.objects.filter(settlement=s)
        credits = {e.account.user_id: e for e in entries.select_related("account") if e.amount > 0}
        assert {u: e.amount for u, e in credits.items()} == per_owner
        assert {(e.kind, e.account.kind) for e in credits.values()} == {("earning", "owner_earnings")}
        [debit] = [e for e in entries.select_related("account") if e.amount < 0]
        assert (debit.account_id, debit.amount, debit.kind, debit.balance_after) == (
            pending_of(attribute).id, -s.amount, "settlement", D(0))
        assert entries.filter(purchase__isnull=False).count() == 0
    check_deferred()
    # across both attributes: each owner holds the exact sum of their values' shares (Decimal, to the unit)
    owners = {v.owner_id for v in va + vb}
    assert {o: earnings_of(o) for o in owners} == {o: expected.by_owner[o] for o in owners}
    assert all(expected.by_owner[o] > 0 for o in owners)
    for o in {v.owner_id for v in va}:  # an owner with a value in each attribute: one credit per settlement
        lines = list(MoneyEntry.objects.filter(settlement__isnull=False, account__user_id=o)
                     .values_list("amount", flat=True))
        assert len(lines) == 2 and sum(lines) == earnings_of(o)
    assert held() == total_before  # money only moved
    assert_audit_ok()


def test_settling_again_finds_nothing_and_writes_nothing(two):
    a = two.a
    assert money.earnings_settle(shard=a.id) is not None
    state = (Settlement.objects.count(), MoneyEntry.objects.count(),
             list(MoneyAccount.objects.order_by("id").values_list("id", "balance")))
    assert money.earnings_settle(shard=a.id) is None
    assert money.earnings_settle(shard=a.id, max_rows=1) is None
    assert (Settlement.objects.count(), MoneyEntry.objects.count(),
            list(MoneyAccount.objects.order_by("id").values_list("id", "balance"))) == state
    # an attribute nobody bought from has no pending account: nothing to settle either
    assert money.earnings_settle(shard=CategoricalAttributeFactory().id) is None
    assert money.earnings_settle(shard=10**9) is None
    assert Settlement.objects.count() == state[0]


def test_max_rows_splits_into_settlements_that_follow_each_other_and_add_up(two):
    a, b, va, vb, expected = two.a, two.b, two.va, two.vb, two.expected
    n_a, n_b = rows_of(a).count(), rows_of(b).count()
    assert n_a >= 8 and n_b >= 8
    made = []
    while (s := money.earnings_settle(shard=a.id, max_rows=3)) is not None:
        made.append(s)
        assert s.releases <= 3
        assert rows_of(a).filter(id__gt=s.after_release, id__lte=s.through_release).count() == s.releases
    assert len(made) == -(-n_a // 3) and sum(s.releases for s in made) == n_a
    assert assert_contiguous(a) == made
    assert made[-1].through_release == rows_of(a).aggregate(m=Max("id"))["m"]
    assert sum(s.amount for s in made) == expected.by_shard[a.id]
    assert set(covering(a).values()) == {1}
    # settle_all batches every attribute the same way: b in batches of 5
    assert money.settle_all(max_rows=5) == -(-n_b // 5)
    assert sum(s.releases for s in assert_contiguous(b)) == n_b
    assert set(covering(b).values()) == {1}
    check_deferred()
    assert {v.owner_id: earnings_of(v.owner_id) for v in va + vb} == {
        v.owner_id: expected.by_owner[v.owner_id] for v in va + vb}
    assert pending_of(a).balance == pending_of(b).balance == 0
    assert_audit_ok()


def test_settlements_between_purchases_continue_where_the_last_stopped(two):
    """Settle, buy more, settle: the next settlement starts at the previous one's last row and pays only the new
    earnings."""
    a, va, buyers = two.a, two.va, two.buyers
    first = money.earnings_settle(shard=a.id)
    paid = {v.owner_id: earnings_of(v.owner_id) for v in va}
    rng = np.random.default_rng(3)
    buy(buyers[2], a, "4", rng)  # buyer 2 held 0.2: an upgrade
    assert pending_of(a).balance > 0
    second = money.earnings_settle(shard=a.id)
    assert second.after_release == first.through_release
    assert second.through_release == rows_of(a).aggregate(m=Max("id"))["m"]
    for v in va:  # (b is not settled: only a's new earnings arrive)
        assert earnings_of(v.owner_id) - paid[v.owner_id] == share(POLICY_A, "4", "0.2")
    assert second.amount == share(POLICY_A, "4", "0.2") * len(va)
    assert pending_of(a).balance == 0
    assert_audit_ok()


@pytest.mark.parametrize("policy", [FREE, CRUMB], ids=["free", "owners' share rounds to nothing"])
def test_a_sale_without_owner_earnings_moves_no_money_and_the_next_one_settles_in_full(db, policy):
    attribute = CategoricalAttributeFactory(price_policy=policy)
    values = contribute(attribute, LABELS * 2, ceiling="3")
    buyer = BuyerFactory()
    fund(buyer, "5")
    rng = np.random.default_rng(1)
    p = buy(buyer, attribute, "1", rng)
    assert p.status == Purchase.Status.COMPLETED and p.included == 6
    assert pending_of(attribute).balance == 0
    assert set(LedgerEntry.objects.filter(purchase=p).values_list("earning", flat=True)) == {D(0)}
    entries, balances = MoneyEntry.objects.count(), list(MoneyAccount.objects.values_list("id", "balance"))
    s = money.earnings_settle(shard=attribute.id)
    # nothing to pay: no money moves and no owner account appears (a settlement of 0, if any, covers the rows)
    assert MoneyEntry.objects.count() == entries
    assert list(MoneyAccount.objects.values_list("id", "balance")) == balances
    assert not MoneyAccount.objects.filter(kind=MoneyAccount.Kind.OWNER_EARNINGS).exists()
    if s is not None:
        assert (s.amount, s.owners, s.after_release) == (0, 0, 0)
        assert s.through_release == rows_of(attribute).aggregate(m=Max("id"))["m"]
        assert money.earnings_settle(shard=attribute.id) is None
    check_deferred()
    assert_audit_ok()
    # the attribute's price goes up: the next sale's earnings are settled in full, none of them skipped
    attribute.price_policy = POLICY_A
    attribute.save(update_fields=["price_policy"])
    later = BuyerFactory()
    fund(later, "5")
    buy(later, attribute, "2", rng)
    owed = share(POLICY_A, "2")
    assert pending_of(attribute).balance == owed * 6 > 0
    nxt = money.earnings_settle(shard=attribute.id)
    assert nxt.after_release == (s.through_release if s is not None else 0)
    assert nxt.amount == owed * 6 and nxt.owners == 6
    assert {earnings_of(v.owner_id) for v in values} == {owed}
    assert pending_of(attribute).balance == 0
    check_deferred()
    assert_audit_ok()


def test_rows_without_recorded_earnings_are_covered_but_pay_nobody(db, monkeypatch):
    """Release rows written before earnings were recorded per value (``earnings`` NULL: those owners were paid at
    purchase time) are passed over: a settlement covers them and credits nothing for them.  Such a purchase is
    made here through the same services with the ledger helper given no earnings (as before the field existed)
    and, as then, nothing credited to the pending account for the owners."""
    attribute = CategoricalAttributeFactory(price_policy=POLICY_A)
    values = contribute(attribute, LABELS * 3, ceiling="3")
    old, new1, new2 = (BuyerFactory() for _ in range(3))
    for buyer in (old, new1, new2):
        fund(buyer, "5")
    rng = np.random.default_rng(2)
    buy(new1, attribute, "0.5", rng)
    real_append, real_move = ledger.append, move_money

    def append_without_earnings(rows, *, shard):
        rows.earning = None
        return real_append(rows, shard=shard)

    with monkeypatch.context() as m:
        m.setattr(ledger, "append", append_without_earnings)
        m.setattr(purchases, "move_money", lambda p, acc, charge, owner_share: real_move(
            p, acc, charge, np.zeros_like(owner_share)))
        legacy = buy(old, attribute, "2", rng)
    buy(new2, attribute, "1", rng)
    assert legacy.price > 0
    legacy_rows = LedgerRelease.objects.filter(purchase=legacy)
    assert legacy_rows.exists() and all(r.earnings is None for r in legacy_rows)
    assert set(LedgerEntry.objects.filter(purchase=legacy).values_list("earning", flat=True)) == {None}
    owed = share(POLICY_A, "0.5") + share(POLICY_A, "1")
    assert pending_of(attribute).balance == owed * 9
    assert_audit_ok()

    # the reader passes over the unrecorded values: every row is counted, only recorded values come back
    through, n, owners, earnings = release_earnings(shard=attribute.id, after=0, max_rows=100)
    assert (through, n) == (rows_of(attribute).aggregate(m=Max("id"))["m"], rows_of(attribute).count())
    assert owners.size == earnings.size == 18
    assert sorted(owners.tolist()) == sorted([v.owner_id for v in values] * 2)
    assert int(earnings.sum()) == int(owed * 9 / UNIT)
    # only the legacy rows: counted, nothing to pay
    first = legacy_rows.order_by("id").first().id
    through, n, owners, earnings = release_earnings(shard=attribute.id, after=first - 1,
                                                           max_rows=legacy_rows.count())
    assert (through, n, owners.size, earnings.size) == (legacy_rows.aggregate(m=Max("id"))["m"],
                                                         legacy_rows.count(), 0, 0)

    s = money.earnings_settle(shard=attribute.id)
    assert s.releases == rows_of(attribute).count() and s.amount == owed * 9 and s.owners == 9
    assert {earnings_of(v.owner_id) for v in values} == {owed}
    assert pending_of(attribute).balance == 0
    check_deferred()
    assert_audit_ok()


def test_settlements_are_unique_per_starting_row_and_cover_a_range(two):
    """``UNIQUE (shard, after_release)`` and ``through_release > after_release`` on both databases."""
    a = two.a
    s = money.earnings_settle(shard=a.id)
    fields = {"shard": a.id, "releases": 1, "owners": 0, "amount": D(0), "created_at": timezone.now()}
    with pytest.raises(IntegrityError), transaction.atomic():
        Settlement.objects.create(after_release=0, through_release=s.through_release + 5, **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Settlement.objects.create(after_release=s.through_release, through_release=s.through_release, **fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Settlement.objects.create(after_release=s.through_release, through_release=s.through_release + 1,
                                  **{**fields, "amount": D("-0.0001")})
    assert Settlement.objects.filter(shard=a.id).count() == 1


# ---------------------------------------------------------------------------------------------------------------
# The tasks
# ---------------------------------------------------------------------------------------------------------------

def test_the_settle_earnings_task_settles_its_attribute(two):
    a, b, expected = two.a, two.b, two.expected
    assert tasks.settle_earnings(a.id) == 1
    assert pending_of(a).balance == 0 and pending_of(b).balance == expected.by_shard[b.id]
    assert Settlement.objects.get(shard=a.id).amount == expected.by_shard[a.id]
    assert not Settlement.objects.filter(shard=b.id).exists()
    assert tasks.settle_earnings(a.id) == 0  # idempotent
    assert Settlement.objects.filter(shard=a.id).count() == 1
    assert_audit_ok()


def test_the_settle_all_task_settles_every_attribute(two):
    a, b, va, vb, expected = two.a, two.b, two.va, two.vb, two.expected
    idle = CategoricalAttributeFactory()  # no sale, no pending account
    assert tasks.settle_all_earnings() == 2
    assert pending_of(a).balance == pending_of(b).balance == 0
    assert not Settlement.objects.filter(shard=idle.id).exists()
    assert {v.owner_id: earnings_of(v.owner_id) for v in va + vb} == {
        v.owner_id: expected.by_owner[v.owner_id] for v in va + vb}
    assert tasks.settle_all_earnings() == 0
    check_deferred()
    assert_audit_ok()


def test_a_purchase_enqueues_its_attributes_settlement_on_commit(db, django_capture_on_commit_callbacks):
    """The task a purchase enqueues (eager in the tests) settles its owners' earnings once it commits; a sale
    without owner earnings enqueues nothing."""
    attribute = CategoricalAttributeFactory(price_policy=POLICY_B)
    values = contribute(attribute, LABELS, ceiling="3")
    buyer = BuyerFactory()
    fund(buyer, "5")
    with django_capture_on_commit_callbacks(execute=True) as sent:
        buy(buyer, attribute, "1", np.random.default_rng(4))
    assert len(sent) == 1
    assert pending_of(attribute).balance == 0
    assert {earnings_of(v.owner_id) for v in values} == {share(POLICY_B, "1")}
    free = CategoricalAttributeFactory(price_policy=FREE)
    contribute(free, LABELS, ceiling="3")
    with django_capture_on_commit_callbacks(execute=False) as sent:
        buy(buyer, free, "1", np.random.default_rng(4))
    assert sent == []
    assert_audit_ok()


# ---------------------------------------------------------------------------------------------------------------
# PostgreSQL: the database's own guarantees
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture
def sold(db):
    """One sale of three values, its earnings not settled; returns the attribute, the owners and the pending
    account."""
    attribute = CategoricalAttributeFactory(price_policy=POLICY_A)
    values = contribute(attribute, LABELS, ceiling="3")
    buyer = BuyerFactory()
    fund(buyer, "5")
    buy(buyer, attribute, "1", np.random.default_rng(6))
    check_deferred()  # the purchase's own deferred checks, passed
    return attribute, [v.owner for v in values], pending_of(attribute)


def _forge(attribute, pending, owners, *, credits, debit, amount):
    """A settlement written by hand: ``credits`` to the owners, ``debit`` off the pending account."""
    s = Settlement.objects.create(shard=attribute.id, after_release=0,
                                  through_release=rows_of(attribute).aggregate(m=Max("id"))["m"], releases=1,
                                  owners=len(credits), amount=amount, created_at=timezone.now())
    for owner, credit in zip(owners, credits):
        account, _ = MoneyAccount.objects.get_or_create(user=owner, kind=MoneyAccount.Kind.OWNER_EARNINGS)
        MoneyEntry.objects.create(account=account, settlement=s, amount=credit, balance_after=credit, kind="earning")
    if debit is not None:
        MoneyEntry.objects.create(account=pending, settlement=s, amount=-debit, balance_after=pending.balance - debit,
                                  kind="settlement")
    return s


@pytest.mark.postgres
@pytest.mark.parametrize("credits, debit, amount", [
    pytest.param([D("0.01")], None, D("0.01"), id="an owner credited, the pending account not debited"),
    pytest.param([D("0.01"), D("0.01")], D("0.01"), D("0.01"), id="owners credited more than the debit"),
    pytest.param([D("0.01")], D("0.01"), D("0.02"), id="nets to zero but debits less than its amount"),
    pytest.param([D("0.01")], D("0.01"), D("0.005"), id="nets to zero but debits more than its amount"),
    pytest.param([], None, D("0.01"), id="an amount and no money at all"),
])
def test_postgres_refuses_a_settlement_whose_money_does_not_net_to_zero(sold, credits, debit, amount):
    attribute, owners, pending = sold
    with pytest.raises(IntegrityError, match="money entries of settlement"), transaction.atomic():
        s = _forge(attribute, pending, owners, credits=credits, debit=debit, amount=amount)
        assert s.id  # written: only the deferred check refuses it
        check_deferred()
    assert not Settlement.objects.exists()


@pytest.mark.postgres
def test_postgres_accepts_a_balanced_settlement_and_checks_only_at_the_end(sold):
    attribute, owners, pending = sold
    with transaction.atomic():
        s = _forge(attribute, pending, owners[:2], credits=[D("0.003"), D("0.004")], debit=None, amount=D("0.007"))
        # mid-way (not netting yet) is fine: the check is deferred to the end of the transaction
        MoneyEntry.objects.create(account=pending, settlement=s, amount=D("-0.007"),
                                  balance_after=pending.balance - D("0.007"), kind="settlement")
        check_deferred()
    assert Settlement.objects.get().amount == D("0.007")


@pytest.mark.postgres
def test_postgres_settlements_are_append_only(sold):
    attribute, _, _ = sold
    s = money.earnings_settle(shard=attribute.id)
    check_deferred()
    for write in (lambda: Settlement.objects.filter(id=s.id).update(amount=D(0)),
                  lambda: Settlement.objects.filter(id=s.id).update(through_release=s.through_release + 1),
                  lambda: MoneyEntry.objects.filter(settlement=s).update(amount=D(0))):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            write()
    with connection.cursor() as cur:
        for statement in (f"UPDATE accounts_settlement SET after_release = 7 WHERE id = {s.id}",
                          f"DELETE FROM accounts_settlement WHERE id = {s.id}", "DELETE FROM accounts_settlement"):
            with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
                cur.execute(statement)
    stored = Settlement.objects.get(id=s.id)
    assert (stored.amount, stored.after_release, stored.through_release) == (s.amount, 0, s.through_release)
    assert_audit_ok()


# ---------------------------------------------------------------------------------------------------------------
# PostgreSQL: settlements and purchases at once (real threads, real connections)
# ---------------------------------------------------------------------------------------------------------------

CONCURRENT_POLICY = {"points": [["0", "0"], ["1", "0.0137"], ["4", "0.0731"]], "owner_share": "0.83"}


@pytest.fixture
def shop(settings):
    """24 values in blocks of 8, four funded buyers (committed: the threads see them)."""
    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory(price_policy=CONCURRENT_POLICY)
    values = contribute(attribute, LABELS * 8, ceiling="5")
    buyers = [BuyerFactory() for _ in range(4)]
    for buyer in buyers:
        fund(buyer, "20")
    return attribute, values, buyers


def _purchase(buyer, attribute, epsilon, **kwargs):
    p, _ = purchases.purchase_claim(buyer=buyer, attribute=attribute, epsilon=epsilon, cohort=None,
                                    idempotency_key=uuid.uuid4().hex)
    return purchases.purchase_execute(purchase_id=p.id, **kwargs)


def _settled_exactly_once(attribute, values, expected: Expected) -> None:
    money.settle_all()
    assert_contiguous(attribute)
    recorded = [r.id for r in rows_of(attribute) if r.earnings is not None]
    cover = covering(attribute)
    assert recorded and {cover[r] for r in recorded} == {1}, cover
    assert pending_of(attribute).balance == 0
    assert sum(Settlement.objects.filter(shard=attribute.id).values_list("amount", flat=True)) == \
        expected.by_shard[attribute.id]
    assert {v.owner_id: earnings_of(v.owner_id) for v in values} == {
        v.owner_id: expected.by_owner[v.owner_id] for v in values}
    assert hash_chain_problems() == []
    assert_audit_ok()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_settlements_and_purchases_of_one_attribute_at_once_settle_every_earning_once(shop):
    """Four buyers buy (each purchase enqueues its settlement, run on its commit) while two more threads settle
    the same attribute over and over; a final settlement leaves every earning settled exactly once."""
    attribute, values, buyers = shop
    epsilons = ["0.3", "0.9", "1.6", "2.4", "3.5"]
    expected = Expected()
    lock = threading.Lock()
    made = []
    shopping = threading.Semaphore(0)  # released once per shopper that is done

    def shopper(k):
        def job():
            try:
                for j, eps in enumerate(epsilons[k % 2:] + epsilons[:k % 2]):
                    p = _purchase(buyers[k], attribute, eps)
                    assert p.status == Purchase.Status.COMPLETED and p.included == len(values)
                    with lock:
                        expected.bought(buyers[k], attribute, eps, values)
            finally:
                shopping.release()
        return job

    done = []

    def settler():
        # settle over and over while the shoppers buy (not a fixed number of times: on a loaded machine the
        # purchases may not have started when a fixed count ran out)
        rounds = 0
        while rounds < 30 or len(done) < len(buyers):
            s = money.earnings_settle(shard=attribute.id, max_rows=2)
            if s is not None:
                with lock:
                    made.append(s.id)
            while shopping.acquire(blocking=False):
                done.append(1)
            rounds += 1
            time.sleep(0.002)

    assert run_concurrently([shopper(k) for k in range(len(buyers))] + [settler, settler]) == []
    assert made, "the settling threads never found anything to settle"
    _settled_exactly_once(attribute, values, expected)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_settlement_waits_for_a_purchase_holding_the_pending_account(shop, monkeypatch):
    """Deterministic interleaving: purchase A pauses at its end, inside its transaction (its ledger rows and its
    pending credit written, not committed); a settlement of the same attribute must wait for the pending account,
    then settle A's earnings too.  Without the lock it would settle without A's rows and write back a pending
    balance from before A's credit (a lost update: earnings that no settlement could ever pay)."""
    attribute, values, buyers = shop
    real_enqueue = jobs.enqueue
    monkeypatch.setattr(jobs, "enqueue", lambda name, *args: None if name == jobs.SETTLE_EARNINGS
                        else real_enqueue(name, *args))
    expected = Expected()
    _purchase(buyers[0], attribute, "0.8")  # committed, not settled
    expected.bought(buyers[0], attribute, "0.8", values)
    a_paused, a_release, settled = threading.Event(), threading.Event(), threading.Event()
    got = []

    def pause(done, total):
        if done == total:  # the end of the purchase: every write done, every lock held
            a_paused.set()
            assert a_release.wait(30)

    def purchase_a():
        _purchase(buyers[1], attribute, "1.9", progress=pause)

    def settle():
        assert a_paused.wait(30)
        got.append(money.earnings_settle(shard=attribute.id))
        settled.set()

    def referee():
        assert a_paused.wait(30)
        assert not settled.wait(1.5), "the settlement ran while a purchase held the pending account"
        a_release.set()

    assert run_concurrently([purchase_a, settle, referee]) == []
    expected.bought(buyers[1], attribute, "1.9", values)
    [s] = got
    assert s.through_release == rows_of(attribute).aggregate(m=Max("id"))["m"]  # A's rows included
    assert s.amount == expected.by_shard[attribute.id]
    assert pending_of(attribute).balance == 0
    assert money.earnings_settle(shard=attribute.id) is None
    _settled_exactly_once(attribute, values, expected)


class _Unlocked:
    """``MoneyAccount`` for ``accounts.money`` with ``select_for_update`` a no-op: the pending account's lock
    bypassed, as a buggy settlement would."""

    Kind = MoneyAccount.Kind
    _meta = MoneyAccount._meta

    class objects:  # stands for the manager
        @staticmethod
        def select_for_update(*args, **kwargs):
            return MoneyAccount.objects.all()

        @staticmethod
        def filter(*args, **kwargs):
            return MoneyAccount.objects.filter(*args, **kwargs)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_the_lock_two_settlements_of_the_same_rows_cannot_both_commit(shop, monkeypatch):
    """Two settlements compute from the same watermark at once (the pending account's lock bypassed, both have
    read the same rows before either writes): ``UNIQUE (shard, after_release)`` refuses the second, whose
    transaction rolls back whole; every owner is paid once."""
    attribute, values, buyers = shop
    real_enqueue = jobs.enqueue
    monkeypatch.setattr(jobs, "enqueue", lambda name, *args: None if name == jobs.SETTLE_EARNINGS
                        else real_enqueue(name, *args))
    expected = Expected()
    for k, eps in enumerate(["0.6", "2.2"]):
        _purchase(buyers[k], attribute, eps)
        expected.bought(buyers[k], attribute, eps, values)
    read = threading.Barrier(2, timeout=30)
    real_read = release_earnings

    def read_then_meet(**kwargs):
        got = real_read(**kwargs)
        read.wait()  # both have computed their settlement from the same rows before either writes it
        return got

    monkeypatch.setattr(money, "MoneyAccount", _Unlocked)
    monkeypatch.setattr(money, "release_earnings", read_then_meet)
    results = []

    def settle():
        results.append(money.earnings_settle(shard=attribute.id))

    errors = run_concurrently([settle, settle])
    assert len(errors) == 1 and isinstance(errors[0], IntegrityError), errors
    assert "settlement_no_overlap" in str(errors[0])
    assert len(results) == 1 and results[0].after_release == 0
    monkeypatch.undo()
    assert Settlement.objects.filter(shard=attribute.id).count() == 1
    _settled_exactly_once(attribute, values, expected)
