"""Reads for the owner portal: an owner's values, their budgets and history, releases, earnings, the export.

Nothing here writes.  Every read is scoped to one owner: a value that is not
the owner's is ``Http404`` (indistinguishable from one that does not exist).
Buyers appear only as their organisation, never by username or e-mail.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.core.paginator import Paginator
from django.db.models import Count, Sum
from django.http import Http404
from django.utils import timezone

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, User
from market import sealing
from market.domain import labels_of
from market.models import Attribute, Value

RELEASE_KINDS = (LedgerEntry.Kind.CHAIN_RELEASE, LedgerEntry.Kind.ONESHOT_RELEASE)
ZERO_MONEY = Decimal("0.0000")
CENT = Decimal("0.0001")
NO_ORGANISATION = "Organisation not given"


def _money(d) -> Decimal:
    """Money to 4 places (SQLite's SUM of decimals comes back with float noise digits)."""
    return Decimal(str(d)).quantize(CENT)


def open_raw(value: Value) -> str | None:
    """The owner's raw value in clear (``None`` once deleted); only ever called for the value's own owner."""
    if value.raw_sealed is None:
        return None
    try:
        return sealing.open_raw(value.raw_sealed, owner_id=value.owner_id, attribute_id=value.attribute_id)
    except sealing.SealBroken:
        return None


@dataclass
class Event:
    """One ledger entry of a value, as the chart and the history table need it."""

    id: int
    kind: str
    at: datetime
    ceiling: Decimal
    loss: Decimal
    epsilon: Decimal | None = None
    purchase_id: int | None = None
    schedule: dict | None = None

    @property
    def label(self) -> str:
        return LedgerEntry.Kind(self.kind).label


@dataclass
class ValueRow:
    """A value with everything the dashboard shows about it."""

    value: Value
    budget: BudgetAccount
    raw: str | None
    head: Decimal
    length: int
    releases: int = 0
    earned: Decimal = ZERO_MONEY
    events: list[Event] = field(default_factory=list)

    @property
    def attribute(self) -> Attribute:
        return self.value.attribute

    @property
    def loss(self) -> Decimal:
        return self.budget.loss

    @property
    def percent(self) -> int:
        """Share of the ceiling spent, in whole percent (100 when the ceiling is 0)."""
        if self.budget.ceiling <= 0:
            return 100 if self.loss > 0 else 0
        return int(min(100, self.loss * 100 / self.budget.ceiling))

    @property
    def meter_high(self) -> Decimal:
        """Where the loss meter turns from "fine" to "nearly spent": 80% of the ceiling."""
        return (self.budget.ceiling * Decimal("0.8")).quantize(Decimal("0.000001")) if self.budget.ceiling > 0 \
            else Decimal(1)

    @property
    def raw_deleted(self) -> bool:
        return self.value.raw_deleted_at is not None


def _values(owner: User):
    return (Value.objects.filter(owner=owner)
            .select_related("attribute__dataset", "budget", "chain")
            .defer("input_sealed", "chain__epsilons", "chain__outputs", "chain__head_output"))


def _row(value: Value) -> ValueRow:
    return ValueRow(value=value, budget=value.budget, raw=open_raw(value), head=value.chain.head,
                    length=value.chain.length)


def _events(value_ids) -> dict[int, list[Event]]:
    rows = (LedgerEntry.objects.filter(value_id__in=list(value_ids)).order_by("value_id", "id")
            .values_list("id", "value_id", "kind", "created_at", "ceiling", "chain_loss_after", "oneshot_loss_after",
                         "epsilon", "purchase_id", "schedule_start", "schedule_cap", "schedule_start_at",
                         "schedule_end_at", "schedule_shape", "schedule_steps"))
    out: dict[int, list[Event]] = defaultdict(list)
    for (i, v, kind, at, ceiling, chain, oneshot, eps, purchase, s, c, sa, ea, shape, steps) in rows:
        schedule = ({"start": s, "cap": c, "start_at": sa, "end_at": ea, "shape": shape, "steps": steps}
                    if kind == LedgerEntry.Kind.SCHEDULE and shape else None)
        out[v].append(Event(id=i, kind=kind, at=at, ceiling=ceiling, loss=chain + oneshot, epsilon=eps,
                            purchase_id=purchase, schedule=schedule))
    return out


def _earnings_account(owner: User) -> MoneyAccount | None:
    return MoneyAccount.objects.filter(user=owner, kind=MoneyAccount.Kind.OWNER_EARNINGS).first()


def _earned_by_attribute(owner: User) -> dict[int, Decimal]:
    """What the owner earned per attribute (one value per owner and attribute, so per value)."""
    rows = (MoneyEntry.objects.filter(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS,
                                      purchase__isnull=False)
            .values("purchase__attribute_id").annotate(total=Sum("amount")).order_by())
    return {r["purchase__attribute_id"]: _money(r["total"]) for r in rows}


def owner_values(owner: User, *, with_events: bool = True) -> list[ValueRow]:
    """Every value of ``owner``, newest first, with budget, chain head, release count, earnings and history."""
    values = list(_values(owner).order_by("-created_at", "-id"))
    rows = [_row(v) for v in values]
    ids = [v.id for v in values]
    counts = dict(LedgerEntry.objects.filter(value_id__in=ids, kind__in=RELEASE_KINDS)
                  .values("value_id").annotate(n=Count("id")).order_by().values_list("value_id", "n"))
    earned = _earned_by_attribute(owner)
    events = _events(ids) if with_events else {}
    for row in rows:
        row.releases = counts.get(row.value.id, 0)
        row.earned = earned.get(row.value.attribute_id, ZERO_MONEY)
        row.events = events.get(row.value.id, [])
    return rows


def owns_value(owner: User, value_id: int) -> bool:
    return Value.objects.filter(id=value_id, owner=owner).exists()


def owner_value(owner: User, value_id: int) -> Value:
    """The owner's value ``value_id`` (with attribute, dataset, budget and chain), or ``Http404``."""
    value = _values(owner).filter(id=value_id).first()
    if value is None:
        raise Http404("No such value.")
    return value


def owner_value_row(owner: User, value_id: int) -> ValueRow:
    value = owner_value(owner, value_id)
    row = _row(value)
    row.events = _events([value.id]).get(value.id, [])
    row.releases = sum(1 for e in row.events if e.kind in RELEASE_KINDS)
    row.earned = _earned_by_attribute(owner).get(value.attribute_id, ZERO_MONEY)
    return row


# ------------------------------------------------------------------------------------------------- releases

@dataclass
class Release:
    at: datetime
    value_id: int
    dataset: str
    attribute: str
    organisation: str
    epsilon: Decimal
    loss_after: Decimal
    earned: Decimal
    purchase_id: int | None
    one_shot: bool


def _release_rows(owner: User, value_id: int | None = None):
    qs = LedgerEntry.objects.filter(value__owner=owner, kind__in=RELEASE_KINDS)
    if value_id is not None:
        qs = qs.filter(value_id=value_id)
    # Only the buyer's organisation is read: never their username or e-mail.
    return qs.order_by("-created_at", "-id").values_list(
        "created_at", "value_id", "value__attribute__dataset__title", "value__attribute__name",
        "purchase__buyer__organisation", "epsilon", "chain_loss_after", "oneshot_loss_after", "purchase_id", "kind")


def _with_earnings(owner: User, rows) -> list[Release]:
    rows = list(rows)
    purchase_ids = {r[8] for r in rows if r[8] is not None}
    earned = dict(MoneyEntry.objects.filter(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS,
                                            purchase_id__in=purchase_ids)
                  .values("purchase_id").annotate(total=Sum("amount")).order_by()
                  .values_list("purchase_id", "total"))
    earned = {p: _money(t) for p, t in earned.items()}
    return [Release(at=at, value_id=v, dataset=ds, attribute=attr, organisation=org or NO_ORGANISATION,
                    epsilon=eps, loss_after=chain + oneshot, earned=earned.get(p, ZERO_MONEY), purchase_id=p,
                    one_shot=kind == LedgerEntry.Kind.ONESHOT_RELEASE)
            for at, v, ds, attr, org, eps, chain, oneshot, p, kind in rows]


def releases(owner: User, *, value_id: int | None = None, limit: int | None = None) -> list[Release]:
    rows = _release_rows(owner, value_id)
    return _with_earnings(owner, rows[:limit] if limit else rows)


def release_page(owner: User, page: str | int | None, *, per_page: int = 50):
    """A page of the owner's releases, newest first: ``(page object, [Release, ...])``."""
    paginator = Paginator(_release_rows(owner), per_page)
    page_obj = paginator.get_page(page)
    return page_obj, _with_earnings(owner, page_obj.object_list)


def release_count(owner: User) -> int:
    return LedgerEntry.objects.filter(value__owner=owner, kind__in=RELEASE_KINDS).count()


def earnings_total(owner: User) -> Decimal:
    """Everything the owner has earned (the sum of their earnings entries)."""
    account = _earnings_account(owner)
    if account is None:
        return ZERO_MONEY
    return _money(account.entries.aggregate(total=Sum("amount"))["total"] or ZERO_MONEY)


# ------------------------------------------------------------------------------------------- contributing

@dataclass
class Offer:
    attribute: Attribute
    contributed_value_id: int | None

    @property
    def labels(self) -> list[str]:
        return labels_of(self.attribute)


def attributes_offered(owner: User) -> list[tuple[str, str, list[Offer]]]:
    """``[(dataset title, description, [Offer, ...]), ...]``: every attribute, and the owner's value in it if any."""
    mine = dict(Value.objects.filter(owner=owner).values_list("attribute_id", "id"))
    groups: dict[int, tuple[str, str, list[Offer]]] = {}
    for attribute in Attribute.objects.select_related("dataset").order_by("dataset__title", "name"):
        d = attribute.dataset
        groups.setdefault(d.id, (d.title, d.description, []))[2].append(Offer(attribute, mine.get(attribute.id)))
    return list(groups.values())


def attribute_for_contribution(attribute_id: int) -> Attribute:
    attribute = Attribute.objects.select_related("dataset").filter(id=attribute_id).first()
    if attribute is None:
        raise Http404("No such attribute.")
    return attribute


# ----------------------------------------------------------------------------------------------- export

def _s(d) -> str | None:
    return None if d is None else str(d)


def _t(dt) -> str | None:
    return None if dt is None else dt.isoformat()


def export(owner: User) -> dict:
    """All of ``owner``'s data, JSON-ready (decimals as exact strings, times in ISO 8601). Theirs only."""
    rows = owner_values(owner)
    by_value = defaultdict(list)
    for r in releases(owner):
        by_value[r.value_id].append(r)
    account = _earnings_account(owner)
    entries = (list(account.entries.order_by("id").values_list("created_at", "amount", "balance_after", "memo",
                                                                "purchase_id"))
               if account else [])
    values = []
    for row in rows:
        b, v = row.budget, row.value
        values.append({
            "id": v.id,
            "dataset": v.attribute.dataset.title,
            "attribute": v.attribute.name,
            "kind": v.attribute.kind,
            "raw_value": row.raw,
            "raw_deleted_at": _t(v.raw_deleted_at),
            "contributed_at": _t(v.created_at),
            "cohort": v.cohort,
            "budget": {
                "ceiling": _s(b.ceiling), "chain_loss": _s(b.chain_loss), "oneshot_loss": _s(b.oneshot_loss),
                "loss": _s(b.loss), "paused": b.paused,
                "schedule": ({"start": _s(b.schedule_start), "cap": _s(b.schedule_cap),
                              "start_at": _t(b.schedule_start_at), "end_at": _t(b.schedule_end_at),
                              "shape": b.schedule_shape, "steps": b.schedule_steps} if b.scheduled else None),
            },
            "chain": {"head": _s(row.head), "length": row.length},
            "earned": _s(row.earned),
            "releases": [{"at": _t(r.at), "organisation": r.organisation, "epsilon": _s(r.epsilon),
                          "loss_after": _s(r.loss_after), "earned": _s(r.earned), "purchase": r.purchase_id,
                          "one_shot": r.one_shot} for r in by_value[v.id]],
            "history": [{"at": _t(e.at), "event": e.kind, "ceiling": _s(e.ceiling), "loss": _s(e.loss),
                         "epsilon": _s(e.epsilon)} for e in row.events],
        })
    return {
        "format": "ldpmarket-owner-export/1",
        "exported_at": timezone.now().isoformat(),
        "owner": {"username": owner.username, "email": owner.email, "joined": _t(owner.date_joined)},
        "values": values,
        "earnings": {
            "total": _s(sum((e[1] for e in entries), ZERO_MONEY)),
            "balance": _s(account.balance if account else ZERO_MONEY),
            "entries": [{"at": _t(at), "amount": _s(a), "balance_after": _s(bal), "memo": memo, "purchase": p}
                        for at, a, bal, memo, p in entries],
        },
    }
