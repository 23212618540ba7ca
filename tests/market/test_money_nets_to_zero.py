"""A completed purchase's money nets to zero, or PostgreSQL refuses the transaction at commit
(docs/money.md#a-purchase-nets-to-zero).

The trigger is deferred: it runs at commit, which a test's rolled-back transaction never reaches, so these
tests make the pending checks run with ``SET CONSTRAINTS ALL IMMEDIATE``.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from accounts.models import MoneyAccount, MoneyEntry
from market.models import Purchase
from market.purchases import execution
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _check_now() -> None:
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")


def _completed_purchase() -> Purchase:
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    contribute(attribute, ["red", "green", "blue"] * 4, ceiling="2")
    buyer = BuyerFactory()
    fund(buyer, "100")
    claimed, _ = execution.purchase_claim(buyer=buyer, attribute=attribute, epsilon="1", cohort=None,
                                          idempotency_key="nets-to-zero")
    purchase = execution.purchase_execute(purchase_id=claimed.id)
    assert purchase.status == Purchase.Status.COMPLETED and purchase.price > 0
    return purchase


def test_a_real_purchase_nets_to_zero_and_passes_the_check():
    purchase = _completed_purchase()
    assert MoneyEntry.objects.filter(purchase=purchase).count() >= 3  # the buyer, the platform, the owners
    _check_now()  # the pending check of the completed purchase runs now, and passes


def test_a_completed_purchase_whose_money_does_not_net_to_zero_is_refused():
    purchase = _completed_purchase()
    _check_now()
    account = MoneyAccount.objects.get(user=purchase.buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    with pytest.raises(IntegrityError, match=f"money entries of purchase {purchase.id} sum to"):
        with transaction.atomic():
            MoneyEntry.objects.create(account=account, purchase=purchase, amount=Decimal("0.01"),
                                      balance_after=account.balance + Decimal("0.01"), memo="a stray cent",
                                      kind=MoneyEntry.Kind.ADJUSTMENT)
            Purchase.objects.filter(id=purchase.id).update(status=Purchase.Status.COMPLETED)


def test_the_check_is_deferred_to_the_end_of_the_transaction():
    """Inside the transaction money may be mid-way (the entries are written before or after the status): only
    the state at commit counts."""
    purchase = _completed_purchase()
    _check_now()
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL DEFERRED")
    account = MoneyAccount.objects.get(user=purchase.buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    with transaction.atomic():
        Purchase.objects.filter(id=purchase.id).update(status=Purchase.Status.COMPLETED)
        MoneyEntry.objects.create(account=account, purchase=purchase, amount=Decimal("0.01"),
                                  balance_after=account.balance + Decimal("0.01"), memo="in", kind="adjustment")
        MoneyEntry.objects.create(account=account, purchase=purchase, amount=Decimal("-0.01"),
                                  balance_after=account.balance, memo="out", kind="adjustment")
    _check_now()  # nets to zero again by the end: accepted
