"""What a buyer's web pages read (docs/buyers.md): the catalog in plain words, a buyer's own purchases and their
progress, the credit and its statement.  Selectors: only reads (``market.selectors``,
``accounts.money.selectors``), as ``market.values.owner_rows`` is for the owner portal."""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from accounts import roles
from accounts.epsilon import to_micro
from accounts.money import selectors as money_selectors
from accounts.money.units import units_to_decimal
from market import selectors
from market.models import SURVEY_MECHANISMS, Attribute, Dataset, Purchase
from market.values import inputs as domain
from market.values.owner_rows import mechanism_name

#: Purchases per page of the list; statement entries per page of the account.
PURCHASES_PER_PAGE = 25
STATEMENT_PER_PAGE = 25


def credit(buyer) -> Decimal:
    """The buyer's credit balance (0 when it was never opened)."""
    return money_selectors.balance(buyer, money_selectors.KIND_OF_ROLE["buyer"])


def statement(buyer):
    """Every movement of the buyer's credit, newest first."""
    return money_selectors.statement(buyer, money_selectors.KIND_OF_ROLE["buyer"])


def kind_words(attribute: Attribute) -> str:
    """What a value of ``attribute`` is, in plain words."""
    kind = attribute.kind
    if kind == Attribute.Kind.NUMERIC:
        return f"a number between {_plain(attribute.low)} and {_plain(attribute.high)}"
    if kind == Attribute.Kind.BINARY:
        labels = domain.labels_of(attribute)
        return f"yes or no ({' / '.join(labels)})" if labels else "yes or no"
    if kind == Attribute.Kind.STRING:
        return (f"a short text, released as {attribute.num_bits} randomized bits of a Bloom filter "
                f"(RAPPOR: you estimate how often each bit is set)")
    if kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.TERNARY, Attribute.Kind.DISTRIBUTION):
        labels = domain.labels_of(attribute)
        shown = ", ".join(labels[:12]) + (f" and {len(labels) - 12} more" if len(labels) > 12 else "")
        return f"one of {len(labels)} answers: {shown}"
    return attribute.get_kind_display()


def _plain(d) -> str:
    if d is None:
        return "?"
    d = Decimal(str(d))
    return "0" if d == 0 else format(d.normalize(), "f")


@dataclass
class AttributeOffer:
    attribute: Attribute
    kind: str
    mechanism: str
    chain: bool
    histogram: list[tuple[Decimal, int, Decimal | None]]  # (epsilon, values available, price per value)
    values: int
    max_epsilon: Decimal | None
    for_sale: bool
    suggested: Decimal | None = None


@dataclass
class DatasetOffers:
    dataset: Dataset
    attributes: list[AttributeOffer] = field(default_factory=list)


def catalog() -> list[DatasetOffers]:
    """Every dataset and its attributes, with what is available at which epsilon (the API's catalog summary:
    ``selectors.ceiling_histograms``, with the highest epsilon anything is available at) and the price per value
    there."""
    datasets = list(Dataset.objects.prefetch_related("attributes").order_by("id"))
    attributes = [a for d in datasets for a in d.attributes.all()]
    histograms = selectors.ceiling_histograms(attributes)
    out = []
    for d in datasets:
        offers = DatasetOffers(dataset=d)
        for a in sorted(d.attributes.all(), key=lambda a: a.id):
            policy = selectors.price_policy_or_none(a)
            summary = selectors.histogram_summary(histograms[a.id])
            avail = selectors.availability(histograms[a.id])
            if avail["max_epsilon"] is not None and all(e != avail["max_epsilon"] for e, _ in summary):
                # the highest ε anything is available at, which the even spacing of the summary may skip
                summary = sorted([*summary, (avail["max_epsilon"], avail["at_max_epsilon"])])
            rows = [(e, n, None if policy is None else units_to_decimal(int(policy.units(np.array([to_micro(e)]))[0])))
                    for e, n in summary]
            offers.attributes.append(AttributeOffer(
                attribute=a, kind=kind_words(a), mechanism=mechanism_name(a.mechanism), chain=a.record.is_chain,
                histogram=rows, values=avail["values"], max_epsilon=avail["max_epsilon"],
                for_sale=policy is not None and avail["max_epsilon"] is not None,
                suggested=summary[0][0] if summary else None))
        out.append(offers)
    return out


def attribute_or_none(attribute_id: int) -> Attribute | None:
    return Attribute.objects.select_related("dataset").filter(id=attribute_id).first()


def purchases_of(buyer):
    """The buyer's own purchases (not surveys: the API has those), newest first."""
    qs = Purchase.objects.select_related("attribute__dataset").exclude(mechanism__in=SURVEY_MECHANISMS).order_by("-id")
    return roles.visible_purchases(buyer, qs).filter(buyer_id=buyer.id)


def purchase_of(buyer, purchase_id: int) -> Purchase | None:
    """The buyer's purchase ``purchase_id``, or None (none, or another buyer's)."""
    found = purchases_of(buyer).filter(id=purchase_id).first()
    if found is None or not roles.can_read_purchased_data(buyer, found):
        return None
    return found


def purchase_made_with(buyer, idempotency_key: str) -> bool:
    """Whether the buyer already made a purchase under ``idempotency_key`` (a replay of a Buy button)."""
    return Purchase.objects.filter(buyer_id=buyer.id, idempotency_key=idempotency_key).exists()


def progress(purchase: Purchase) -> dict | None:
    """A pending or running purchase's progress (``processed``, ``total``, ``percent``), or None."""
    if purchase.status not in (Purchase.Status.PENDING, Purchase.Status.RUNNING):
        return None
    p = selectors.progress_get(purchase.id) or {"processed": 0, "total": 0}
    total = int(p.get("total") or 0)
    processed = int(p.get("processed") or 0)
    return {"processed": processed, "total": total, "percent": (100 * processed // total) if total else 0}
