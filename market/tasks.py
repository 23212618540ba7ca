"""Celery tasks: thin wrappers over services. They take ids, are idempotent, and retry a bounded number of times.

``acks_late`` with ``reject_on_worker_lost`` (settings) means a task whose
worker dies is delivered again; each batch is one transaction, so a re-run
completes exactly what the dead worker rolled back.
"""
from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

RETRY = {"autoretry_for": (OperationalError, InterfaceError), "retry_backoff": True, "max_retries": 5}


@shared_task(time_limit=60 * 60, soft_time_limit=55 * 60, **RETRY)
def extend_chains(attribute_id: int, value_ids: list[int] | None = None) -> int:
    from .services import chains_extend

    return chains_extend(attribute_id=attribute_id, value_ids=value_ids)


@shared_task(time_limit=10 * 60, soft_time_limit=9 * 60, **RETRY)
def advance_schedules() -> int:
    from accounts.services import schedules_advance

    return schedules_advance()
