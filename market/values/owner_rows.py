"""Reads for the owner portal: an owner's values, their budgets and history, releases, earnings, the export.

Nothing here writes.  Every read is scoped to one owner: a value that is not
the owner's is ``Http404`` (indistinguishable from one that does not exist).
Buyers appear only as their organisation, never by username or e-mail.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.core.paginator import Paginator
from django.db.models import Count, Sum
from django.http import Http404
from django.utils import timezone

from accounts.epsilon import from_micro
from accounts.models import BudgetAccount, LedgerEntry, User
from accounts.money import selectors
from accounts.money.format import currency, machine_amount
from accounts.money.units import money_total
from market.chains import store
from market.models import SURVEY_MECHANISMS, Attribute, Purchase, Value
from market.purchases.oneshot_specs import guarantee_label
from market.values import inputs, sealing
from market.values.inputs import labels_of
from mechanisms import registry

RELEASE_KINDS = (LedgerEntry.Kind.CHAIN_RELEASE, LedgerEntry.Kind.ONESHOT_RELEASE)
ZERO_MONEY = Decimal("0.0000")

NO_ORGANISATION = "Organisation not given"


def _money(d) -> Decimal:
    """Money to 4 places (SQLite's SUM of decimals comes back with float noise digits): ``money_total``."""
    return money_total(d)


# ------------------------------------------------------------------------------ mechanisms and guarantees, in words

G = LedgerEntry.Guarantee
PUM_MECHANISMS = registry.SENSITIVE_CODES

#: What each way of selling is called on the owner's pages: what it does, in plain words, with the technical
#: name of the mechanism (the papers' abbreviation, see docs/mechanisms.md) in parentheses; and how each works
#: and what its releases cost (contribute and value pages).  From the mechanism registry.
MECHANISM_NAMES = {r.code: r.owner_name for r in registry.RECORDS}
MECHANISM_EXPLAINED = {r.code: r.owner_explained for r in registry.RECORDS if r.owner_explained}
ONESHOT_COST = ("One-shot: there is no chain. Every sale is a fresh randomization of your value and adds its ε to "
                "what this value has spent, so ten sales at ε 0.1 spend ε 1.")
CHAIN_COST = ("Chain: only the highest ε counts. A sale at or below the highest ε already sold adds nothing to "
              "what this value has spent.")
SURVEY_NOTE = ("Buyers may also commission yes/no surveys over this question (by the methods of Warner, Simmons, "
               "Christofides or the improved Christofides method). Your answer is randomized inside the service, "
               "only the aggregate estimate "
               "is sold, and each survey adds its ε to your one-shot spending. An improved Christofides survey "
               "protects each answer with ε only if respondents cannot see each other's cards or answers "
               "(non-collusion).")
CEILING_NOTE = ("Your ceiling caps the total: the chain's highest ε plus the sum of one-shot releases never exceeds "
                "it. A sale that would go over it leaves your value out.")


def mechanism_name(mechanism: str) -> str:
    return MECHANISM_NAMES.get(mechanism, mechanism)


def mechanism_name_parts(mechanism: str) -> tuple[str, str]:
    """``(plain words, technical name)`` of a way of selling: its owner name without the technical name in
    parentheses at its end ("... (uRR)"), and that name ("" if none).  The contribute pages say the plain words and
    keep the technical name as a secondary detail (issue 31)."""
    return _name_parts(mechanism_name(mechanism))


def _name_parts(name: str) -> tuple[str, str]:
    """``"Plain words (technical)"`` -> ``("Plain words", "technical")``; a name without one -> ``(name, "")``."""
    if name.endswith(")") and " (" in name:
        plain, _, technical = name[:-1].rpartition(" (")
        return plain, technical
    return name, ""


def guarantee_words(guarantee: str, mechanism: str, epsilon) -> str:
    """What a release's ε guarantees, in plain words for the owner (the technical terms, ε-LDP and ε-ULDP, are in
    docs/mechanisms.md; the improved Christofides survey's per-report protection assumes non-collusion:
    docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides)."""
    eps = "—" if epsilon is None else format(Decimal(epsilon).normalize(), "f")
    survey = mechanism in SURVEY_MECHANISMS
    if guarantee == G.PER_REPORT:
        return (f"each answer protected at ε {eps} if respondents cannot see each other's cards or answers; "
                f"only the aggregate was sold")
    if guarantee == G.ULDP:
        return (f"sensitive or tagged answers protected at ε {eps}, other answers may be passed on exactly; "
                f"one-shot, adds ε {eps}")
    if guarantee == G.LDP and survey:
        return f"your answer protected at ε {eps}; only the aggregate was sold; adds ε {eps}"
    if guarantee == G.LDP:
        return f"your value protected at ε {eps}; one-shot, adds ε {eps}"
    return "protected by your chain: counts only above the highest ε already sold"


def describe_raw(attribute: Attribute, raw: str | None) -> str | None:
    """The owner's raw value as a person reads it: edges and distributions listed by name, others as they are."""
    if raw is None or attribute.kind not in (Attribute.Kind.GRAPH, Attribute.Kind.DISTRIBUTION):
        return raw
    try:
        data = json.loads(raw)
    except ValueError:
        return raw
    names = labels_of(attribute)
    if isinstance(data, list) and len(data) == len(names):
        data = dict(zip(names, data))
    if not isinstance(data, dict):
        return raw
    index = {n: i for i, n in enumerate(names)}
    items = sorted(data.items(), key=lambda kv: index.get(kv[0], len(names)))
    parts = []
    for name, v in items:
        if v is None:
            continue
        try:
            d = Decimal(str(v))
        except ArithmeticError:
            return raw
        if attribute.kind == Attribute.Kind.GRAPH:
            item = name if attribute.labels else f"item {name}"
            parts.append(f"{item}: {'+' if d > 0 else '−' if d < 0 else ''}{_short(abs(d))}")
        elif d != 0:
            parts.append(f"{name}: {_short(d)}")
    if not parts:
        return "no edges" if attribute.kind == Attribute.Kind.GRAPH else raw
    return " · ".join(parts)


def _short(d: Decimal) -> str:
    """A number with at most 4 significant digits, without trailing zeros (0.333333333333 -> 0.3333)."""
    text = f"{float(d):.4g}"
    return text if "e" not in text else format(d.normalize(), "f")


def open_raw(value: Value) -> str | None:
    """The owner's raw value in clear (``None`` once deleted, and always for an owner-held value: the service never
    had it, docs/custody.md); only ever called for the value's own owner."""
    if value.raw_sealed is None:
        return None
    try:
        return sealing.open_raw(value.raw_sealed, owner_id=value.owner_id, attribute_id=value.attribute_id,
                                key_id=value.value_key_id)
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
    chain_loss: Decimal = Decimal(0)
    oneshot_loss: Decimal = Decimal(0)
    guarantee: str = ""

    @property
    def label(self) -> str:
        return LedgerEntry.Kind(self.kind).label


@dataclass
class ValueRow:
    """A value with everything the dashboard shows about it."""

    value: Value
    budget: BudgetAccount
    raw: str | None
    head: Decimal  # 0 for a one-shot value: it has no chain (``is_oneshot``)
    length: int
    releases: int = 0
    earned: Decimal = ZERO_MONEY
    events: list[Event] = field(default_factory=list)
    pum_tag: str | None = None  # the owner's PUM tag (uRR/uRAP values; for the owner's own eyes only)

    @property
    def attribute(self) -> Attribute:
        return self.value.attribute

    @property
    def is_oneshot(self) -> bool:
        return self.value.attribute.is_oneshot

    @property
    def raw_display(self) -> str | None:
        return describe_raw(self.value.attribute, self.raw)

    @property
    def owner_held(self) -> bool:
        """Whether the raw value is kept on the owner's device, never sent to the service (docs/custody.md)."""
        return self.value.custody == Value.Custody.OWNER

    @property
    def upload_level(self) -> Decimal | None:
        """An owner-held value's upload level: the highest epsilon its device uploaded (None before the first
        upload, and for a service-held value)."""
        return self.head if self.owner_held and self.length else None

    @property
    def service_guarantee(self) -> Decimal | None:
        """The guarantee against the service: an owner-held value's upload level (0 before the first upload);
        None for a service-held value, which the service holds in clear (sealed with its own key)."""
        if not self.owner_held:
            return None
        return self.upload_level if self.upload_level is not None else Decimal(0)

    @property
    def mechanism_name(self) -> str:
        return mechanism_name(self.value.attribute.mechanism)

    @property
    def takes_pum_tag(self) -> bool:
        """A uRR/uRAP value whose attribute offers tags, and whose raw value is still there to tag."""
        a = self.value.attribute
        return a.mechanism in PUM_MECHANISMS and bool(a.pum_tags) and not self.raw_deleted

    @property
    def loss(self) -> Decimal:
        return self.budget.loss

    @property
    def split(self) -> bool:
        """Whether the loss is shown as chain and one-shot parts: a chain value with one-shot spending (surveys).
        A one-shot value has no chain, so no parts."""
        return not self.is_oneshot and self.budget.oneshot_loss > 0

    @property
    def for_sale(self) -> bool:
        """Whether the value can still be sold at all: a one-shot value needs its raw value for every release."""
        return not (self.is_oneshot and self.raw_deleted)

    @property
    def question(self) -> str:
        """The attribute's question in plain words (its description), as the owner answered it."""
        return (self.value.attribute.description or "").strip()

    def _share(self, amount: Decimal) -> int:
        if self.budget.ceiling <= 0:
            return 100 if amount > 0 else 0
        return int(min(100, amount * 100 / self.budget.ceiling))

    @property
    def percent(self) -> int:
        """Share of the ceiling spent, in whole percent (100 when the ceiling is 0)."""
        return self._share(self.loss)

    @property
    def chain_percent(self) -> int:
        return self._share(self.budget.chain_loss)

    @property
    def oneshot_percent(self) -> int:
        return self._share(self.budget.oneshot_loss)

    @property
    def meter_high(self) -> Decimal:
        """Where the loss meter turns from "fine" to "nearly spent": 80% of the ceiling."""
        return (self.budget.ceiling * Decimal("0.8")).quantize(Decimal("0.000001")) if self.budget.ceiling > 0 \
            else Decimal(1)

    @property
    def raw_deleted(self) -> bool:
        return self.value.raw_deleted_at is not None


def _values(owner: User):
    return Value.objects.filter(owner=owner).select_related("attribute__dataset", "budget").defer("input_sealed")


def _rows(values: list[Value]) -> list[ValueRow]:
    """Dashboard rows, with each chain's head and number of points read from its block
    (``market.chains.store``); values of one-shot attributes have no chain (head 0, no steps)."""
    chains = store.lengths_and_heads([(v.block_id, v.slot) for v in values if v.block_id is not None])
    rows = []
    for v in values:
        length, head = chains.get((v.block_id, v.slot), (0, 0))
        rows.append(ValueRow(value=v, budget=v.budget, raw=open_raw(v), head=from_micro(head), length=length))
    return rows


def _events(value_ids) -> dict[int, list[Event]]:
    rows = (LedgerEntry.objects.of_values(value_ids).order_by("value_id", "id")
            .values_list("id", "value_id", "kind", "created_at", "ceiling", "chain_loss_after", "oneshot_loss_after",
                         "epsilon", "purchase_id", "schedule_start", "schedule_cap", "schedule_start_at",
                         "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee"))
    out: dict[int, list[Event]] = defaultdict(list)
    for (i, v, kind, at, ceiling, chain, oneshot, eps, purchase, s, c, sa, ea, shape, steps, guarantee) in rows:
        schedule = ({"start": s, "cap": c, "start_at": sa, "end_at": ea, "shape": shape, "steps": steps}
                    if kind == LedgerEntry.Kind.SCHEDULE and shape else None)
        out[v].append(Event(id=i, kind=kind, at=at, ceiling=ceiling, loss=chain + oneshot, epsilon=eps,
                            purchase_id=purchase, schedule=schedule, chain_loss=chain, oneshot_loss=oneshot,
                            guarantee=guarantee))
    return out


def _earned_by_attribute(owner: User) -> dict[int, Decimal]:
    """What the owner earned per attribute (one value per owner and attribute, so per value): the per-value
    earnings of the compact ledger (settled or not, docs/money.md#settlement) plus the purchase-time credits of
    sales from before earnings were recorded per value."""
    total: dict[int, Decimal] = defaultdict(Decimal)
    for attribute_id, credited in selectors.purchase_credits(owner, by="attribute").items():
        total[attribute_id] += credited
    for attribute_id, earned in (_entries_of(owner).filter(earning__isnull=False).values("value__attribute_id")
                                 .annotate(total=Sum("earning")).order_by()
                                 .values_list("value__attribute_id", "total")):
        total[attribute_id] += earned
    return {a: _money(t) for a, t in total.items()}


def _earned_by_purchase(owner: User, purchase_ids, value_id: int | None = None) -> dict[int, Decimal]:
    """What the owner earned from each of these purchases (of one value, or of all theirs): as
    ``_earned_by_attribute``, from the ledger's per-value earnings or, before those, the purchase's credit."""
    total: dict[int, Decimal] = defaultdict(Decimal)
    if not purchase_ids:
        return {}
    for p, t in selectors.purchase_credits(owner, by="purchase", purchase_ids=purchase_ids).items():
        total[p] += t
    for p, t in (_entries_of(owner, value_id).filter(purchase_id__in=purchase_ids, earning__isnull=False)
                 .values("purchase_id").annotate(total=Sum("earning")).order_by().values_list("purchase_id", "total")):
        total[p] += t
    return {p: _money(t) for p, t in total.items()}


def owner_values(owner: User, *, with_events: bool = True) -> list[ValueRow]:
    """Every value of ``owner``, newest first, with budget, chain head, release count, earnings and history."""
    values = list(_values(owner).order_by("-created_at", "-id"))
    rows = _rows(values)
    ids = [v.id for v in values]
    counts = dict(LedgerEntry.objects.of_values(ids).filter(kind__in=RELEASE_KINDS)
                  .values("value_id").annotate(n=Count("id")).order_by().values_list("value_id", "n"))
    earned = _earned_by_attribute(owner)
    events = _events(ids) if with_events else {}
    for row in rows:
        row.releases = counts.get(row.value.id, 0)
        row.earned = earned.get(row.value.attribute_id, ZERO_MONEY)
        row.events = events.get(row.value.id, [])
    return rows


def owner_values_of(owner: User, value_ids) -> list[ValueRow]:
    """The owner's values among ``value_ids`` (in that order) with budget, chain head, release count and earnings;
    no history (the owner API's list)."""
    values = {v.id: v for v in _values(owner).filter(id__in=list(value_ids))}
    rows = _rows([values[i] for i in value_ids if i in values])
    counts = dict(LedgerEntry.objects.of_values(list(values)).filter(kind__in=RELEASE_KINDS)
                  .values("value_id").annotate(n=Count("id")).order_by().values_list("value_id", "n"))
    earned = _earned_by_attribute(owner)
    for row in rows:
        row.releases = counts.get(row.value.id, 0)
        row.earned = earned.get(row.value.attribute_id, ZERO_MONEY)
    return rows


def owns_value(owner: User, value_id: int) -> bool:
    return Value.objects.filter(id=value_id, owner=owner).exists()


def owner_value_for_sale(owner: User, value_id: int) -> bool:
    """Whether the owner's value can still be sold (``ValueRow.for_sale``): not a one-shot value without its raw
    value."""
    return not (Value.objects.filter(owner=owner, id=value_id, raw_deleted_at__isnull=False)
                .exclude(attribute__mechanism=Attribute.Mechanism.GRADUAL_RR).exists())  # Attribute.is_oneshot


def owner_value(owner: User, value_id: int) -> Value:
    """The owner's value ``value_id`` (with attribute, dataset and budget), or ``Http404``."""
    value = _values(owner).filter(id=value_id).first()
    if value is None:
        raise Http404("No such value.")
    return value


def owner_value_row(owner: User, value_id: int, *, with_tag: bool = False) -> ValueRow:
    """The owner's value ``value_id`` with its history; ``with_tag`` also opens its PUM tag (uRR/uRAP)."""
    value = owner_value(owner, value_id)
    row = _rows([value])[0]
    if with_tag and row.takes_pum_tag:
        row.pum_tag = pum_tag(owner, value.id)
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
    mechanism: str = Purchase.Mechanism.GRADUAL_RR
    guarantee: str = ""
    parameters: dict = field(default_factory=dict)
    #: What the release added to the value's loss: its ε for a one-shot release; for a chain release only the part
    #: above the chain's loss before it (0 for a re-sale at or below it: "no charge").
    charged: Decimal | None = None
    #: The ledger entry's id: the value page's browser check marks the release verified by it (docs/receipts.md).
    entry_id: int | None = None

    @property
    def no_charge(self) -> bool:
        return not self.one_shot and self.charged is not None and self.charged <= 0

    @property
    def partly_charged(self) -> bool:
        """A chain release that raised the chain's loss by less than its ε (the rest was already spent)."""
        return not self.one_shot and self.charged is not None and 0 < self.charged < self.epsilon

    @property
    def is_survey(self) -> bool:
        return self.mechanism in SURVEY_MECHANISMS

    @property
    def mechanism_name(self) -> str:
        name = mechanism_name(self.mechanism)
        p = self.parameters or {}
        if self.mechanism == Purchase.Mechanism.RR3 and p.get("family") == "rr3_ddagger":
            name += f", with two levels set by the buyer: ε {_plain(p.get('eps1'))} and ε {_plain(p.get('eps2'))}"
        elif self.mechanism == Purchase.Mechanism.RR3 and p.get("family") == "ewrr3":
            name += ", the two other answers equally likely"
        elif self.mechanism == Purchase.Mechanism.LPP and "eps1" in p:
            name += f", with two levels set by the buyer: ε {_plain(p.get('eps1'))} and ε {_plain(p.get('eps2'))}"
        return name

    @property
    def guarantee_label(self) -> str:
        return guarantee_words(self.guarantee, self.mechanism, self.epsilon)

    @property
    def guarantee_code(self) -> str:
        """The ledger's guarantee (``ldp``, ``uldp``, ``per_report_non_collusion``; ``chain`` for chain releases)."""
        return self.guarantee or ("chain" if not self.one_shot else "")


def _plain(text) -> str:
    try:
        return format(Decimal(str(text)).normalize(), "f")
    except ArithmeticError:
        return str(text)


def _entries_of(owner: User, value_id: int | None = None):
    """The ledger entries of the owner's values (or of one of them): ``LedgerEntry.objects.of_values``, which reads
    only the compact rows holding them."""
    ids = Value.objects.filter(owner=owner).values_list("id", flat=True)
    if value_id is not None:
        ids = ids.filter(id=value_id)
    return LedgerEntry.objects.of_values(list(ids))


def _release_rows(owner: User, value_id: int | None = None):
    qs = _entries_of(owner, value_id).filter(kind__in=RELEASE_KINDS)
    # Only the buyer's organisation is read: never their username or e-mail.
    return qs.order_by("-created_at", "-id").values_list(
        "created_at", "value_id", "value__attribute__dataset__title", "value__attribute__name",
        "purchase__buyer__organisation", "epsilon", "chain_loss_after", "oneshot_loss_after", "purchase_id", "kind",
        "guarantee", "purchase__mechanism", "purchase__parameters", "chain_loss_before", "oneshot_loss_before", "id")


def _with_earnings(owner: User, rows) -> list[Release]:
    rows = list(rows)
    purchase_ids = {r[8] for r in rows if r[8] is not None}
    earned = _earned_by_purchase(owner, purchase_ids)
    return [Release(at=at, value_id=v, dataset=ds, attribute=attr, organisation=org or NO_ORGANISATION,
                    epsilon=eps, loss_after=chain + oneshot, earned=earned.get(p, ZERO_MONEY), purchase_id=p,
                    one_shot=kind == LedgerEntry.Kind.ONESHOT_RELEASE, guarantee=guarantee or "",
                    mechanism=mech or Purchase.Mechanism.GRADUAL_RR, parameters=params or {},
                    charged=(chain + oneshot) - (chain_before + oneshot_before), entry_id=entry_id)
            for at, v, ds, attr, org, eps, chain, oneshot, p, kind, guarantee, mech, params, chain_before,
            oneshot_before, entry_id in rows]


def releases(owner: User, *, value_id: int | None = None, limit: int | None = None) -> list[Release]:
    rows = _release_rows(owner, value_id)
    return _with_earnings(owner, rows[:limit] if limit else rows)


def release_page(owner: User, page: str | int | None, *, per_page: int = 50):
    """A page of the owner's releases, newest first: ``(page object, [Release, ...])``."""
    paginator = Paginator(_release_rows(owner), per_page)
    page_obj = paginator.get_page(page)
    return page_obj, _with_earnings(owner, page_obj.object_list)


@dataclass
class OneShotRelease:
    """A one-shot release or survey answer of one of the owner's values, as the owner should see it."""

    at: datetime
    value_id: int
    dataset: str
    attribute: str
    mechanism: str
    mechanism_label: str
    epsilon: Decimal  # the exact epsilon charged (added to the value's one-shot loss)
    guarantee: str
    guarantee_label: str  # e.g. "per-report eps, non-collusion assumption" for improved Christofides
    organisation: str
    purchase_id: int | None
    survey: bool
    earned: Decimal


def oneshot_releases(owner: User, *, value_id: int | None = None, limit: int | None = None) -> list[OneShotRelease]:
    """The owner's one-shot releases and survey answers, newest first: mechanism, charged epsilon, guarantee
    (with its label: improved Christofides is shown as per-report eps under a non-collusion assumption),
    buyer organisation (never the buyer's username), date, and what the owner earned from that purchase."""

    qs = _entries_of(owner, value_id).filter(kind=LedgerEntry.Kind.ONESHOT_RELEASE)
    rows = list(qs.order_by("-created_at", "-id").values_list(
        "created_at", "value_id", "value__attribute__dataset__title", "value__attribute__name", "purchase__mechanism",
        "epsilon", "guarantee", "purchase__buyer__organisation", "purchase_id")[:limit])
    purchase_ids = {r[8] for r in rows if r[8] is not None}
    earned = _earned_by_purchase(owner, purchase_ids)
    labels = dict(Purchase.Mechanism.choices)
    return [OneShotRelease(at=at, value_id=v, dataset=ds, attribute=attr, mechanism=mech or "",
                           mechanism_label=labels.get(mech, mech or ""), epsilon=eps, guarantee=g,
                           guarantee_label=guarantee_label(g), organisation=org or NO_ORGANISATION, purchase_id=p,
                           survey=mech in SURVEY_MECHANISMS, earned=_money(earned.get(p, ZERO_MONEY)))
            for at, v, ds, attr, mech, eps, g, org, p in rows]


def pum_tag(owner: User, value_id: int) -> str | None:
    """The owner's personal sensitivity tag (PUM) of a uRR/uRAP value, opened for the owner's own eyes: the tag
    name, or ``None`` when untagged, deleted or not a uRR/uRAP value.  ``Http404`` for another owner's value."""

    value = owner_value(owner, value_id)
    attribute = value.attribute
    sealed, key_id = Value.objects.filter(id=value.id).values_list("input_sealed", "value_key_id").get()
    if not attribute.record.uses_sensitive or sealed is None:
        return None
    try:
        payload = sealing.open_inputs([bytes(sealed)], [value.owner_id], [attribute.id],
                                      inputs.payload_bytes(attribute), key_id)
    except sealing.SealBroken:
        return None
    code = int(inputs.pum_tags_of(payload)[0])
    return attribute.pum_tags[code] if 0 <= code < len(attribute.pum_tags) else None


def release_count(owner: User) -> int:
    return _entries_of(owner).filter(kind__in=RELEASE_KINDS).count()


def earnings_total(owner: User) -> Decimal:
    """Everything the owner has earned: the credits of their earnings account (settlements, and purchases from
    before settlements; payouts are not counted) plus their earnings not settled yet
    (``selectors.unsettled_earnings``), exactly."""
    return _money(selectors.earnings_credited(owner) + selectors.unsettled_earnings(owner))


# ------------------------------------------------------------------------------------------- contributing

@dataclass
class Offer:
    attribute: Attribute
    contributed_value_id: int | None

    @property
    def labels(self) -> list[str]:
        return labels_of(self.attribute)

    @property
    def labels_text(self) -> str:
        """The labels (item names) in a line: the first ten, then how many more."""
        labels = self.labels
        if self.attribute.kind == Attribute.Kind.GRAPH and not self.attribute.labels:
            return f"{len(labels)} items, numbered 0 to {len(labels) - 1}"
        if len(labels) <= 10:
            return ", ".join(labels)
        return ", ".join(labels[:10]) + f" and {len(labels) - 10} more"

    @property
    def mechanism_name(self) -> str:
        return mechanism_name(self.attribute.mechanism)

    @property
    def mechanism_plain(self) -> str:
        return mechanism_name_parts(self.attribute.mechanism)[0]

    @property
    def mechanism_technical(self) -> str:
        return mechanism_name_parts(self.attribute.mechanism)[1]

    @property
    def kind_plain(self) -> str:
        """The attribute's kind without the technical name its label ends with ("Three states (RR3)")."""
        return _name_parts(self.attribute.get_kind_display())[0]


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


def attribute_device_held(attribute: Attribute) -> bool:
    """Whether ``attribute``'s values are kept on their owners' devices (docs/custody.md): it takes owner-held
    values, and at least half of the values contributed to it are.  The contribute page then offers "keep my value
    on this device" ticked."""
    if not attribute.supports_owner_custody:
        return False
    counts = dict(Value.objects.filter(attribute=attribute).values("custody").annotate(n=Count("id")).order_by()
                  .values_list("custody", "n"))
    held = counts.get(Value.Custody.OWNER, 0)
    return held > 0 and held >= counts.get(Value.Custody.SERVICE, 0)


# ----------------------------------------------------------------------------------------------- export

#: The guarantee against the service of a value the service holds (docs/custody.md).
SERVICE_HOLDS_IT = "none: the service holds your value"


def _s(d) -> str | None:
    return None if d is None else str(d)


def _m(d) -> str:
    """An amount as machines read it: exactly 4 places (docs/money.md#how-amounts-are-shown)."""
    return machine_amount(d)


def _t(dt) -> str | None:
    return None if dt is None else dt.isoformat()


def export(owner: User) -> dict:
    """All of ``owner``'s data, JSON-ready (decimals as exact strings, times in ISO 8601). Theirs only."""
    rows = owner_values(owner)
    by_value = defaultdict(list)
    for r in releases(owner):
        by_value[r.value_id].append(r)
    entries = selectors.owner_entries(owner)
    values = []
    for row in rows:
        b, v = row.budget, row.value
        values.append({
            "id": v.id,
            "dataset": v.attribute.dataset.title,
            "attribute": v.attribute.name,
            "kind": v.attribute.kind,
            "mechanism": v.attribute.mechanism,
            "custody": v.custody,
            "raw_value": row.raw,
            **({"raw_value_kept_on": "a device, not the service: the service never received it"}
               if row.owner_held else {}),
            **({"pum_tag": pum_tag(owner, v.id)} if row.takes_pum_tag else {}),
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
            "chain": None if row.is_oneshot else {"head": _s(row.head), "length": row.length,
                                                  **({"upload_level": _s(row.upload_level)} if row.owner_held
                                                     else {})},
            "guarantee": {"against_buyers": _s(b.loss),
                          "against_service": (_s(row.service_guarantee) if row.owner_held
                                              else SERVICE_HOLDS_IT)},
            "earned": _m(row.earned),
            "releases": [{"at": _t(r.at), "organisation": r.organisation, "epsilon": _s(r.epsilon),
                          "loss_after": _s(r.loss_after), "earned": _m(r.earned), "purchase": r.purchase_id,
                          "one_shot": r.one_shot, "mechanism": r.mechanism, "guarantee": r.guarantee,
                          "guarantee_label": r.guarantee_label} for r in by_value[v.id]],
            "history": [{"at": _t(e.at), "event": e.kind, "ceiling": _s(e.ceiling), "loss": _s(e.loss),
                         "chain_loss": _s(e.chain_loss), "oneshot_loss": _s(e.oneshot_loss),
                         "epsilon": _s(e.epsilon), **({"guarantee": e.guarantee} if e.guarantee else {})}
                        for e in row.events],
        })
    return {
        "format": "ldpmarket-owner-export/1",
        "exported_at": timezone.now().isoformat(),
        "owner": {"username": owner.username, "email": owner.email, "joined": _t(owner.date_joined)},
        "values": values,
        "earnings": {
            "currency": currency(),
            "total": _m(sum((e[1] for e in entries), ZERO_MONEY)),
            "balance": _m(selectors.balance(owner, selectors.KIND_OF_ROLE["owner"])),
            "pending": _m(selectors.unsettled_earnings(owner)),
            "entries": [{"at": _t(at), "amount": _m(a), "balance_after": _m(bal), "memo": memo, "purchase": p}
                        for at, a, bal, memo, p in entries],
        },
    }
