"""Celery's log lines (docs/operations.md#logs), installed on the app by ``ldpmarket.celery``.

* Workers and beat write Django's ``LOGGING`` (JSON lines on stderr in production) instead of Celery's own
  format: connected to ``setup_logging``, :func:`_logging` keeps Celery from configuring logging itself.
* A task carries the log context of whoever sent it, in its message headers (django-structlog's Celery
  receivers): the request id and the user of the request that sent it, or the task that did
  (``parent_task_id``), and nothing else (:func:`ldpmarket.requestlog.task_context`).
* In a worker, each task's lines carry that context with ``task_id`` and ``task`` (its name), from
  ``task_prerun`` until ``task_postrun``; the service binds more where it logs (``purchase_id``).
"""
from __future__ import annotations

import logging.config

import structlog
from celery import bootsteps
from celery.signals import setup_logging, task_postrun
from django.conf import settings
from django_structlog.celery import signals as task_signals
from django_structlog.celery.receivers import CeleryReceiver

#: One receiver: whoever sends a task (web, beat, a task) puts its log context in the message; a worker also binds
#: it when the task starts (connected by :class:`TaskLogStep`, in workers only).
_receiver = CeleryReceiver()


def _logging(**kwargs):
    logging.config.dictConfig(settings.LOGGING)


class TaskLogStep(bootsteps.Step):
    """A worker's boot step: bind each task's context to its lines."""

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        _receiver.connect_worker_signals()  # the same receiver as the sender's: nothing is connected twice
        task_postrun.connect(_forget_task_context, weak=False)


def _forget_task_context(**kwargs):
    structlog.contextvars.clear_contextvars()  # the worker's own lines between tasks name no task


def _bind_task_name(sender, signal, task=None, logger=None, **kwargs):
    structlog.contextvars.bind_contextvars(task=task.name)


def _task_context(sender, signal, context, **kwargs):
    from ldpmarket.requestlog import task_context  # late: it imports Django's request machinery

    kept = task_context(context)
    context.clear()
    context.update(kept)


def install(app) -> None:
    setup_logging.connect(_logging, weak=False)
    _receiver.connect_signals()
    app.steps["worker"].add(TaskLogStep)
    task_signals.bind_extra_task_metadata.connect(_bind_task_name, weak=False)
    task_signals.modify_context_before_task_publish.connect(_task_context, weak=False)
