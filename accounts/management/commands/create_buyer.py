"""``python manage.py create_buyer USERNAME [--email E] [--organisation O] [--password P] [--credit AMOUNT]``.

Creates a buyer the way a deployment does (``accounts.roles.grant_role``), with a password checked by the
password validators (asked for twice when ``--password`` is not given and a terminal is attached), and
optionally a first top-up (docs/money.md).
"""
from __future__ import annotations

import getpass
import sys

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts import roles
from accounts.models import User
from accounts.money import services
from ldpmarket.problems import DomainError


class Command(BaseCommand):
    help = "Create a buyer account (role buyer), optionally with a first credit top-up."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument("--organisation", default="")
        parser.add_argument("--password", default=None, help="the password (asked for when omitted)")
        parser.add_argument("--credit", default=None, help="a first top-up, e.g. 500.00 (in LDP_CURRENCY)")

    def handle(self, *args, username, email, organisation, password, credit, **options):
        if User.objects.filter(username=username).exists():
            raise CommandError(f"A user {username!r} already exists.")
        if password is None:
            if not self.stdin_isatty():
                raise CommandError("Give --password (no terminal to ask on).")
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("The passwords differ.")
        user = User(username=username, email=email)
        if hasattr(user, "organisation"):
            user.organisation = organisation
        try:
            validate_password(password, user)
        except ValidationError as e:
            raise CommandError("Password refused: " + " ".join(e.messages)) from None
        if credit is not None:
            try:
                credit = services.parse_amount(credit)
            except DomainError as e:
                raise CommandError(str(e)) from None
        with transaction.atomic():
            user.set_password(password)
            roles.grant_role(user, User.Role.BUYER)
            topup = services.money_topup(buyer=user, amount=credit, reason="initial credit (create_buyer)",
                                      by=None) if credit is not None else None
        line = f"Created buyer {user.username} (id {user.id})"
        if topup is not None:
            line += f" with {services.format_money(topup.amount)} of credit"
        self.stdout.write(line + ".")

    @staticmethod
    def stdin_isatty() -> bool:

        return sys.stdin.isatty()
