"""Quotes: what a purchase would include and cost, signed so that a purchase can be made from it
(docs/client.md#python: a purchase made from a quote pays no more than quoted).

A service: ``market.selectors.quote`` / ``oneshot_quote`` read what a purchase would include now (no locks);
this module signs the request behind it into the quote's ``token`` (``django.core.signing``, salted, expiring
after ``LDP_QUOTE_TTL_SECONDS``) and opens a token again when a purchase names it.
"""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core import signing

from ldpmarket.problems import QuoteInvalid
from market import selectors
from market.models import Attribute
from market.purchases.pricing import PricePolicy

QUOTE_SALT = "ldpmarket.quote.v1"


def quote_issue(*, buyer_id: int, attribute: Attribute, epsilon: Decimal, cohort: int | None,
                policy: PricePolicy) -> selectors.Quote:
    """The quote of a chain purchase at ``epsilon`` (``selectors.quote``), with its signed token."""
    q = selectors.quote(buyer_id=buyer_id, attribute=attribute, epsilon=epsilon, cohort=cohort, policy=policy)
    q.token = signing.dumps({"b": buyer_id, "a": attribute.id, "e": str(epsilon), "c": cohort, "p": str(q.price),
                             "n": q.included}, salt=QUOTE_SALT, compress=True)
    return q


def oneshot_quote_issue(*, buyer_id: int, attribute: Attribute, spec, cohort: int | None,
                        policy: PricePolicy) -> selectors.Quote:
    """The quote of a one-shot purchase or survey (``selectors.oneshot_quote``), with its signed token."""
    q = selectors.oneshot_quote(buyer_id=buyer_id, attribute=attribute, spec=spec, cohort=cohort, policy=policy)
    q.token = signing.dumps({"b": buyer_id, "a": attribute.id, "e": None if spec.epsilon is None else str(spec.epsilon),
                             "c": cohort, "p": str(q.price), "n": q.included, "m": spec.mechanism,
                             "x": spec.parameters}, salt=QUOTE_SALT, compress=True)
    return q


def quote_open(token: str, *, buyer_id: int, check_expiry: bool = True) -> dict:
    """The request a quote token stands for: ``{"attribute", "epsilon", "cohort", "price", "included"}``.

    ``check_expiry=False`` only to recognise a replay of a purchase already made from the quote.
    """
    try:
        data = signing.loads(token, salt=QUOTE_SALT,
                             max_age=settings.LDP_QUOTE_TTL_SECONDS if check_expiry else None)
    except signing.SignatureExpired:
        raise QuoteInvalid("This quote has expired; ask for a new one.") from None
    except signing.BadSignature:
        raise QuoteInvalid("This is not a quote this service issued.") from None
    if data.get("b") != buyer_id:
        raise QuoteInvalid("This quote was issued to another buyer.")
    return {"attribute": data["a"], "epsilon": None if data["e"] is None else Decimal(data["e"]), "cohort": data["c"],
            "price": Decimal(data["p"]), "included": data["n"], "mechanism": data.get("m", "gradual_rr"),
            "parameters": data.get("x", {})}
