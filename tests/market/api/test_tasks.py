"""The Celery task behind 202 purchases: market.tasks.run_purchase."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import OperationalError

from market import selectors
from market.models import Purchase
from market.purchases.execution import purchase_claim
from market.tasks import run_purchase
from tests.factories import BuyerFactory
from tests.market.api.conftest import credit, fund

pytestmark = pytest.mark.django_db


def claim(buyer, attribute, epsilon="1", key="k"):
    return purchase_claim(buyer=buyer, attribute=attribute, epsilon=epsilon, cohort=None, idempotency_key=key)[0]


def test_run_purchase_completes_and_is_idempotent(buyer, categorical):
    purchase = claim(buyer, categorical)
    assert run_purchase.delay(purchase.id).get() == "completed"
    purchase.refresh_from_db()
    assert purchase.status == "completed" and purchase.included == 60
    balance = credit(buyer)
    assert run_purchase.delay(purchase.id).get() == "completed"  # a redelivered message changes nothing
    assert credit(buyer) == balance
    assert run_purchase.delay(10 ** 9).get() == "missing"


def test_run_purchase_records_a_refusal(categorical):
    poor = BuyerFactory()
    fund(poor, "0.0001")
    purchase = claim(poor, categorical, "2", key="poor")
    assert run_purchase.delay(purchase.id).get() == "failed"
    purchase.refresh_from_db()
    assert purchase.status == "failed" and "credit" in purchase.error
    assert credit(poor) == Decimal("0.0001")


def test_run_purchase_reports_progress(buyer, categorical):
    purchase = claim(buyer, categorical)
    run_purchase.delay(purchase.id).get()
    assert selectors.progress_get(purchase.id) == {"processed": 60, "total": 60}


def test_database_errors_are_retried_then_recorded(buyer, categorical, monkeypatch):
    purchase = claim(buyer, categorical)
    calls = []

    def flaky(**kwargs):
        calls.append(1)
        raise OperationalError("connection lost")

    monkeypatch.setattr("market.purchases.execution.purchase_execute", flaky)  # what pipeline.purchase_run runs
    monkeypatch.setitem(run_purchase.app.conf, "task_eager_propagates", False)  # let eager retries chain
    result = run_purchase.apply(args=[purchase.id])
    assert isinstance(result.result, OperationalError)
    assert len(calls) == run_purchase.max_retries + 1
    purchase.refresh_from_db()
    assert purchase.status == Purchase.Status.FAILED and "database" in purchase.error


def test_eligible_count_agrees_with_the_purchase_rules(categorical):
    """The SQL count that sizes a purchase equals ``eligibility.candidates(...).eligible`` at every epsilon."""
    from django.utils import timezone

    from accounts.epsilon import to_micro
    from accounts.models import BudgetAccount
    from market.models import Value
    from market.purchases.eligibility import candidates

    values = list(Value.objects.filter(attribute=categorical).order_by("id"))
    BudgetAccount.objects.filter(value__in=values[:10]).update(ceiling=Decimal("0.75"), chain_loss=Decimal("0.5"))
    BudgetAccount.objects.filter(value__in=values[10:15]).update(chain_loss=Decimal("1.5"),
                                                                  oneshot_loss=Decimal("0.4"))
    BudgetAccount.objects.filter(value__in=values[15:20]).update(paused=True)
    Value.objects.filter(id__in=[v.id for v in values[20:23]]).update(withdrawn_at=timezone.now())
    for eps in ("0.1", "0.25", "0.5", "0.75", "0.750001", "1.5", "1.6", "1.600001", "2", "3"):
        cand = candidates(categorical, None, to_micro(Decimal(eps)), lock=False)
        assert selectors.eligible_count(categorical, None, Decimal(eps)) == (60, int(cand.eligible.sum())), eps
