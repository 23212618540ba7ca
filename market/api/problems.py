"""The errors the buyer API raises itself, each with its own status, problem type and title (docs/errors.md).

The service's own errors (``PurchaseError`` and the rest) are declared in
``ldpmarket.problems``, the one module of domain errors; these are the
conditions only the API checks.
"""
from __future__ import annotations

from ldpmarket.api import Problem


class NotForSale(Problem):
    """The attribute's price policy is not valid, so nothing of it is sold."""

    status = 409
    slug = "not-for-sale"
    title = "Not for sale"


class NothingToSell(Problem):
    """No value of the attribute can be released at this epsilon now (``candidates`` and ``excluded`` say why)."""

    status = 400
    slug = "nothing-to-sell"
    title = "Nothing to sell at this epsilon"


class InFlight(Problem):
    """A retry with the same Idempotency-Key while the purchase still runs."""

    status = 409
    slug = "in-flight"
    title = "Still in flight"


class PurchaseNotCompleted(Problem):
    status = 409
    slug = "purchase-not-completed"
    title = "Purchase not completed"


class NoOutputs(Problem):
    """A completed purchase that released no values: there is nothing to estimate from."""

    status = 409
    slug = "no-outputs"
    title = "No outputs"
