"""Budget services: every change of a ceiling policy is one transaction with its ledger entry.

Rules (docs/budget-rules.md#budgets-and-ceilings): a ceiling may be lowered but never below the
loss already spent; schedules only ever raise the ceiling; a paused value is
never sold.  Raising a ceiling enqueues chain extension on commit.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from accounts.ledger import hashchain as ledger
from accounts.locks import Lock
from accounts.locks import take as take_lock
from ldpmarket import jobs
from ldpmarket.problems import BudgetError

from .epsilon import from_micro, parse, to_micro
from .models import BudgetAccount, LedgerEntry
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

