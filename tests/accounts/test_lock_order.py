"""The global lock order as code (``accounts.locks``, docs/architecture.md#the-lock-order).

The suite runs with ``LDP_CHECK_LOCK_ORDER`` on, so every path it exercises is checked; these tests show that the
check is not vacuous: a later lock then an earlier one in one transaction is refused, a new transaction starts
afresh, a lock of one kind may be taken again, and a real inversion through the services is caught.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction

from accounts import services as budget_services
from accounts.locks import Lock, take
from ldpmarket.problems import LockOrderViolation
from market.values.services import values_create_many
from tests.factories import CategoricalAttributeFactory, make_owners

pytestmark = pytest.mark.django_db


def test_a_later_lock_then_an_earlier_one_is_refused():
    with transaction.atomic():
        take(Lock.BUDGETS)
        take(Lock.BUDGETS)  # the same kind again (rows of one kind are taken in id order)
        take(Lock.LEDGER_HEAD)
        with pytest.raises(LockOrderViolation, match="BUDGETS taken after LEDGER_HEAD"):
            take(Lock.BUDGETS)


def test_each_transaction_starts_afresh():
    with transaction.atomic():
        take(Lock.PLATFORM)
    with transaction.atomic():
        take(Lock.PURCHASE)  # a new transaction: no violation


def test_the_check_is_off_unless_asked(settings):
    settings.LDP_CHECK_LOCK_ORDER = False
    with transaction.atomic():
        take(Lock.PLATFORM)
        take(Lock.PURCHASE)


def test_two_budget_changes_in_one_transaction_are_an_inversion_the_check_finds():
    """Changing two values' ceilings in one transaction locks the second budget after the first change's ledger
    head: the deadlock-prone order the services avoid by being one transaction each."""
    attribute = CategoricalAttributeFactory(labels=["a", "b"])
    first, second = values_create_many(attribute=attribute, owners=make_owners(2, "lock-order"), raws=["a", "b"],
                                       ceiling="1")
    budget_services.budget_set_ceiling(value_id=first.id, ceiling=Decimal("1.5"))  # one transaction: fine
    with transaction.atomic(), pytest.raises(LockOrderViolation):
        budget_services.budget_set_ceiling(value_id=first.id, ceiling=Decimal("1.6"))
        budget_services.budget_set_ceiling(value_id=second.id, ceiling=Decimal("1.6"))


def test_the_order_is_the_one_the_docs_cite():
    """The order has one statement, this enum: reordering it is a deliberate change, pinned here."""
    assert [lock.name for lock in sorted(Lock)] == [
        "PURCHASE", "BUDGETS", "VALUE", "CHAIN", "BUYER_CREDIT", "OWNERS_PENDING", "PAYOUT", "OWNER_EARNINGS",
        "LEDGER_HEAD", "PLATFORM", "CHECKPOINT_LOG", "WITNESS"]
