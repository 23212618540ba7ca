"""The request id, and what a request's log lines say about it (docs/operations.md#logs).

:class:`RequestLogMiddleware` (django-structlog's ``RequestMiddleware``, in ``MIDDLEWARE`` right after
``ClientAddressMiddleware``) gives each request an id: the incoming ``X-Request-ID`` when it is a short safe token
(:data:`SAFE_REQUEST_ID`: a proxy's or a client's own id, for correlating their logs with ours), a new UUID
otherwise (a header that could inject a line, or a 10 kB one, never reaches a log).  The id is

* sent back in the ``X-Request-ID`` response header of every response;
* a member of every problem document (``ldpmarket.api.problem_response``: :func:`current_request_id`);
* bound to every log line written while the request is served, with ``user_id`` (the user once signed in or
  authenticated by a token: :func:`add_request_context`) and ``ip`` (the address ``ldpmarket.clientaddr`` settled,
  never a forwarded header that no trusted proxy wrote);
* carried into the Celery tasks the request sends (``ldpmarket.tasklog``).

The middleware logs ``request_finished`` (method, path, status ``code``, ``duration_ms``) at INFO for 2xx and 3xx,
WARNING for 4xx, ERROR for 5xx (``request_failed`` with the traceback for an unhandled exception), and
``request_started`` (with the user agent, cut to :data:`MAX_USER_AGENT` characters) at DEBUG.
"""
from __future__ import annotations

import re
import time
import uuid
from contextvars import ContextVar

import structlog
from django.core.signals import setting_changed
from django.utils.functional import SimpleLazyObject, empty
from django_structlog import signals
from django_structlog.middlewares.request import RequestMiddleware

from ldpmarket.logs import forget_secrets

HEADER = "X-Request-ID"
#: An incoming id is kept only if it is this: 1 to 64 letters, digits, '.', '_', ':' or '-', from a letter or digit.
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
MAX_USER_AGENT = 200

_current: ContextVar = ContextVar("ldpmarket_request", default=None)


def accepted_request_id(incoming: str | None) -> str:
    """The incoming ``X-Request-ID`` if it is a short safe token, else a new UUID."""
    if incoming and SAFE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return str(uuid.uuid4())


def current_request_id() -> str | None:
    """The id of the request being served in this thread (None outside a request)."""
    request = _current.get()
    return getattr(request, "request_id", None) if request is not None else None


def request_user_id(request) -> int | None:
    """The id of the request's user once it is known, without resolving it: Django's lazy user is read only if
    something already did (a log line never costs a session read or a query); REST framework puts the user it
    authenticated (a token) on the request itself."""
    user = getattr(request, "user", None)
    if user is None or (type(user) is SimpleLazyObject and user._wrapped is empty):
        return None
    return getattr(user, "pk", None)


def add_request_context(logger, method_name, event_dict):
    """structlog processor: ``request_id`` (when nothing bound it yet) and ``user_id`` (once it is known) of the
    request being served; for the lines Django writes about a request after the middleware has returned
    (``django.request``'s "Not Found: ..."), those of the request the line names."""
    request = _current.get()
    if request is None:
        record = event_dict.get("_record")
        request = getattr(record, "request", None)
    if getattr(request, "request_id", None) is None:
        return event_dict
    event_dict.setdefault("request_id", request.request_id)
    if event_dict.get("user_id") is None:
        user_id = request_user_id(request)
        if user_id is not None:
            event_dict["user_id"] = user_id
    return event_dict


class RequestLogMiddleware(RequestMiddleware):
    """django-structlog's request logging, with a request id we accept or make, sent back in ``X-Request-ID``."""

    async_capable = False  # served by WSGI (gunicorn, runserver, the test client)

    def __call__(self, request):
        request.request_id = accepted_request_id(request.META.get("HTTP_X_REQUEST_ID"))
        request._log_started = time.monotonic()
        token = _current.set(request)
        try:
            response = super().__call__(request)
        finally:
            _current.reset(token)
        response[HEADER] = request.request_id
        return response

    @classmethod
    def bind_ip(cls, request) -> None:
        """The address ``ldpmarket.clientaddr`` settled (django-ipware would believe any X-Forwarded-For)."""
        structlog.contextvars.bind_contextvars(ip=request.META.get("REMOTE_ADDR") or None)

    @staticmethod
    def bind_user_id(request) -> None:
        user_id = request_user_id(request)
        if user_id is not None:
            structlog.contextvars.bind_contextvars(user_id=user_id)


def _bind_request_id(request, logger, log_kwargs, **kwargs):
    """``request_started``: our request id (django-structlog makes its own), the user agent cut short."""
    request_id = getattr(request, "request_id", None)
    if request_id:
        structlog.contextvars.bind_contextvars(request_id=request_id)
    if log_kwargs.get("user_agent"):
        log_kwargs["user_agent"] = log_kwargs["user_agent"][:MAX_USER_AGENT]


def _add_duration(request, logger, response, log_kwargs, **kwargs):
    started = getattr(request, "_log_started", None)
    if started is not None:
        log_kwargs["duration_ms"] = round((time.monotonic() - started) * 1000, 1)


def task_context(context: dict) -> dict:
    """What a task sent from here carries into its worker's log lines: the request id, the user, the task that
    sent it (never anything else the request bound)."""
    request = _current.get()
    user_id = context.get("user_id") or (request_user_id(request) if request is not None else None)
    kept = {key: context[key] for key in ("request_id", "parent_task_id") if context.get(key)}
    if user_id is not None:
        kept["user_id"] = user_id
    return kept


setting_changed.connect(forget_secrets, dispatch_uid="ldpmarket.requestlog.secrets")
signals.bind_extra_request_metadata.connect(_bind_request_id, dispatch_uid="ldpmarket.requestlog.request_id")
signals.bind_extra_request_finished_metadata.connect(_add_duration, dispatch_uid="ldpmarket.requestlog.duration")
