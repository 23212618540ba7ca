"""Sending Celery tasks from services, on commit, by name (docs/architecture.md#layers).

Tasks are interfaces (``market.tasks`` calls the services), so a service that
starts work in the background must not import them: it names the task.
``celery.signature(name)`` resolves the registered task through the app
(``app.tasks``, filled by autodiscovery), so ``CELERY_TASK_ALWAYS_EAGER`` (the
embedded set-up and the tests) still runs it in-process, and a real broker
gets the same message ``task.delay`` would send.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar

from celery import signature
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)

#: The tasks services start (``market.tasks``).
EXTEND_CHAINS = "market.tasks.extend_chains"
RUN_PURCHASE = "market.tasks.run_purchase"
SETTLE_EARNINGS = "market.tasks.settle_earnings"
SUBMIT_CHECKPOINT = "market.tasks.submit_checkpoint"
MAKE_CHECKPOINT = "market.tasks.make_ledger_checkpoint"


def enqueue(task_name: str, *args) -> None:
    """Send the task ``task_name(*args)`` once the current transaction commits (at once outside one).

    If the broker cannot take it, the error is logged and nothing else happens: the work is already recorded
    in the database, and ``sweep_stranded`` sends it once the broker is back (docs/operations.md).
    """

    def send():
        try:
            signature(task_name, args=args).delay()
        except (BrokerError, ConnectionError, OSError) as exc:
            logger.error("could not send %s%r to the broker (%s); the sweeper sends it again later",
                         task_name, args, exc)

    transaction.on_commit(send)


#: The tasks held back by :func:`coalesced` (``None``: outside such a block, tasks are sent on commit).
_held: ContextVar[set | None] = ContextVar("ldp_jobs_held", default=None)


def enqueue_once(task_name: str, *args) -> None:
    """:func:`enqueue`, coalesced: a transaction that asks for the same task with the same arguments several times
    sends it once, on commit; inside :func:`coalesced`, once at the end of the block, however many transactions
    asked.  A task run in-process (``CELERY_TASK_ALWAYS_EAGER``) that fails is logged, never raised: the transaction
    that asked for it has committed, and its request must not fail for it."""
    connection = transaction.get_connection()
    key = (task_name, args)
    if connection.in_atomic_block and any(getattr(entry[1], "ldp_task", None) == key
                                          for entry in connection.run_on_commit):
        return

    def send():
        held = _held.get()
        if held is not None:
            held.add(key)
            return
        _send_logged(task_name, args)

    send.ldp_task = key
    transaction.on_commit(send)


def _send_logged(task_name: str, args: tuple) -> None:
    try:
        signature(task_name, args=args).delay()
    except (BrokerError, ConnectionError, OSError) as exc:
        logger.error("could not send %s%r to the broker (%s); the sweeper sends it again later", task_name, args, exc)
    except Exception:  # an eager task's own failure (the broker's are above)
        logger.exception("%s%r failed in-process", task_name, args)


@contextmanager
def coalesced():
    """A burst of transactions (a command loading many rows, ...): each task :func:`enqueue_once` asked for while
    the block ran is sent once, when it ends (even if it raised: what committed stays committed)."""
    token = _held.set(set())
    try:
        yield
    finally:
        held = _held.get()
        _held.reset(token)
        for task_name, args in sorted(held, key=repr):
            _send_logged(task_name, args)
