"""Atomic charging of one-shot releases under concurrency (docs/budget-rules.md#budgets-and-ceilings,
docs/quality-targets.md#reliability): real threads, real PostgreSQL connections.

Several buyers run one-shot purchases (uRR) at once over values whose ceilings admit only some of them, while
others run chain purchases and surveys over one binary attribute (chain and one-shot losses on the same
budgets).  Afterwards: no loss above its ceiling, every budget's oneshot_loss is the sum of its one-shot ledger
entries, every exclusion was forced by the ceiling (the final loss leaves no room for it), the ledger verifies,
the money adds up and the audit passes.
"""
from __future__ import annotations

import uuid
from decimal import Decimal as D

import pytest
from django.db.models import Sum

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, User
from audit.budget_audit import audit_budgets
from ldpmarket import problems
from market.models import Attribute, Dataset, Purchase
from market.purchases import execution as purchases
from market.purchases import oneshot, oneshot_specs
from market.purchases.pricing import DEFAULT_POLICY
from market.values import services
from tests.ledger_checks import hash_chain_problems
from tests.market.test_purchase_concurrency import run_concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CEILINGS = ["0.5", "1.0", "1.5", "2.2"]
ONESHOT_EPSILONS = ["0.4", "0.3", "0.5", "0.2"]


@pytest.fixture
def setup():
    dataset = Dataset.objects.create(title="one-shot concurrency")
    urr = Attribute.objects.create(dataset=dataset, name="place", kind="categorical", mechanism="urr",
                                   labels=["a", "b", "c", "d"], sensitive=["a"], pum_tags=["home"],
                                   price_policy=DEFAULT_POLICY)
    binary = Attribute.objects.create(dataset=dataset, name="member", kind="binary", labels=["no", "yes"],
                                      price_policy=DEFAULT_POLICY)
    for i, ceiling in enumerate(CEILINGS):
        owners = [User.objects.create(username=f"o-{i}-{j}", role="owner") for j in range(10)]
        services.values_create_many(attribute=urr, owners=owners, raws=["a", "b", "c", "d"] * 2 + ["a", "b"],
                                    ceiling=ceiling)
        services.values_create_many(attribute=binary, owners=owners, raws=["yes", "no"] * 5, ceiling=ceiling)
    buyers = [User.objects.create(username=f"b-{k}", role="buyer") for k in range(6)]
    for b in buyers:
        account = MoneyAccount.objects.create(user=b, kind="buyer_credit", balance=D("50"))
        MoneyEntry.objects.create(account=account, amount=D("50"), balance_after=D("50"), memo="top-up")
    return urr, binary, buyers


def test_concurrent_oneshot_purchases_surveys_and_chain_purchases_never_overspend(setup):
    urr, binary, buyers = setup

    def oneshot_buyer(buyer, k):
        def job():
            for j, eps in enumerate(ONESHOT_EPSILONS[k:] + ONESHOT_EPSILONS[:k]):
                spec = oneshot_specs.parse_spec(urr, epsilon=eps)
                p, _ = oneshot.oneshot_claim(buyer=buyer, attribute=urr, spec=spec, cohort=None,
                                             idempotency_key=f"u-{j}")
                purchases.purchase_execute(purchase_id=p.id)
        return job

    def mixed_buyer(buyer, k):
        def job():
            for j in range(3):
                if (j + k) % 2:
                    p, _ = purchases.purchase_claim(buyer=buyer, attribute=binary, epsilon=["0.4", "0.7", "1.1"][j],
                                                    cohort=None, idempotency_key=f"c-{j}")
                    purchases.purchase_execute(purchase_id=p.id)
                else:
                    mech = ["warner", "improved_christofides", "christofides"][j]
                    extra = {"p2": "0.1"} if "christofides" in mech else {}
                    spec = oneshot_specs.parse_spec(binary, mechanism=mech, epsilon="0.3", **extra)
                    p, _ = oneshot.oneshot_claim(buyer=buyer, attribute=binary, spec=spec, cohort=None,
                                                 idempotency_key=f"s-{j}")
                    try:
                        purchases.purchase_execute(purchase_id=p.id)
                    except problems.TooFewRespondents:
                        pass
        return job

    jobs = [oneshot_buyer(b, k) for k, b in enumerate(buyers[:3])] + [mixed_buyer(b, k) for k, b in
                                                                         enumerate(buyers[3:])]
    assert run_concurrently(jobs) == []

    done = Purchase.objects.filter(status="completed")
    assert done.filter(attribute=urr).count() == 3 * len(ONESHOT_EPSILONS)
    for b in BudgetAccount.objects.all():
        assert b.chain_loss + b.oneshot_loss <= b.ceiling
    # oneshot_loss is the sum of the value's one-shot releases; the ledger agrees with the budgets
    sums = dict(LedgerEntry.objects.filter(kind="oneshot_release").values("value_id")
                .annotate(s=Sum("epsilon")).values_list("value_id", "s"))
    for b in BudgetAccount.objects.all():
        assert b.oneshot_loss == sums.get(b.value_id, D(0))
    # every exclusion by the ceiling or the remaining budget was forced: with the final losses there is still no
    # room for it
    final = {b.value_id: (b.chain_loss, b.oneshot_loss, b.ceiling)
             for b in BudgetAccount.objects.filter(value__attribute=urr)}
    for p in done.filter(attribute=urr):
        released = set(LedgerEntry.objects.filter(purchase=p).values_list("value_id", flat=True))
        assert p.included == len(released)
        assert p.included + p.excluded_ceiling + p.excluded_budget == p.candidates == 40
        for vid, (chain, one, ceiling) in final.items():
            if vid not in released:
                assert chain + one + p.charged_epsilon > ceiling
    # with ceilings 0.5/1.0/1.5/2.2 and 3 x (0.4+0.3+0.5+0.2) = 4.2 demanded, some but not all got in
    counts = [p.included for p in done.filter(attribute=urr)]
    assert min(counts) < 40 and max(counts) > 0
    assert hash_chain_problems() == []
    assert MoneyAccount.objects.aggregate(s=Sum("balance"))["s"] == D("50") * len(buyers)
    for account in MoneyAccount.objects.all():
        assert MoneyEntry.objects.filter(account=account).aggregate(s=Sum("amount"))["s"] == account.balance
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_concurrent_replays_of_one_oneshot_key_charge_once(setup):
    urr, _, buyers = setup
    buyer = buyers[0]
    spec = oneshot_specs.parse_spec(urr, epsilon="0.4")
    results = []

    def replay():
        p, created = oneshot.oneshot_claim(buyer=buyer, attribute=urr, spec=spec, cohort=None,
                                           idempotency_key="same-key")
        results.append((p.id, created, purchases.purchase_execute(purchase_id=p.id).price))

    assert run_concurrently([replay] * 6) == []
    assert len({r[0] for r in results}) == 1 and sum(r[1] for r in results) == 1
    purchase = Purchase.objects.get(buyer=buyer)
    assert LedgerEntry.objects.filter(kind="oneshot_release").count() == purchase.included == 40
    assert set(BudgetAccount.objects.filter(value__attribute=urr).values_list("oneshot_loss", flat=True)) == {D("0.4")}
    assert MoneyAccount.objects.get(user=buyer, kind="buyer_credit").balance == D("50") - purchase.price
    assert uuid.UUID(int=0)  # (keys are free-form; UUIDs are what clients send)
