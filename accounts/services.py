"""Budget services: every change of a ceiling policy is one transaction with its ledger entry; and buyer accounts
(sign-up and approval, docs/security.md#buyer-accounts).

Rules (docs/budget-rules.md#budgets-and-ceilings): a ceiling may be lowered but never below the
loss already spent; schedules only ever raise the ceiling; a paused value is
never sold.  Raising a ceiling enqueues chain extension on commit.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from accounts.ledger import hashchain as ledger
from accounts.locks import Lock
from accounts.locks import take as take_lock
from ldpmarket import jobs
from ldpmarket.problems import BudgetError, NotABuyer, SignUpRefused

from . import roles
from .epsilon import from_micro, parse, to_micro
from .models import BudgetAccount, LedgerEntry, MoneyAccount, User
from .schedule import ceiling_micro


@dataclass(frozen=True)
class Schedule:
    """Start at ``start`` at ``start_at`` and grow, linearly or in ``steps`` equal steps, to ``cap`` at ``end_at``."""

    start: Decimal
    cap: Decimal
    start_at: datetime
    end_at: datetime
    shape: str = "linear"
    steps: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "start", parse(self.start, name="schedule start"))
        object.__setattr__(self, "cap", parse(self.cap, name="schedule cap"))
        object.__setattr__(self, "start_at", self.start_at.replace(microsecond=0))
        object.__setattr__(self, "end_at", self.end_at.replace(microsecond=0))
        if self.cap < self.start:
            raise BudgetError("The schedule's cap must be at least its starting epsilon.")
        if self.end_at - self.start_at < timedelta(seconds=1):
            raise BudgetError("The schedule must end after it starts.")
        if self.end_at - self.start_at > MAX_SCHEDULE:
            raise BudgetError("A schedule may last at most 95 years.")
        if self.shape not in ("linear", "steps"):
            raise BudgetError("The schedule grows either linearly or in steps.")
        if self.shape == "steps" and (not isinstance(self.steps, int) or not 1 <= self.steps <= 10000):
            raise BudgetError("A stepped schedule needs a number of steps between 1 and 10000.")
        if self.shape == "linear":
            object.__setattr__(self, "steps", None)

    def ceiling_at(self, now: datetime) -> Decimal:
        return from_micro(ceiling_micro(to_micro(self.start), to_micro(self.cap), self.start_at, self.end_at,
                                        self.shape, self.steps, now))

    def fields(self) -> dict:
        return {"schedule_start": self.start, "schedule_cap": self.cap, "schedule_start_at": self.start_at,
                "schedule_end_at": self.end_at, "schedule_shape": self.shape, "schedule_steps": self.steps}


#: Longest schedule: keeps ``accounts.schedule``'s int64 arithmetic exact (see its docstring).
MAX_SCHEDULE = timedelta(days=95 * 365)

NO_SCHEDULE = {"schedule_start": None, "schedule_cap": None, "schedule_start_at": None, "schedule_end_at": None,
               "schedule_shape": "", "schedule_steps": None}


def event_rows(budgets: list[BudgetAccount], kind: str) -> ledger.Rows:
    """Ledger rows recording each budget's policy after an event of ``kind``."""
    rows = ledger.Rows.empty(len(budgets))
    rec = rows.records
    for i, b in enumerate(budgets):
        rec[i]["value"] = b.value_id
        rec[i]["kind"] = ledger.KINDS.index(kind)
        rec[i]["chain_before"] = rec[i]["chain_after"] = to_micro(b.chain_loss)
        rec[i]["oneshot_before"] = rec[i]["oneshot_after"] = to_micro(b.oneshot_loss)
        rec[i]["ceiling"] = to_micro(b.ceiling)
        if b.schedule_shape:
            rec[i]["sched_start"] = to_micro(b.schedule_start)
            rec[i]["sched_cap"] = to_micro(b.schedule_cap)
            rec[i]["sched_start_at"] = ledger.micros(b.schedule_start_at)
            rec[i]["sched_end_at"] = ledger.micros(b.schedule_end_at)
            rec[i]["sched_shape"] = ledger.SHAPES.index(b.schedule_shape)
            rec[i]["sched_steps"] = b.schedule_steps if b.schedule_steps else -1
    return rows


def _extend_on_commit(budget: BudgetAccount) -> None:
    attribute_id = budget.value.attribute_id
    jobs.enqueue(jobs.EXTEND_CHAINS, attribute_id, [budget.value_id])


def budget_set_ceiling(*, value_id: int, ceiling) -> BudgetAccount:
    """Set a fixed ceiling (replacing any schedule); refused below the loss already spent."""
    new = parse(ceiling, name="ceiling")
    with transaction.atomic():
        take_lock(Lock.BUDGETS)
        budget = BudgetAccount.objects.select_for_update().select_related("value").get(value_id=value_id)
        if new < budget.loss:
            raise BudgetError(
                f"The ceiling cannot be lowered to {new}: {budget.loss} of this value's privacy budget has "
                "already been spent, and spent privacy cannot be taken back.")
        raised = new > budget.ceiling
        budget.ceiling = new
        for k, v in NO_SCHEDULE.items():
            setattr(budget, k, v)
        budget.save()
        ledger.append(event_rows([budget], LedgerEntry.Kind.CEILING), shard=budget.value.attribute_id)
        if raised:
            _extend_on_commit(budget)
    return budget


def budget_set_schedule(*, value_id: int, schedule: Schedule, now: datetime | None = None) -> BudgetAccount:
    """Follow a release schedule from now on; its current ceiling may not be below the loss."""
    now = now or timezone.now()
    current = schedule.ceiling_at(now)
    with transaction.atomic():
        take_lock(Lock.BUDGETS)
        budget = BudgetAccount.objects.select_for_update().select_related("value").get(value_id=value_id)
        if current < budget.loss:
            raise BudgetError(
                f"This schedule would allow only {current} now, but {budget.loss} of this value's privacy budget "
                "has already been spent. Start the schedule at or above the privacy already spent.")
        raised = current > budget.ceiling
        budget.ceiling = current
        for k, v in schedule.fields().items():
            setattr(budget, k, v)
        budget.save()
        ledger.append(event_rows([budget], LedgerEntry.Kind.SCHEDULE), shard=budget.value.attribute_id)
        if raised:
            _extend_on_commit(budget)
    return budget


def budget_set_paused(*, value_id: int, paused: bool) -> BudgetAccount:
    """Pause or resume sales of a value (a paused value is never included in a purchase)."""
    with transaction.atomic():
        take_lock(Lock.BUDGETS)
        budget = BudgetAccount.objects.select_for_update(of=("self",)).select_related("value").get(value_id=value_id)
        if budget.paused != paused:
            budget.paused = paused
            budget.save(update_fields=["paused", "updated_at"])
            ledger.append(event_rows([budget], LedgerEntry.Kind.PAUSE if paused else LedgerEntry.Kind.RESUME),
                          shard=budget.value.attribute_id)
    return budget


SCHEDULE_KEY = ["schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at", "schedule_shape",
                "schedule_steps"]


def schedules_advance(*, now: datetime | None = None) -> int:
    """Raise every scheduled ceiling to its schedule's value at ``now``; returns the number raised.

    Set-based: one UPDATE per distinct schedule (values usually share a few),
    matching on the schedule itself so a concurrent change of policy is never
    overwritten.  Extension of the affected attributes is enqueued on commit.
    """
    now = now or timezone.now()
    raised = 0
    to_extend: set[int] = set()
    groups = (BudgetAccount.objects.exclude(schedule_shape="").values(*SCHEDULE_KEY)
              .annotate(n=Count("value_id")).order_by())
    with transaction.atomic():
        for g in groups:
            schedule = Schedule(start=g["schedule_start"], cap=g["schedule_cap"], start_at=g["schedule_start_at"],
                                end_at=g["schedule_end_at"], shape=g["schedule_shape"], steps=g["schedule_steps"])
            ceiling = schedule.ceiling_at(now)
            match = BudgetAccount.objects.filter(**{k: g[k] for k in SCHEDULE_KEY}, ceiling__lt=ceiling)
            # Lock in value-id order, the order purchases use, before updating: no deadlock between them.
            take_lock(Lock.BUDGETS)
            locked = list(match.select_for_update(of=("self",)).order_by("value_id")
                          .values_list("value_id", "value__attribute_id"))
            attributes = sorted({a for _, a in locked})
            count = match.update(ceiling=ceiling, updated_at=now)
            if count:
                raised += count
                to_extend.update(attributes)
        for attribute_id in sorted(to_extend):
            jobs.enqueue(jobs.EXTEND_CHAINS, attribute_id)
    return raised



# ------------------------------------------------------------------------------------------ buyer accounts

log = logging.getLogger(__name__)

#: Longest name and organisation a sign-up takes (the columns' sizes).
NAME_MAX, ORGANISATION_MAX = 150, 200


def buyer_signup(*, username: str, name: str, organisation: str, email: str, password: str) -> User:
    """A buyer account made by the buyer (docs/security.md#buyer-accounts): role buyer, a money account with zero
    credit, **not approved** (it may read the catalog and ask for quotes, not buy, until the operator approves it:
    :func:`buyer_approve`).

    The username and e-mail address are unique whatever their case; the password passes the password validators
    (``AUTH_PASSWORD_VALIDATORS``, as the owner portal's sign-up).  Anything refused is one ``SignUpRefused`` naming
    every field at fault.  Once committed, the buyer is told by e-mail that the request awaits approval, and the
    operators (``LDP_OPERATOR_EMAILS``, else ``ADMINS``) that an account awaits theirs."""
    username, email = (username or "").strip(), (email or "").strip()
    name, organisation = " ".join((name or "").split()), " ".join((organisation or "").split())
    errors: dict[str, list[str]] = {}

    def check(field: str, validate) -> None:
        try:
            validate()
        except ValidationError as exc:
            errors.setdefault(field, []).extend(exc.messages)

    if not username:
        errors["username"] = ["Choose a username."]
    elif len(username) > 150:
        errors["username"] = ["A username has at most 150 characters."]
    else:
        check("username", lambda: User.username_validator(username))
    if not email:
        errors["email"] = ["Give an e-mail address: the approval is sent there."]
    else:
        check("email", lambda: validate_email(email))
    if not name:
        errors["name"] = ["Give your name."]
    elif len(name) > NAME_MAX:
        errors["name"] = [f"A name has at most {NAME_MAX} characters."]
    if not organisation:
        errors["organisation"] = ["Name the organisation the account buys for."]
    elif len(organisation) > ORGANISATION_MAX:
        errors["organisation"] = [f"An organisation's name has at most {ORGANISATION_MAX} characters."]
    user = User(username=username, email=email, first_name=name, organisation=organisation, role=User.Role.BUYER)
    check("password", lambda: validate_password(password or "", user))
    if "username" not in errors and User.objects.filter(username__iexact=username).exists():
        errors["username"] = ["This username is taken: choose another."]
    if "email" not in errors and User.objects.filter(email__iexact=email).exists():
        errors["email"] = ["An account with this e-mail address exists already."]
    if errors:
        raise SignUpRefused(errors)
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
            MoneyAccount.objects.create(user=user, kind=MoneyAccount.Kind.BUYER_CREDIT)
    except IntegrityError:  # the same username signed up at the same moment
        raise SignUpRefused({"username": ["This username is taken: choose another."]}) from None
    transaction.on_commit(lambda: _mail_signup(user), robust=True)
    return user


def buyer_approve(*, buyer: User, approved_by: User | None = None, notify: bool = True) -> User:
    """Approve ``buyer``'s account so that it may buy (docs/security.md#buyer-accounts), recording when and by whom
    (``None``: a command or the deployment).  Idempotent: an approved buyer is returned as it is, with its first
    approval.  A user who is not a buyer is refused (``NotABuyer``).  Once committed, the buyer is told by e-mail
    (unless ``notify`` is false: the demo's buyer)."""
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=buyer.pk)
        if not roles.is_buyer_account(user):
            raise NotABuyer(f"{user.username} is not a buyer: only buyer accounts are approved.")
        if user.buyer_approved_at is not None:
            return user
        user.buyer_approved_at = timezone.now()
        user.buyer_approved_by = approved_by
        user.save(update_fields=["buyer_approved_at", "buyer_approved_by"])
        if notify:
            transaction.on_commit(lambda: _mail_approved(user), robust=True)
    return user


def operator_emails() -> list[str]:
    """Where the operators are told of new buyer accounts: ``LDP_OPERATOR_EMAILS``, else ``ADMINS``' addresses."""
    listed = list(getattr(settings, "LDP_OPERATOR_EMAILS", None) or [])
    return listed or [entry[1] if isinstance(entry, (tuple, list)) else entry for entry in settings.ADMINS]


def _mail_signup(user: User) -> None:
    mail.send_mail(
        "Your buyer account request was received",
        f"Hello {user.first_name or user.username},\n\n"
        f"We received the request for a buyer account \"{user.username}\" for {user.organisation}. The operator "
        "approves each organisation's buyer account before it can buy; we will write to you once it is approved. "
        "Meanwhile you can sign in, browse the catalog and ask for quotes.\n",
        None, [user.email])
    operators = operator_emails()
    if not operators:
        log.warning("buyer %s (%s) awaits approval, but no operator address is set (LDP_OPERATOR_EMAILS or "
                    "ADMINS): approve it in the admin, with approve_buyer or the staff API", user.username, user.pk)
        return
    mail.send_mail(
        f"Buyer account awaiting approval: {user.username} ({user.organisation})",
        f"A buyer account awaits your approval:\n\n  username: {user.username}\n  name: {user.first_name}\n"
        f"  organisation: {user.organisation}\n  e-mail: {user.email}\n  id: {user.pk}\n\n"
        f"Approve it in the admin (Users, action \"Approve selected buyers\"), with "
        f"\"python manage.py approve_buyer {user.username}\", or with POST /api/v1/staff/buyers/{user.pk}/approve/.\n",
        None, operators)


def _mail_approved(user: User) -> None:
    if not user.email:
        return
    mail.send_mail(
        "Your buyer account is approved",
        f"Hello {user.first_name or user.username},\n\nThe buyer account \"{user.username}\" for "
        f"{user.organisation or 'your organisation'} is approved: you can buy now.\n",
        None, [user.email])
