"""``python manage.py settle_payouts``: list requested payouts, settle them (``--all`` or ``--id N``), or
reject one (``--reject N --note TEXT``) (docs/money.md)."""
from __future__ import annotations

from decimal import Decimal

from django.core.management.base import BaseCommand, CommandError

from accounts.models import PayoutRequest
from accounts.money import selectors, services
from ldpmarket.problems import DomainError


class Command(BaseCommand):
    help = ("Settle owners' payout requests once they are paid (a payment provider would be called here): without "
            "options, list the requested ones.")

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="settle every requested payout")
        parser.add_argument("--id", type=int, action="append", default=[], help="settle this payout (repeatable)")
        parser.add_argument("--reject", type=int, action="append", default=[],
                            help="reject this payout: its amount goes back to the owner's earnings")
        parser.add_argument("--note", default="", help="a note kept with the decision")

    def handle(self, *args, all, id, reject, note, **options):
        pending = list(selectors.pending_payouts())
        if not (all or id or reject):
            for p in pending:
                self.stdout.write(f"payout {p.id}: {p.owner.username} {services.format_money(p.amount)}, requested "
                                  f"{p.requested_at:%Y-%m-%d %H:%M} UTC")
            total = sum((p.amount for p in pending), start=Decimal(0))
            self.stdout.write(f"{len(pending)} requested payout(s), {services.format_money(total)} in all.")
            return
        settle_ids = [p.id for p in pending] if all else id
        settle_ids = [i for i in settle_ids if i not in reject]
        done = []
        try:
            for pid in reject:
                p = services.payout_reject(payout_id=pid, by=None, note=note)
                self.stdout.write(f"payout {p.id}: rejected, {services.format_money(p.amount)} back to "
                                  f"{p.owner.username}")
            for pid in settle_ids:
                p = services.payout_settle(payout_id=pid, by=None, note=note)
                done.append(p)
                self.stdout.write(f"payout {p.id}: settled, {services.format_money(p.amount)} to {p.owner.username}")
        except PayoutRequest.DoesNotExist:
            raise CommandError(f"No payout {pid}.") from None
        except DomainError as e:
            raise CommandError(str(e)) from None
        self.stdout.write(f"{len(done)} payout(s) settled, {services.format_money(sum(p.amount for p in done))}.")
