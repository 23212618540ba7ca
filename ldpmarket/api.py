"""REST framework plumbing shared by every API view (docs/architecture.md#the-path-of-a-purchase).

* :func:`problem_exception_handler`: every error is ``application/problem+json``
  (RFC 9457) with ``type``, ``title``, ``status``, ``detail``, ``instance``,
  ``request_id`` (the response's ``X-Request-ID``: ``ldpmarket.requestlog``) and,
  for invalid input, ``errors`` (field -> messages).  Every error class declares
  its own status, type and title (``ldpmarket.problems``; the list is in
  docs/errors.md): the service's errors (``DomainError``) and the API's own
  (:class:`Problem`).  A 503 carries ``Retry-After``.
* :class:`DecimalJSONParser`: JSON numbers with a fraction or exponent are read
  as ``Decimal``, so an epsilon such as ``0.1000000000000000001`` is seen as it
  was written (and refused for its precision) instead of being rounded to a float;
  ``NaN`` and ``Infinity`` are refused as invalid JSON, and so is JSON nested
  deeper than :data:`MAX_JSON_DEPTH`.
* :func:`not_found_view`, :func:`bad_request_view`, :func:`server_error_view`:
  Django's error pages, as problems under ``/api/``; :func:`trailing_slash_response`
  for a request with a body sent to a path without its trailing slash
  (``ldpmarket.middleware.CommonMiddleware``).
* :class:`CursorPagination`: stable, opaque cursors over ``-id``.
* Throttles: per-user and anonymous rates plus the scoped ``quote`` and
  ``purchase`` rates, all read from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``
  at request time (so the environment and ``override_settings`` both apply).
"""
from __future__ import annotations

import codecs
import json
import logging
import re
from base64 import b64decode
from decimal import Decimal
from http import HTTPStatus
from urllib.parse import parse_qs

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpResponse, HttpResponseNotFound
from django.views.defaults import bad_request, page_not_found, server_error
from rest_framework import exceptions, pagination, parsers, throttling
from rest_framework.settings import api_settings
from rest_framework.utils.encoders import JSONEncoder

from ldpmarket.cache import unreachable
from ldpmarket.numbers import is_ascii_int, parse_ascii_int
from ldpmarket.requestlog import current_request_id

from .problems import PROBLEM_BASE, DomainError, EpsilonError, attributes_of, declare, problem_type  # noqa: F401 (re-exported)


def _set_rollback() -> None:
    """DRF's ``set_rollback``, imported late: ``rest_framework.views`` reads the settings that name this
    module's classes, so importing it at module level would be circular."""
    # late: rest_framework.views reads the settings that name this module (see the docstring)
    from rest_framework.views import set_rollback

    set_rollback()


log = logging.getLogger("ldpmarket.api")

PROBLEM_CONTENT_TYPE = "application/problem+json"
#: JSON bodies nested deeper than this are refused (400); no request of this API needs more than a few levels.
MAX_JSON_DEPTH = 32

class Problem(exceptions.APIException):
    """Base of the errors the API raises itself.  Subclasses declare ``status``, ``slug`` and ``title``
    (``ldpmarket.problems``); ``extra`` adds members to the problem document."""

    abstract = True  # declares no type of its own: never raised as such
    status = status_code = 400
    slug = ""
    title = ""
    retry_after: int | None = None
    errors = None
    default_detail = "The request cannot be processed."
    default_code = "invalid"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.status_code = cls.status

    def __init__(self, detail=None, *, extra: dict | None = None):
        super().__init__(detail)
        self.extra = extra or {}


class TrailingSlashRequired(Problem):
    """A request with a body sent to a path without its trailing slash (``ldpmarket.middleware``)."""

    status = 404
    slug = "trailing-slash-required"
    title = "Trailing slash required"



def idempotency_key(request, *, what: str) -> str:
    """The request's ``Idempotency-Key`` header (docs/client.md), checked once for every endpoint that takes one:
    missing is ``IdempotencyKeyRequired``, not 1 to 255 visible ASCII characters ``IdempotencyKeyInvalid``."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        raise IdempotencyKeyRequired("The Idempotency-Key header is required: send a new unique key (for example "
                                     f"a UUID) with each {what}, and the same key when retrying it.")
    if not KEY_RE.match(key):
        raise IdempotencyKeyInvalid("The Idempotency-Key must be 1 to 255 visible ASCII characters.")
    return key

def problem_attributes(exc) -> tuple[int, str, str] | None:
    """``(status, slug, title)`` declared by the nearest class of ``exc`` (an error or its class) that declares
    them, or ``None``."""
    for cls in (exc if isinstance(exc, type) else type(exc)).__mro__:
        found = attributes_of(cls)
        if found is not None:
            return found
    return None


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


def _field_errors(errors, prefix: str = "") -> dict[str, list]:
    """``{field: [message, ...]}``, as the schema documents ``errors``, from DRF's nested structure: the errors of a
    list's items and of nested fields are named like ``detail`` names them (``epsilons.0``)."""
    out: dict[str, list] = {}

    def add(found: dict) -> None:
        for key, messages in found.items():
            out.setdefault(key, []).extend(messages)

    if isinstance(errors, dict):
        for key, value in errors.items():
            add(_field_errors(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(errors, list):
        for value in errors:
            if isinstance(value, (dict, list)):
                add(_field_errors(value, prefix))
            else:
                out.setdefault(prefix or api_settings.NON_FIELD_ERRORS_KEY, []).append(value)
    else:
        out.setdefault(prefix or api_settings.NON_FIELD_ERRORS_KEY, []).append(errors)
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
    request_id = current_request_id()  # the X-Request-ID of the response too (ldpmarket.requestlog)
    if request_id:
        body["request_id"] = request_id
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
    request = context.get("request")
    instance = request.get_full_path() if request is not None else None
    if isinstance(exc, EpsilonError):
        _set_rollback()
        status, slug, title = problem_attributes(exc)
        return problem_response(status=status, title=title, detail=f"epsilon: {exc}", slug=slug,
                                errors={"epsilon": [str(exc)]}, instance=instance)
    if isinstance(exc, DomainError):
        _set_rollback()
        return domain_problem(exc, instance=instance)
    if isinstance(exc, RequestDataTooBig):
        return problem_response(status=413, detail=f"The request body is too large: {exc}", instance=instance)
    if isinstance(exc, SuspiciousOperation):  # too many fields or files in a form, ...
        return problem_response(status=400, detail=str(exc) or "The request is malformed.",
                                slug=_SLUGS[exceptions.ParseError], instance=instance)
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
        errors = _field_errors(errors)
        detail = "; ".join(messages) if messages else "The request is invalid."
        return problem_response(status=status, title="Invalid input", detail=detail, slug="invalid-input",
                                errors=errors, instance=instance, headers=headers)
    if isinstance(exc, Problem):
        if exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
        return problem_response(status=status, title=exc.title or None, detail=str(exc.detail),
                                slug=exc.slug or None, errors=exc.errors, instance=instance, headers=headers,
                                extra=exc.extra)
    slug = next((s for cls, s in _SLUGS.items() if isinstance(exc, cls)), None)
    detail = exc.detail if not isinstance(exc.detail, (list, dict)) else "; ".join(_flatten(exc.detail))
    return problem_response(status=status, detail=str(detail), slug=slug, instance=instance, headers=headers)


def domain_problem(exc: DomainError, *, instance: str | None = None) -> HttpResponse:
    """The problem document of a service error: its declared status, type and title; ``errors`` when it names
    fields; ``Retry-After`` when it declares one.  A fault (5xx but 503) is logged and its message not shown."""
    status, slug, title = problem_attributes(exc) or (exc.status, None, None)  # undeclared: about:blank
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else {}
    if exc.location:
        headers["Location"] = exc.location
    detail = str(exc)
    if status >= 500 and status != 503:
        log.error("%s at %s: %s", type(exc).__name__, instance, exc, exc_info=exc)
        detail = "An internal error occurred; it has been logged."
    return problem_response(status=status, title=title, detail=detail, slug=slug, errors=exc.errors,
                            instance=instance, headers=headers or None, extra=exc.extra)


def trailing_slash_response(request) -> HttpResponse:
    """A request with a body (POST, PUT, PATCH, DELETE) to a path that exists only with a trailing slash.

    Redirecting would lose the body (and clients turn a redirected POST into a GET), so it is refused, saying
    where to send it: a problem under ``/api/``, plain text elsewhere."""
    target = request.path + "/" + (f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else "")
    detail = (f"{request.path} does not exist: this path ends with a slash. Send the {request.method} to {target} "
              f"(a redirect would lose the request body).")
    if request.path.startswith("/api/"):
        p = TrailingSlashRequired
        return problem_response(status=p.status, title=p.title, detail=detail, slug=p.slug,
                                instance=request.get_full_path())
    return HttpResponseNotFound(detail + "\n", content_type="text/plain; charset=utf-8")


def not_found_view(request, exception=None):
    """``handler404``: problem+json under ``/api/``, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return problem_response(status=404, detail="No such resource.", instance=request.get_full_path())

    return page_not_found(request, exception)


def bad_request_view(request, exception=None):
    """``handler400``: problem+json under ``/api/`` (a form with too many fields, ...), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return problem_response(status=400, slug=_SLUGS[exceptions.ParseError], detail="The request is malformed.",
                                instance=request.get_full_path())

    return bad_request(request, exception)


def server_error_view(request):
    """``handler500``: problem+json under ``/api/``, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return problem_response(status=500, detail="An internal error occurred; it has been logged.")

    return server_error(request)


# ------------------------------------------------------------------------------------------------- parsing

class DecimalJSONParser(parsers.JSONParser):
    """JSON with exact decimals: ``1.5`` and ``1e308`` become ``Decimal``; NaN/Infinity are a parse error, and so
    are arrays and objects nested more than :data:`MAX_JSON_DEPTH` deep (before Python's recursion limit: a
    RecursionError is a parse error too)."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        too_deep = exceptions.ParseError(f"JSON parse error - arrays and objects may be nested at most "
                                         f"{MAX_JSON_DEPTH} deep")
        try:
            decoded = codecs.getreader(encoding)(stream)
            data = json.load(decoded, parse_float=Decimal, parse_constant=_refuse_constant)
        except RecursionError:
            raise too_deep from None
        except LookupError:  # an unknown charset
            raise exceptions.ParseError(f"JSON parse error - unknown charset {encoding!r}") from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        if json_depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise too_deep
        return data


def json_depth(data, limit: int) -> int:
    """How deep arrays and objects nest in ``data`` (a scalar: 0, ``[]``: 1), counted without recursion and
    given up past ``limit`` (then ``limit + 1``)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _refuse_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


# ---------------------------------------------------------------------------------------------- pagination

class CursorPagination(pagination.CursorPagination):
    """Opaque cursors over ``-id`` (newest first); ``?page_size=`` up to 500.

    Every ordering is an integer column (an id, a tree size), so a cursor's position is read like every number of
    a request (``ldpmarket.numbers``): ASCII digits in ``bigint`` range, as are its offset and its reverse flag.
    Anything else, a cursor no page link makes, is a 400 on ``cursor`` and never reaches the database.  A page size
    that is not such a number is ignored (the default), as REST framework does; above the maximum, the maximum."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if not is_ascii_int(raw) or not raw.strip("0"):  # not a number, or 0: the default
            return self.page_size
        digits = raw.lstrip("0")
        return self.max_page_size if len(digits) > 18 else min(int(digits), self.max_page_size)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": self.max_page_size}
                parameter["description"] = f"Results per page, 1 to {self.max_page_size} (default {self.page_size})."
        return parameters

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            tokens = parse_qs(b64decode(encoded.encode("ascii")).decode("ascii"), keep_blank_values=True)
            if not tokens.keys() <= {"o", "r", "p"} or any(len(v) > 1 for v in tokens.values()):
                raise ValueError("not a cursor a page link makes")
            offset = min(parse_ascii_int(tokens.get("o", ["0"])[0]), self.offset_cutoff)
            reverse = parse_ascii_int(tokens.get("r", ["0"])[0], max=1)
            position = tokens.get("p", [None])[0]
            if position is not None:
                parse_ascii_int(position)  # the filter's value, as text: an integer the column can hold
        except (TypeError, ValueError):  # binascii.Error, UnicodeError and NumberError are ValueErrors
            raise exceptions.ValidationError(
                {self.cursor_query_param: ["This cursor is not valid: use the next or previous link of a page."]}
            ) from None
        return pagination.Cursor(offset=offset, reverse=bool(reverse), position=position)


# ----------------------------------------------------------------------------------------------- throttles


class _LiveRates:
    """Read the rate from the current settings on every request (DRF binds them at import otherwise).

    Counts live in the cache.  While Redis is down the cache (``ldpmarket.cache.FallbackRedisCache``) counts in
    each process's memory, so limits still hold per process; should a cache raise anyway, the request is let
    through (fail open) and a warning logged, never a 500 (docs/operations.md, "Redis down").
    """

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view):

        try:
            return super().allow_request(request, view)
        except unreachable() as exc:
            log.warning("throttle %r not applied: the cache is unreachable (%s)", self.scope, exc)
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


# ------------------------------------------------------------------------------------------ Idempotency-Key

#: An Idempotency-Key: 1-255 visible ASCII characters (purchases and top-ups; docs/errors.md).
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


class IdempotencyKeyRequired(Problem):
    status = 400
    slug = "idempotency-key-required"
    title = "Idempotency-Key required"


class IdempotencyKeyInvalid(Problem):
    status = 400
    slug = "idempotency-key-invalid"
    title = "Invalid Idempotency-Key"
