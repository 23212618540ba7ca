"""A completed purchase's estimate, computed once per method and cached: a completed purchase never changes,
so its estimate is kept for a day under a key that names its completion time and the method
(docs/client.md#python, docs/mechanisms-reference.md#consistent-estimates)."""
from __future__ import annotations

from django.core.cache import cache

from market.models import Purchase
from market.purchases import consistent, oneshot_stats
from market.purchases.oneshot_specs import spec_of
from market.selectors import all_outputs, estimate_outputs


def purchase_estimate(purchase: Purchase, *, method: str = "unbiased") -> dict:
    """The estimate of a completed purchase by ``method`` (``consistent.METHODS``; cached)."""
    if method not in consistent.METHODS:
        raise ValueError(f"method must be one of {', '.join(consistent.METHODS)}, got {method!r}")
    completed = purchase.completed_at.timestamp() if purchase.completed_at else 0
    key = f"purchase-estimate:v2:{purchase.id}:{completed}:{method}"
    hit = cache.get(key)
    if hit is not None:
        return hit
    _, outputs = all_outputs(purchase)
    if purchase.is_oneshot:
        result = oneshot_stats.estimate(purchase, outputs)
        spec = spec_of(purchase)
        result = consistent.oneshot_estimate(spec.record, purchase.attribute.shape, outputs,
                                             purchase.charged_epsilon, spec.parameters, result, method=method)
    else:
        result = estimate_outputs(purchase.attribute, outputs, purchase.epsilon)
        result = consistent.chain_estimate(purchase.attribute, outputs, purchase.epsilon, result, method=method)
    cache.set(key, result, timeout=24 * 3600)
    return result
