"""Reading money (docs/money.md): accounts, statements, top-ups and payouts.  Never writes."""
from __future__ import annotations

from decimal import Decimal

from django.apps import apps
from django.db.models import QuerySet, Sum

from accounts import roles
from accounts.models import LedgerEntry, MoneyAccount, MoneyEntry, PayoutRequest
from accounts.money.units import money_total

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
    recorded = money_total(LedgerEntry.objects.of_values(list(value_ids)).filter(earning__isnull=False)
                           .aggregate(total=Sum("earning"))["total"])
    settled = money_total(MoneyEntry.objects.filter(account__user=owner,
                                                    account__kind=MoneyAccount.Kind.OWNER_EARNINGS,
                                                    settlement__isnull=False).aggregate(total=Sum("amount"))["total"])
    return money_total(recorded - settled)


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


def account_of(user, kind: str) -> MoneyAccount | None:
    """``user``'s account of ``kind``, or ``None`` when it was never opened."""
    return MoneyAccount.objects.filter(user=user, kind=kind).first()


def owner_entries(owner) -> list[tuple]:
    """Every movement of ``owner``'s earnings account, oldest first: ``(created_at, amount, balance_after, memo,
    purchase id)`` (the owner's data export)."""
    return list(MoneyEntry.objects.filter(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS)
                .order_by("id").values_list("created_at", "amount", "balance_after", "memo", "purchase_id"))


def purchase_credits(owner, *, by: str, purchase_ids=None) -> dict[int, Decimal]:
    """What ``owner``'s earnings account was credited at purchase time (sales from before earnings were recorded
    per value and settled, docs/money.md#settlement), summed by ``"attribute"`` or by ``"purchase"`` (of
    ``purchase_ids`` only, when given)."""
    key = {"attribute": "purchase__attribute_id", "purchase": "purchase_id"}[by]
    entries = MoneyEntry.objects.filter(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS,
                                        purchase__isnull=False)
    if purchase_ids is not None:
        entries = entries.filter(purchase_id__in=purchase_ids)
    return {k: money_total(t) for k, t in entries.values(key).annotate(total=Sum("amount")).order_by()
            .values_list(key, "total")}


def earnings_credited(owner) -> Decimal:
    """The sum of the earnings credited to ``owner``'s account (settlements, and purchases from before them;
    payouts are not counted)."""
    return money_total(MoneyEntry.objects.filter(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS,
                                                 kind=MoneyEntry.Kind.EARNING).aggregate(total=Sum("amount"))["total"])
