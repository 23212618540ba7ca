"""REST framework plumbing shared by every API view (spec service.md section 4).

* :func:`problem_exception_handler`: every error is ``application/problem+json``
  (RFC 9457) with ``type``, ``title``, ``status``, ``detail``, ``instance`` and,
  for invalid input, ``errors`` (field -> messages).  Domain exceptions carry
  their own status (``market.purchases.PurchaseError``: 400, 402, 409).
* :class:`DecimalJSONParser`: JSON numbers with a fraction or exponent are read
  as ``Decimal``, so an epsilon such as ``0.1000000000000000001`` is seen as it
  was written (and refused for its precision) instead of being rounded to a float;
  ``NaN`` and ``Infinity`` are refused as invalid JSON.
* :class:`CursorPagination`: stable, opaque cursors over ``-id``.
* Throttles: per-user and anonymous rates plus the scoped ``quote`` and
  ``purchase`` rates, all read from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``
  at request time (so the environment and ``override_settings`` both apply).
"""
from __future__ import annotations

import codecs
import json
import logging
from decimal import Decimal
from http import HTTPStatus

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpResponse
from rest_framework import exceptions, pagination, parsers, throttling
from rest_framework.settings import api_settings
from rest_framework.utils.encoders import JSONEncoder


def _set_rollback() -> None:
    """DRF's ``set_rollback``, imported late: ``rest_framework.views`` reads the settings that name this
    module's classes, so importing it at module level would be circular."""
    from rest_framework.views import set_rollback

    set_rollback()

from accounts.epsilon import EpsilonError

PROBLEM_CONTENT_TYPE = "application/problem+json"
#: Problem types are ``tag:`` URIs (RFC 4151): stable identifiers that are not meant to be dereferenced.
PROBLEM_BASE = "tag:ldpmarket,2025:problems/"


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


class Problem(exceptions.APIException):
    """An API error with an explicit problem type, for conditions DRF has no exception for."""

    status_code = 400
    default_detail = "The request cannot be processed."
    default_code = "invalid"

    def __init__(self, detail=None, *, status: int | None = None, slug: str | None = None, title: str | None = None,
                 extra: dict | None = None):
        super().__init__(detail)
        if status is not None:
            self.status_code = status
        self.slug = slug
        self.title = title
        self.extra = extra or {}


# Types of the generic HTTP problems: about:blank means "the status code says it all" (RFC 9457 section 4.2.1).
_SLUGS = {
    exceptions.ValidationError: "invalid-input",
    exceptions.ParseError: "malformed-request",
}


def _flatten(errors, prefix: str = "") -> list[str]:
    """``["field: message", ...]`` from DRF's nested error structure."""
    out = []
    if isinstance(errors, dict):
        for key, value in errors.items():
            name = key if key != api_settings.NON_FIELD_ERRORS_KEY else ""
            out += _flatten(value, f"{prefix}.{name}" if prefix and name else (name or prefix))
    elif isinstance(errors, list):
        for value in errors:
            out += _flatten(value, prefix)
    else:
        out.append(f"{prefix}: {errors}" if prefix else str(errors))
    return out


def problem_response(*, status: int, detail: str, slug: str | None = None, title: str | None = None,
                     errors=None, instance: str | None = None, headers: dict | None = None,
                     extra: dict | None = None) -> HttpResponse:
    body = {
        "type": problem_type(slug) if slug else "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    if errors is not None:
        body["errors"] = errors
    body.update(extra or {})
    response = HttpResponse(json.dumps(body, cls=JSONEncoder), status=status, content_type=PROBLEM_CONTENT_TYPE)
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def problem_exception_handler(exc, context):
    """DRF ``EXCEPTION_HANDLER``: every handled error as ``application/problem+json``.

    Returns a plain ``HttpResponse`` (not a DRF ``Response``) so that the
    content type stays ``application/problem+json`` whatever renderer the
    client negotiated (for example ``text/csv`` on the outputs endpoint).
    Unhandled exceptions return ``None`` (a 500, logged) as in DRF.
    """
    from market.purchases import PurchaseError  # the market app imports this module's settings users

    request = context.get("request")
    instance = request.get_full_path() if request is not None else None
    if isinstance(exc, PurchaseError):
        _set_rollback()
        slug = {402: "insufficient-credit", 409: "idempotency-conflict"}.get(exc.status, "purchase-refused")
        return problem_response(status=exc.status, title=exc.title, detail=str(exc), slug=slug, instance=instance)
    if isinstance(exc, EpsilonError):
        _set_rollback()
        return problem_response(status=400, title="Invalid input", detail=f"epsilon: {exc}", slug="invalid-input",
                                errors={"epsilon": [str(exc)]}, instance=instance)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    if not isinstance(exc, exceptions.APIException):
        return None
    _set_rollback()
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None) is not None:
        headers["Retry-After"] = "%d" % max(1, round(exc.wait))
    status = exc.status_code
    if isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {api_settings.NON_FIELD_ERRORS_KEY: exc.detail}
        messages = _flatten(errors)
        detail = "; ".join(messages) if messages else "The request is invalid."
        return problem_response(status=status, title="Invalid input", detail=detail, slug="invalid-input",
                                errors=errors, instance=instance, headers=headers)
    if isinstance(exc, Problem):
        return problem_response(status=status, title=exc.title, detail=str(exc.detail), slug=exc.slug,
                                instance=instance, headers=headers, extra=exc.extra)
    slug = next((s for cls, s in _SLUGS.items() if isinstance(exc, cls)), None)
    detail = exc.detail if not isinstance(exc.detail, (list, dict)) else "; ".join(_flatten(exc.detail))
    return problem_response(status=status, detail=str(detail), slug=slug, instance=instance, headers=headers)


def not_found_view(request, exception=None):
    """``handler404``: problem+json under ``/api/``, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return problem_response(status=404, detail="No such resource.", instance=request.get_full_path())
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def server_error_view(request):
    """``handler500``: problem+json under ``/api/``, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return problem_response(status=500, detail="An internal error occurred; it has been logged.")
    from django.views.defaults import server_error

    return server_error(request)


# ------------------------------------------------------------------------------------------------- parsing

class DecimalJSONParser(parsers.JSONParser):
    """JSON with exact decimals: ``1.5`` and ``1e308`` become ``Decimal``; NaN/Infinity are a parse error."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            decoded = codecs.getreader(encoding)(stream)
            return json.load(decoded, parse_float=Decimal, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


def _refuse_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


# ---------------------------------------------------------------------------------------------- pagination

class CursorPagination(pagination.CursorPagination):
    """Opaque cursors over ``-id`` (newest first); ``?page_size=`` up to 500."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": self.max_page_size}
                parameter["description"] = f"Results per page, 1 to {self.max_page_size} (default {self.page_size})."
        return parameters

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except exceptions.NotFound:
            raise exceptions.ValidationError(
                {self.cursor_query_param: ["This cursor is not valid: use the next or previous link of a page."]}
            ) from None


# ----------------------------------------------------------------------------------------------- throttles

logger = logging.getLogger(__name__)


class _LiveRates:
    """Read the rate from the current settings on every request (DRF binds them at import otherwise).

    Counts live in the cache.  While Redis is down the cache (``ldpmarket.cache.FallbackRedisCache``) counts in
    each process's memory, so limits still hold per process; should a cache raise anyway, the request is let
    through (fail open) and a warning logged, never a 500 (docs/operations.md, "Redis down").
    """

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view):
        from ldpmarket.cache import unreachable

        try:
            return super().allow_request(request, view)
        except unreachable() as exc:
            logger.warning("throttle %r not applied: the cache is unreachable (%s)", self.scope, exc)
            return True


class AnonThrottle(_LiveRates, throttling.AnonRateThrottle):
    scope = "anon"


class UserThrottle(_LiveRates, throttling.UserRateThrottle):
    scope = "user"


class QuoteThrottle(_LiveRates, throttling.UserRateThrottle):
    """``quote`` scope: POST /api/v1/quotes/ per user."""

    scope = "quote"


class PurchaseThrottle(_LiveRates, throttling.UserRateThrottle):
    """``purchase`` scope: POST /api/v1/purchases/ per user."""

    scope = "purchase"
