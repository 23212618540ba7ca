"""The errors the buyer API raises itself, each with its own status, problem type and title (docs/errors.md).

The service's own errors (``PurchaseError``, ``NothingToSell``, ``InFlight`` and the rest) are declared in
``ldpmarket.problems``, the one module of domain errors; these are the
conditions only the API checks.
"""
from __future__ import annotations

from ldpmarket.api import Problem


class PurchaseNotCompleted(Problem):
    status = 409
    slug = "purchase-not-completed"
    title = "Purchase not completed"


class NoOutputs(Problem):
    """A completed purchase that released no values: there is nothing to estimate from."""

    status = 409
    slug = "no-outputs"
    title = "No outputs"
