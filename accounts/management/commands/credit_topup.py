"""``python manage.py credit_topup USER AMOUNT --reason TEXT``: credit a buyer's account (docs/money.md)."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from accounts.models import User
from accounts.money import services as money
from ldpmarket.problems import DomainError


class Command(BaseCommand):
    help = "Top up a buyer's credit by AMOUNT (e.g. 100.00, in LDP_CURRENCY), saying why; one money movement."

    def add_arguments(self, parser):
        parser.add_argument("user", help="the buyer's username or user id")
        parser.add_argument("amount", help="a positive amount with at most two decimals, e.g. 100.00")
        parser.add_argument("--reason", required=True, help="why the credit is given (kept with the movement)")
        parser.add_argument("--key", default=None,
                            help="an idempotency key: running the command again with the same key credits once")

    def handle(self, *args, user, amount, reason, key, **options):
        buyer = find_user(user)
        try:
            topup = money.money_topup(buyer=buyer, amount=amount, reason=reason, by=None, idempotency_key=key)
        except DomainError as e:
            raise CommandError(str(e)) from None
        verb = "already credited (same key)" if getattr(topup, "replayed", False) else "credited"
        self.stdout.write(f"{buyer.username}: {verb} {money.format_money(topup.amount)}; balance "
                          f"{money.format_money(topup.entry.balance_after)} (top-up {topup.id}, "
                          f"reason: {topup.reason})")


def find_user(raw: str) -> User:
    user = User.objects.filter(username=raw).first()
    if user is None and raw.isdigit():
        user = User.objects.filter(id=int(raw)).first()
    if user is None:
        raise CommandError(f"No user {raw!r}.")
    return user
