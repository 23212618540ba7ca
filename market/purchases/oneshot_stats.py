"""Predicted errors (quotes) and estimates (completed purchases) of the one-shot mechanisms and surveys.

Pure reads: each is its mechanism's record's hook (``mechanisms.registry``: ``predict``, ``estimate``) over the
attribute's public facts (``Attribute.shape``), docs/mechanisms.md#the-mechanism-registry.  A prediction is a
function of (mechanism, parameters, number of values) only, so a quote reveals nothing about the data.
"""
from __future__ import annotations

import numpy as np

from ldpmarket.problems import TooFewRespondents
from market.models import Attribute, Purchase
from market.purchases.oneshot_specs import Spec, spec_of
from market.values.inputs import PredictedError
from mechanisms import registry
from mechanisms.release_stats import empty_result


def output_labels(attribute: Attribute) -> list[str] | None:
    """Names of a one-shot attribute's single outputs (uRR, RR3, private sample); ``None`` for vectors."""
    return attribute.record.output_labels(attribute.shape)


def predicted(attribute: Attribute, spec: Spec, n: int) -> PredictedError | None:
    """The standard errors a request over ``n`` values would give (``None`` when n = 0 or no closed form)."""
    if n <= 0 or spec.record.predict is None:
        return None
    try:
        return spec.record.predict(attribute.shape, spec.charged, spec.parameters, n)
    except (TooFewRespondents, registry.TooFew):
        return None


def survey_variance(spec: Spec, n: int, pi: float) -> float:
    """A survey's closed-form census variance for ``n`` respondents at the proportion ``pi``."""
    return spec.record.variance(spec.epsilon, spec.parameters, n, pi)


def estimate(purchase: Purchase, outputs: np.ndarray) -> dict:
    """Estimates from a completed one-shot purchase's outputs ((n, width) ints), shaped like ``selectors``'."""
    spec = spec_of(purchase)
    result = empty_result(int(outputs.shape[0]), float(purchase.charged_epsilon), purchase.mechanism,
                          purchase.guarantee)
    if spec.record.estimate is None:  # pragma: no cover - surveys carry their result
        raise ValueError(f"no estimate for {purchase.mechanism}")
    return result | spec.record.estimate(purchase.attribute.shape, outputs, purchase.charged_epsilon,
                                         spec.parameters)
