"""One sign-in lockout policy for the token endpoint, the portal and ``/admin/`` (docs/security.md).

django-axes watches every ``authenticate()`` that comes with a request (Django's sign-in forms, the admin's,
the API's token serializer).  This module is its configuration:

* :class:`LockoutHandler` counts failed sign-ins in the database against two rules, each over the cool-off
  window (``LDP_SIGNIN_COOLOFF_MINUTES``, measured from the rule's last counted failure):

  - per account and client address: ``LDP_SIGNIN_FAILURES_PER_ACCOUNT`` failures lock that account out
    *from that address only* (a guesser is stopped, the owner elsewhere signs in);
  - per client address: ``LDP_SIGNIN_FAILURES_PER_ADDRESS`` failures, whatever the accounts, lock that
    address out (password spraying).

  Attempts refused during a lockout are not counted, so a lockout ends at most one cool-off after the
  failure that reached the limit.  A successful sign-in forgives that account's failures from that address,
  never other accounts' failures (that would reopen spraying to anyone holding one account).
* :func:`lockout_username`: usernames are counted case-insensitively, without surrounding spaces.
* :func:`lockout_response`: a refused sign-in is a 429 with ``Retry-After``: a problem document under
  ``/api/``, the sign-in page itself with the reason elsewhere and on the browsable API's sign-in form
  (:class:`LockoutFormMixin`).
* :class:`LockoutBackend`: ``authenticate()`` without a request (a shell, a test's ``Client.login``) is
  nobody's sign-in from an address, and is not checked.

The client address is ``REMOTE_ADDR`` as ``ldpmarket.clientaddr`` settled it (trusted proxies only).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.db.models import Max, Sum
from django.http import HttpResponse
from django.utils import timezone

from ldpmarket.api import problem_response

PROBLEM_SLUG = "sign-in-locked"
PROBLEM_TITLE = "Too many failed sign-ins"


def cool_off() -> timedelta:
    return timedelta(minutes=settings.LDP_SIGNIN_COOLOFF_MINUTES)


def rules() -> list[tuple[tuple[str, ...], int]]:
    """(the fields a rule counts by, its limit): per account and address, then per address."""
    return [(("username", "ip_address"), settings.LDP_SIGNIN_FAILURES_PER_ACCOUNT),
            (("ip_address",), settings.LDP_SIGNIN_FAILURES_PER_ADDRESS)]


def locked_message() -> str:
    minutes = settings.LDP_SIGNIN_COOLOFF_MINUTES
    return (f"Too many failed sign-ins from your address. For your security, signing in is paused for up to "
            f"{minutes} minute{'s' if minutes != 1 else ''}; please try again later.")


def lockout_username(request, credentials=None) -> str | None:
    """``AXES_USERNAME_CALLABLE``: the username tried, stripped and lower-cased (None when there is none)."""
    value = (credentials or {}).get("username")
    if value is None and request is not None:
        try:
            data = getattr(request, "data", None)
        except Exception:  # a body that does not parse has no username
            data = None
        if not isinstance(data, Mapping):
            data = request.POST
        value = data.get("username")
    if not isinstance(value, str):
        return None
    return value.strip().lower()[:255] or None


class LockoutBackend(AxesStandaloneBackend):
    """Axes' check, first in ``AUTHENTICATION_BACKENDS``; sign-ins without a request are not checked."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class LockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with the two rules of :func:`rules`, each against its own limit."""

    def filter_user_attempts(self, request, credentials=None):
        values = {"username": get_client_username(request, credentials), "ip_address": request.axes_ip_address}
        return [AccessAttempt.objects.filter(**{field: values[field] for field in fields}) for fields, _ in rules()]

    def _counts(self, request, credentials=None):
        """(attempts within the cool-off, failures, limit) for each rule."""
        return [(attempts, attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0, limit)
                for attempts, (_, limit) in zip(self.get_user_attempts(request, credentials), rules())]

    def get_failures(self, request, credentials=None) -> int:
        """Failures on the scale of ``AXES_FAILURE_LIMIT``: that limit minus the smallest headroom of any rule,
        so it reaches the limit exactly when some rule does."""
        headroom = min(limit - failures for _, failures, limit in self._counts(request, credentials))
        return settings.AXES_FAILURE_LIMIT - headroom

    def reset_user_attempts(self, request, credentials=None) -> int:
        """After a success: forget this account's failures from this address, nothing else."""
        count, _ = AccessAttempt.objects.filter(username=get_client_username(request, credentials),
                                                ip_address=request.axes_ip_address).delete()
        return count

    def seconds_left(self, request, credentials=None) -> int:
        """Seconds until every rule that is at its limit falls below it again (at least 1)."""
        ends = [attempts.aggregate(t=Max("attempt_time"))["t"] + cool_off()
                for attempts, failures, limit in self._counts(request, credentials) if failures >= limit]
        if not ends:
            return 1
        return max(1, math.ceil((max(ends) - timezone.now()).total_seconds()))


def seconds_left(request, credentials=None) -> int:
    AxesProxyHandler.update_request(request)
    handler = AxesProxyHandler.get_implementation()
    if isinstance(handler, LockoutHandler):
        return handler.seconds_left(request, credentials)
    return int(cool_off().total_seconds())


def is_locked_out(request) -> bool:
    """Whether axes refused (or just locked) the sign-in this request tried."""
    return bool(getattr(request, "axes_locked_out", False))


def locked_problem(request, credentials=None):
    """The API's answer to a refused sign-in: 429, problem type ``sign-in-locked``, ``Retry-After``."""

    return problem_response(status=429, slug=PROBLEM_SLUG, title=PROBLEM_TITLE, detail=locked_message(),
                            instance=request.get_full_path(),
                            headers={"Retry-After": str(seconds_left(request, credentials))})


def is_form_sign_in(request) -> bool:
    """Whether the request went to the browsable API's HTML sign-in form (``accounts.api_signin``), which
    answers a lockout like the portal's form, not with a problem document."""
    match = getattr(request, "resolver_match", None)
    return match is not None and match.namespace == "rest_framework"


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE`` (used by ``axes.middleware.AxesMiddleware``)."""
    if request.path.startswith("/api/") and not is_form_sign_in(request):
        return locked_problem(request, credentials)
    if (original_response is not None and original_response.status_code == 200
            and original_response.get("Content-Type", "").startswith("text/html")):
        response = original_response  # the sign-in form, saying why (LockoutFormMixin)
    else:
        response = HttpResponse(locked_message(), content_type="text/plain; charset=utf-8")
    response.status_code = 429
    response.reason_phrase = "Too Many Requests"
    response["Retry-After"] = str(seconds_left(request, credentials))
    return response


class LockoutFormMixin:
    """For Django sign-in forms (``AuthenticationForm`` and the admin's): say that the sign-in is paused
    rather than that the password is wrong, when the lockout refused it."""

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            if is_locked_out(self.request):
                raise ValidationError(locked_message(), code="locked_out") from None
            raise



class AdminSignInForm(LockoutFormMixin, AdminAuthenticationForm):
    """The admin's sign-in form (``admin.site.login_form``), saying when the lockout refused a sign-in."""
