"""Celery tasks: thin wrappers over services. They take ids, are idempotent, and retry a bounded number of times.

``acks_late`` with ``reject_on_worker_lost`` (settings) means a task whose
pool process dies is delivered again; each batch is one transaction, so a re-run
completes exactly what the dead worker rolled back.  A whole worker killed, or a
message lost with the broker, is recovered by ``sweep_stranded`` (beat), not by the
broker's visibility timeout (docs/operations.md).

Results live in the database (a purchase's status, the chains), so no task stores
one in the result backend: a broker or backend outage cannot fail a task that
has done its work.
"""
from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.db import InterfaceError, OperationalError

from accounts.ledger.checkpoints import blocks_awaiting_checkpoint, checkpoint_make
from accounts.ledger.tiles import store_full_tiles
from accounts.ledger.witnesses import due_witness_ids, witness_submit
from accounts.money.services import earnings_settle, settle_all
from accounts.services import schedules_advance
from ldpmarket.problems import ChainConflict, PurchaseConflict, PurchaseError
from market.chains.extension import chains_extend
from market.purchases.execution import purchase_fail
from market.purchases.pipeline import purchase_run

from .models import Purchase
from .sweeper import sweep

logger = logging.getLogger(__name__)

RETRY = {"autoretry_for": (OperationalError, InterfaceError), "retry_backoff": True, "max_retries": 5}


@shared_task(time_limit=60 * 60, soft_time_limit=55 * 60, ignore_result=True,
             **{**RETRY, "autoretry_for": RETRY["autoretry_for"] + (ChainConflict,)})
def extend_chains(attribute_id: int, value_ids: list[int] | None = None) -> int:
    return chains_extend(attribute_id=attribute_id, value_ids=value_ids)


@shared_task(time_limit=10 * 60, soft_time_limit=9 * 60, ignore_result=True, **RETRY)
def advance_schedules() -> int:
    return schedules_advance()


@shared_task(time_limit=5 * 60, soft_time_limit=4 * 60, ignore_result=True, **RETRY)
def make_ledger_checkpoint() -> int:
    """Sign a checkpoint of the ledger's new blocks (``accounts.ledger.checkpoints``; idempotent: none when no block was
    written); the tree size it covers.  While blocks remain (one checkpoint takes at most
    ``LDP_CHECKPOINT_MAX_ENTRIES`` entries), the next checkpoint is enqueued."""
    checkpoint = checkpoint_make()
    if checkpoint is not None and checkpoint.appended:
        store_full_tiles(checkpoint.tree_size)  # the tiled log's new full tiles, off the checkpoint's transaction
        if blocks_awaiting_checkpoint():
            make_ledger_checkpoint.delay()
    return checkpoint.tree_size if checkpoint else 0


@shared_task(time_limit=2 * 60, soft_time_limit=100, ignore_result=True, **RETRY)
def submit_checkpoint(witness_id: int) -> str:
    """Send the latest checkpoint to one witness and store its cosignature (``accounts.ledger.witnesses``;
    idempotent: a witness that cosigned it is not asked again).  A refusal or a witness that is down is recorded
    and retried later by ``submit_due_checkpoints``, never by this task."""
    return witness_submit(witness_id=witness_id)


@shared_task(time_limit=5 * 60, soft_time_limit=4 * 60, ignore_result=True, **RETRY)
def submit_due_checkpoints() -> int:
    """Beat: submit the latest checkpoint to each witness that has not cosigned it and whose retry time has come;
    how many were tried."""
    due = due_witness_ids()
    for witness_id in due:
        witness_submit(witness_id=witness_id)
    return len(due)


@shared_task(time_limit=10 * 60, soft_time_limit=9 * 60, ignore_result=True, **RETRY)
def settle_earnings(shard: int) -> int:
    """Settle an attribute's owners' earnings (``accounts.money.services.earnings_settle``; idempotent), enqueued on the
    commit of each purchase that paid owners; the number of settlements made (each of a bounded batch)."""
    made = 0
    while made < 100 and earnings_settle(shard=shard) is not None:
        made += 1
    return made


@shared_task(time_limit=10 * 60, soft_time_limit=9 * 60, ignore_result=True, **RETRY)
def settle_all_earnings() -> int:
    """Beat: settle every attribute's unsettled earnings (a purchase's own settlement task may have been lost)."""
    return settle_all()


@shared_task(time_limit=5 * 60, soft_time_limit=4 * 60, ignore_result=True, **RETRY)
def sweep_stranded() -> str:
    """Send again (or fail) the purchases and chain extensions nobody is running any more (``market.sweeper``)."""
    return str(sweep())


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, time_limit=30 * 60, soft_time_limit=28 * 60,
             max_retries=5, ignore_result=True)
def run_purchase(self, purchase_id: int) -> str:
    """Run a claimed purchase, one-shot purchase or survey (API: large ones answer 202 and enqueue this on commit).

    One service call, ``market.purchases.pipeline.purchase_run``: idempotent (a completed purchase is returned as it
    is), and its single transaction means a worker killed mid-way leaves nothing behind (a killed pool process's
    message is redelivered, ``acks_late``; a killed worker's purchase is sent again by the sweeper).  It marks
    the purchase ``running`` (an attempt, a heartbeat) and records a refused one (``PurchaseError``: short of
    credit, ...) as failed with the reason; here a concurrent change is retried at once and database hiccups
    with backoff, a bounded number of times.
    Progress goes to the cache, best-effort: a cache outage never fails the purchase.
    """
    if not Purchase.objects.filter(id=purchase_id).exists():
        return "missing"
    try:
        return purchase_run(purchase_id=purchase_id, conflicts_retried=True, skip_if_held=True).status
    except PurchaseConflict as exc:  # a concurrent change: nothing was written, running again succeeds
        raise self.retry(exc=exc, countdown=1) from None
    except PurchaseError:  # recorded as failed, with the reason, by purchase_run
        return Purchase.Status.FAILED
    except SoftTimeLimitExceeded:
        purchase_fail(purchase_id=purchase_id, error="The purchase took too long and was stopped; nothing was "
                                                     "charged. Retry it with the same Idempotency-Key.")
        return Purchase.Status.FAILED
    except (OperationalError, InterfaceError) as exc:
        if self.request.retries >= self.max_retries:
            purchase_fail(purchase_id=purchase_id, error=f"The database was unavailable: {exc}")
            raise
        raise self.retry(exc=exc, countdown=min(60, 2 ** self.request.retries)) from None
