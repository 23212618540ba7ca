"""A completed purchase's estimate, computed once and cached: a completed purchase never changes,
so its estimate is kept for a day under a key that names its completion time (docs/client.md#python)."""
from __future__ import annotations

from django.core.cache import cache

from market.models import Purchase
from market.purchases import oneshot_stats
from market.selectors import all_outputs, estimate_outputs


def purchase_estimate(purchase: Purchase) -> dict:
    """``estimate_outputs`` of a completed purchase (cached: a completed purchase never changes)."""
    key = f"purchase-estimate:v1:{purchase.id}:{purchase.completed_at.timestamp() if purchase.completed_at else 0}"
    hit = cache.get(key)
    if hit is not None:
        return hit
    _, outputs = all_outputs(purchase)
    if purchase.is_oneshot:
        result = oneshot_stats.estimate(purchase, outputs)
    else:
        result = estimate_outputs(purchase.attribute, outputs, purchase.epsilon)
    cache.set(key, result, timeout=24 * 3600)
    return result
