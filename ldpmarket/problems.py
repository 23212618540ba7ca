"""Problem types: every error of the service declares its HTTP status, its type and its title (docs/errors.md).

A client tells errors apart by the problem's ``type`` (RFC 9457), a ``tag:``
URI built from a slug (:func:`problem_type`).  Each exception class declares
its own, as class attributes, so that no two errors share a type and a
subclass never silently inherits its parent's::

    class PriceChanged(PurchaseError):
        status = 409
        slug = "price-changed"
        title = "Price changed"

:class:`DomainError` is the base of the errors raised below the interfaces
(services, selectors, domain rules); ``ldpmarket.api.Problem`` is the base of
the errors the API views raise themselves.  ``ldpmarket.api``'s exception
handler turns both into ``application/problem+json``: the declared status,
type and title, the message as ``detail``, plus ``errors`` (field ->
messages) where the error names fields, and ``Retry-After`` on a 503.

This module imports nothing from Django or the apps, so any layer may use it.
"""
from __future__ import annotations

#: Problem types are ``tag:`` URIs (RFC 4151): stable identifiers that are not meant to be dereferenced.
PROBLEM_BASE = "tag:ldpmarket,2025:problems/"


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


class DomainError(Exception):
    """Base of the service's errors.  Subclasses declare ``status``, ``slug`` and ``title``.

    ``retry_after`` (seconds) is sent as ``Retry-After`` (a 503 must declare it).
    ``errors`` (field -> messages) is sent when the error is about named fields.
    An error with a 5xx status other than 503 is a fault of the service: its
    message is logged, not shown.
    """

    abstract = True  # declares no type of its own: never raised as such
    status: int = 500
    slug: str = ""
    title: str = ""
    retry_after: int | None = None

    @property
    def errors(self) -> dict[str, list[str]] | None:
        return None


#: Errors declared in modules this project does not let this layer change, with their problem attributes:
#: ``{class: (status, slug, title)}``.  ``accounts.epsilon.EpsilonError`` is an invalid field, so it is sent
#: exactly like a validation error of the field ``epsilon`` (type ``invalid-input``).
DECLARED_ELSEWHERE: dict[type, tuple[int, str, str]] = {}


def declare(cls: type, *, status: int, slug: str, title: str) -> None:
    """Give ``cls`` (an exception class defined elsewhere) its problem attributes without editing its module."""
    DECLARED_ELSEWHERE[cls] = (status, slug, title)


def attributes_of(cls: type) -> tuple[int, str, str] | None:
    """``(status, slug, title)`` that ``cls`` itself declares (not inherited), or ``None`` (also for the abstract
    bases, which declare none)."""
    own = cls.__dict__
    if not own.get("abstract") and all(k in own for k in ("status", "slug", "title")):
        return own["status"], own["slug"], own["title"]
    return DECLARED_ELSEWHERE.get(cls)
