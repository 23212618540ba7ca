"""Recovery of stranded work: purchases and chain extensions nobody is running any more (docs/operations.md).

Celery beat runs :func:`sweep` every ``LDP_SWEEP_INTERVAL_SECONDS`` (``market.tasks.sweep_stranded``; also
``manage.py sweep_stranded``).  The broker's visibility timeout is not the recovery path: it is an hour.

**Purchases.**  A purchase is *stranded* when it is pending or running, nobody holds it (its row is not
locked: ``purchase_execute`` holds it for its whole transaction) and its
``heartbeat_at`` (set when it is claimed, started by a worker or sent again) is older than
``LDP_STALE_AFTER_SECONDS``: its worker was killed (its transaction rolled back, nothing was written), its
message was lost with the broker, or it could not be enqueued at all.  The sweeper sends it again
(``run_purchase``, on commit), unless workers have already started it ``LDP_PURCHASE_MAX_ATTEMPTS`` times:
then it fails it, saying so (a purchase that kills its worker is not retried for ever; the client may retry it
with the same Idempotency-Key).  Running it again is safe: execution is idempotent and charges at most once.

**Chain extensions.**  An attribute's extension is *stranded* when one of its chains could grow (its next
grid point is within its ceiling, the raw value is held) since longer than ``LDP_STALE_AFTER_SECONDS`` (its
budget row has not changed since), and no extension of it is running (``chains_extend`` holds a shared
advisory lock per attribute while it runs; a killed worker's session, and so its lock, ends with it).  Each
batch of an extension commits on its own, so the chains record its progress; the sweeper sends
``extend_chains`` again, which grows what is left.  It sends each attribute at most once per staleness
window (noted in the cache: best-effort), so a busy queue does not fill with copies.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from accounts.epsilon import MICRO
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import BudgetAccount
from ldpmarket import jobs, storage
from market.chains.extension import EXTENSION_LOCK, extension_lock_key

from .models import Attribute, ChainBlock, Purchase, Value

logger = logging.getLogger(__name__)

@dataclass
class SweepReport:
    resumed: list[int] = field(default_factory=list)  # purchases sent again
    failed: list[int] = field(default_factory=list)  # purchases failed (too many attempts)
    extensions: list[int] = field(default_factory=list)  # attributes whose extension was sent again

    def __str__(self) -> str:
        return (f"purchases sent again: {self.resumed or 'none'}; purchases failed: {self.failed or 'none'}; "
                f"extensions sent again: {self.extensions or 'none'}")


def sweep(*, now: datetime | None = None) -> SweepReport:
    """Send again (or fail) stranded purchases and extensions; returns what it did."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.LDP_STALE_AFTER_SECONDS)
    report = SweepReport()
    report.resumed, report.failed = sweep_purchases(cutoff=cutoff, now=now)
    report.extensions = sweep_extensions(cutoff=cutoff)
    if report.resumed or report.failed or report.extensions:
        logger.warning("recovered stranded work: %s", report)
    return report


def sweep_purchases(*, cutoff: datetime, now: datetime) -> tuple[list[int], list[int]]:
    """One transaction: the stranded purchases, locked (``SKIP LOCKED``: one a worker holds is not stranded, and
    two sweepers never take the same one); each is failed or given a fresh heartbeat and sent on commit."""
    limit = settings.LDP_PURCHASE_MAX_ATTEMPTS
    with transaction.atomic():
        take_lock(Lock.PURCHASE)
        stranded = list(Purchase.objects.select_for_update(skip_locked=True, of=("self",))
                        .filter(status__in=[Purchase.Status.PENDING, Purchase.Status.RUNNING],
                                heartbeat_at__lt=cutoff)
                        .order_by("id").values_list("id", "attempts"))
        failed = [pid for pid, attempts in stranded if attempts >= limit]
        resumed = [pid for pid, attempts in stranded if attempts < limit]
        if failed:
            Purchase.objects.filter(id__in=failed).update(
                status=Purchase.Status.FAILED,
                error=f"The purchase was started {limit} times and its worker stopped each time, so it was "
                      f"stopped; nothing was charged. Retry it with the same Idempotency-Key.")
        if resumed:
            Purchase.objects.filter(id__in=resumed).update(heartbeat_at=now)
            for pid in resumed:
                jobs.enqueue(jobs.RUN_PURCHASE, pid)
    return resumed, failed


def stranded_extensions(*, cutoff: datetime) -> list[int]:
    """Attributes with a chain that could grow since before ``cutoff`` (its next grid point after its head is
    within its ceiling and the grid, its budget unchanged since) and no extension running.  One set-based query:
    each value's head is read from its block's ``heads`` in SQL (``storage.int64_le_at``), each block's copied into
    memory once (``storage.in_memory``), and only the heads travel on to the joins (``storage.unflattened``): read
    naively, PostgreSQL decompressed a block's heads once per value (22-28 s at 10^6 values), as
    ``audit.metrics.chains_behind_ceiling`` measured."""
    head = storage.int64_le_at("k.heads", "v.slot")
    blocks = storage.unflattened(f"SELECT id, {storage.in_memory('heads')} AS heads FROM {ChainBlock._meta.db_table}")
    heads = storage.unflattened(f"SELECT v.id, v.attribute_id, {head} AS head FROM {Value._meta.db_table} v "
                                f"JOIN {blocks} k ON k.id = v.block_id WHERE v.input_sealed IS NOT NULL")
    micro = lambda column: f"CAST(round({column} * {MICRO}) AS bigint)"  # noqa: E731
    start, step = micro("a.grid_start"), micro("a.grid_step")
    following = f"({start} + ((x.head - {start}) / {step} + 1) * {step})"
    ceiling, stop = micro("b.ceiling"), micro("a.grid_stop")
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT DISTINCT x.attribute_id FROM {heads} x "
            f"JOIN {BudgetAccount._meta.db_table} b ON b.value_id = x.id "
            f"JOIN {Attribute._meta.db_table} a ON a.id = x.attribute_id "
            f"WHERE b.updated_at < %s AND a.mechanism = %s AND x.head > 0 "
            f"AND {following} <= CASE WHEN {ceiling} < {stop} THEN {ceiling} ELSE {stop} END "
            f"ORDER BY x.attribute_id", [cutoff, Attribute.Mechanism.GRADUAL_RR.value])
        attributes = [row[0] for row in cur.fetchall()]
    running = extensions_running()
    return [a for a in attributes if extension_lock_key(a)[1] not in running]


def extensions_running() -> set[int]:
    """Second keys of the extension locks held now (PostgreSQL; elsewhere nothing runs concurrently)."""
    return storage.advisory_locks_held(EXTENSION_LOCK)


def sweep_extensions(*, cutoff: datetime) -> list[int]:
    sent = []
    for attribute_id in stranded_extensions(cutoff=cutoff):
        if not _first_in_window(f"sweeper:extension:{attribute_id}"):
            continue  # sent again less than a staleness window ago: still queued, or about to run
        jobs.enqueue(jobs.EXTEND_CHAINS, attribute_id)
        sent.append(attribute_id)
    return sent


def _first_in_window(key: str) -> bool:
    """Whether this is the first time ``key`` is seen in the staleness window (best-effort: without a cache,
    always)."""
    try:
        return bool(cache.add(key, 1, timeout=settings.LDP_STALE_AFTER_SECONDS))
    except Exception:  # noqa: BLE001 - the cache is an optimisation here
        return True
