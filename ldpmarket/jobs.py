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

from celery import signature
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)

#: The tasks services start (``market.tasks``).
EXTEND_CHAINS = "market.tasks.extend_chains"
RUN_PURCHASE = "market.tasks.run_purchase"
SETTLE_EARNINGS = "market.tasks.settle_earnings"
SUBMIT_CHECKPOINT = "market.tasks.submit_checkpoint"


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
