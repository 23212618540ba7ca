"""Reading money (docs/money.md): accounts, statements, top-ups and payouts.  Never writes."""
from __future__ import annotations

from decimal import Decimal

from django.apps import apps
from django.db.models import QuerySet, Sum

from . import roles
from .models import LedgerEntry, MoneyAccount, MoneyEntry, PayoutRequest

#: The account each role has: a buyer's credit, an owner's earnings; staff and auditors have none of their own.
KIND_OF_ROLE = {"buyer": MoneyAccount.Kind.BUYER_CREDIT, "owner": MoneyAccount.Kind.OWNER_EARNINGS}


def account_kind(user) -> str | None:
    """The kind of money account ``user`` has (``None``: staff, auditors, anonymous and inactive users)."""
    return KIND_OF_ROLE.get(roles.role_of(user) or "")


def balance(user, kind: str) -> Decimal:
    """The balance of ``user``'s account of ``kind`` (0 when it was never opened)."""
    found = MoneyAccount.objects.filter(user=user, kind=kind).values_list("balance", flat=True).first()
    return found if found is not None else Decimal("0")


def unsettled_earnings(owner) -> Decimal:
    """What ``owner`` has earned and not yet received in their balance (docs/money.md#settlement): the per-value
    earnings the compact ledger records for their values, less what settlements credited them -- exact, since each
    settlement credits exactly the earnings of the ledger rows it covers."""
    value_ids = apps.get_model("market", "Value").objects.filter(owner=owner).values_list("id", flat=True)
    recorded = (LedgerEntry.objects.of_values(list(value_ids)).filter(earning__isnull=False)
                .aggregate(total=Sum("earning"))["total"]) or Decimal("0")
    settled = (MoneyEntry.objects.filter(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS,
                                         settlement__isnull=False).aggregate(total=Sum("amount"))["total"]
               ) or Decimal("0")
    return recorded - settled


def platform_balance() -> Decimal:
    found = (MoneyAccount.objects.filter(kind=MoneyAccount.Kind.PLATFORM)
             .values_list("balance", flat=True).first())
    return found if found is not None else Decimal("0")


def statement(user, kind: str) -> QuerySet:
    """Every movement of ``user``'s account of ``kind``, newest first."""
    return MoneyEntry.objects.filter(account__user=user, account__kind=kind).order_by("-id")


def platform_statement() -> QuerySet:
    """Every movement of the platform's fee account, newest first."""
    return MoneyEntry.objects.filter(account__kind=MoneyAccount.Kind.PLATFORM).order_by("-id")


def payouts(owner) -> QuerySet:
    return PayoutRequest.objects.filter(owner=owner).order_by("-id")


def pending_payouts() -> QuerySet:
    return PayoutRequest.objects.filter(status=PayoutRequest.Status.REQUESTED).select_related("owner").order_by("id")
