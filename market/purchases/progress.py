"""A running purchase's progress, written to the cache, best-effort (docs/operations.md).

The write side of progress (``market.selectors.progress_get`` reads it): a purchase reports how many of its
values it has processed; the API shows it on a 202 purchase while a worker runs it.
"""
from __future__ import annotations

import logging

from django.core.cache import cache

from market.selectors import progress_key

logger = logging.getLogger(__name__)


def progress_set(purchase_id: int, processed: int, total: int) -> None:
    """Record a purchase's progress in the cache, best-effort: it is called inside the purchase's transaction but
    is no part of it, so a cache error is logged and ignored (it never fails, rolls back or strands the
    purchase; the cache backend bounds how long an unreachable Redis can hold it up, docs/operations.md)."""
    try:
        cache.set(progress_key(purchase_id), {"processed": int(processed), "total": int(max(total, processed))},
                  timeout=24 * 3600)
    except Exception:  # noqa: BLE001 - progress is informative only
        logger.warning("could not record the progress of purchase %s", purchase_id, exc_info=True)


def progress_reporter(purchase_id: int, total: int):
    """The ``progress`` callable for ``purchase_execute``: ``progress(done, steps)`` is scaled to ``total`` values."""
    def report(done: int, steps: int) -> None:
        progress_set(purchase_id, (done * total) // steps if steps else total, total)

    return report
