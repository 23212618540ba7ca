"""``python manage.py approve_buyer USERNAME [USERNAME...]``: approve buyer accounts that signed up alone.

Each buyer is approved by ``accounts.services.buyer_approve`` (by nobody: the deployment) and told by e-mail; one
approved already is left as it is.  Every username must name a buyer, or nothing is approved
(docs/security.md#buyer-accounts).
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts import roles
from accounts.models import User
from accounts.services import buyer_approve


class Command(BaseCommand):
    help = "Approve buyer accounts (buyers who signed up alone buy once approved)."

    def add_arguments(self, parser):
        parser.add_argument("usernames", nargs="+", metavar="USERNAME")

    def handle(self, *args, usernames, **options):
        users = {u.username: u for u in User.objects.filter(username__in=usernames)}
        missing = [name for name in usernames if name not in users]
        if missing:
            raise CommandError(f"No such user: {', '.join(missing)}.")
        not_buyers = [name for name in usernames if not roles.is_buyer_account(users[name])]
        if not_buyers:
            raise CommandError(f"Not a buyer: {', '.join(not_buyers)} (only buyer accounts are approved).")
        with transaction.atomic():
            for name in dict.fromkeys(usernames):
                user = users[name]
                if user.buyer_approved_at is not None:
                    self.stdout.write(f"{name} was approved already ({user.buyer_approved_at:%Y-%m-%d %H:%M} UTC).")
                    continue
                buyer_approve(buyer=user)
                self.stdout.write(f"Approved buyer {name} (id {user.id}); the buyer is told by e-mail.")
