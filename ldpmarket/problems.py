"""The service's domain errors, all in this one module: each declares its HTTP status, its type and its title
(docs/errors.md).

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

Every error a service, selector or domain rule raises is defined below, grouped by the module that raises
it; the modules import them from here (``from ldpmarket.problems import PriceChanged``).  This module imports
nothing from Django or the apps, so any layer may use it.
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
    #: Sent as ``Location`` when set (the interface that knows the URL sets it: a purchase interrupted mid-way).
    location: str | None = None
    #: Members added to the problem document (``NothingToSell``: the candidates and why each was left out).
    extra: dict | None = None

    @property
    def errors(self) -> dict[str, list[str]] | None:
        return None


#: Errors whose problem attributes are not their own class attributes: ``{class: (status, slug, title)}``.
#: ``EpsilonError`` is an invalid field, so it is sent exactly like a validation error of the field ``epsilon``
#: (type ``invalid-input``, which it shares with DRF's validation errors).
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


# ------------------------------------------------------------------------- Epsilons (accounts.epsilon)


class EpsilonError(ValueError):
    """An epsilon that is not a finite number in [0, MAX_EPSILON] with at most 6 decimals."""


# An invalid epsilon is an invalid field: sent exactly like a validation error of ``epsilon``.
declare(EpsilonError, status=400, slug="invalid-input", title="Invalid input")


# ------------------------------------------------------------------------------- Numbers (ldpmarket.numbers)


class NumberError(DomainError, ValueError):
    """Text that is not a plain ASCII number (``"1_000"``, ``"+5"``, ``"1e3"``, ``"١٠"``), or an integer out of
    its range.  Every interface sends it as an invalid field (``invalid-input`` naming the field); should one
    escape, it is still a 400 of its own type, never a 500."""

    status = 400
    slug = "invalid-number"
    title = "Invalid number"


# ------------------------------------------------------------------------------ Roles (accounts.roles)


class RoleError(DomainError, ValueError):
    status = 400
    slug = "unknown-role"
    title = "Unknown role"


# ------------------------------------------------------------------ Buyer accounts (accounts.services)


class BuyerNotApproved(DomainError, PermissionError):
    """A buyer whose account the operator has not approved yet asked for a purchase or a survey
    (docs/security.md#buyer-accounts); nothing was claimed or charged.  Quotes, the catalog and the account stay
    open to it."""

    status = 403
    slug = "buyer-not-approved"
    title = "Buyer account awaiting approval"


class SignUpRefused(DomainError, ValueError):
    """A buyer sign-up the rules refuse (a username or e-mail address already used, a weak password); ``errors``
    names the fields (``username``, ``email``, ``password``, ``name``, ``organisation``)."""

    status = 400
    slug = "signup-refused"
    title = "Sign-up refused"

    def __init__(self, fields: dict[str, list[str]] | str):
        if isinstance(fields, str):  # a message about no field in particular
            fields = {"non_field_errors": [fields]}
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items()))
        self.fields = fields

    @property
    def errors(self) -> dict[str, list[str]]:
        return self.fields


# ---------------------------------------------------------------------- API tokens (accounts.tokens)


class TokenRefused(DomainError, ValueError):
    """A named API token that cannot be made: no name, a name too long, or an expiry outside 1 hour to the
    maximum (docs/security.md#credentials-and-sign-in); ``field`` names the culprit."""

    status = 400
    slug = "token-refused"
    title = "API token refused"

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field

    @property
    def errors(self) -> dict[str, list[str]] | None:
        return {self.field: [str(self)]} if self.field else None


class NoSuchToken(DomainError, LookupError):
    """No API token of this user starts with the given characters (revoked already, or another user's)."""

    status = 404
    slug = "no-such-token"
    title = "No such API token"


# ------------------------------------------------------------------------- Budgets (accounts.services)


class BudgetError(DomainError, ValueError):
    """A budget change the rules forbid; the message is shown to the owner as it is."""

    status = 400
    slug = "budget-refused"
    title = "Budget change refused"


class NoSuchCheckpoint(DomainError, LookupError):
    """Receipts asked for against a tree size no signed checkpoint has (docs/receipts.md#the-receipts-file)."""

    status = 404
    slug = "no-such-checkpoint"
    title = "No such checkpoint"


class CustodyRefused(DomainError, ValueError):
    """An owner-held value's contribution or chain upload that the rules refuse (docs/custody.md#uploads);
    ``field`` names the request field at fault."""

    status = 400
    slug = "custody-refused"
    title = "Owner-held value refused"

    def __init__(self, message: str, *, field: str = "value"):
        super().__init__(message)
        self.field = field

    @property
    def errors(self) -> dict[str, list[str]]:
        return {self.field: [str(self)]}


# ------------------------------------------------------------------------------ Money (accounts.money)


class MoneyError(DomainError, ValueError):
    """An amount that is not a positive number of cents, or too large."""

    status = 400
    slug = "invalid-amount"
    title = "Invalid amount"


class NotABuyer(DomainError, ValueError):
    status = 400
    slug = "not-a-buyer"
    title = "Not a buyer"


class TopUpConflict(DomainError):
    status = 409
    slug = "topup-key-reused"
    title = "Idempotency-Key used for another top-up"


class PayoutRefused(DomainError):
    status = 409
    slug = "payout-refused"
    title = "Payout refused"


# --------------------------------------------------------------- Values and attributes (market.values.inputs)


class InvalidValue(DomainError, ValueError):
    """A raw value that does not fit its attribute (a label it does not have, a number out of bounds, ...)."""

    status = 400
    slug = "invalid-value"
    title = "Invalid value"


class InvalidAttribute(DomainError, ValueError):
    """An attribute whose one-shot fields do not describe a usable mechanism."""

    status = 409
    slug = "attribute-misconfigured"
    title = "Attribute misconfigured"


# --------------------------------------------------------------------- Locks (accounts.locks)


class LockOrderViolation(DomainError, RuntimeError):
    """A lock taken after a later one of the global lock order (``accounts.locks``) in one transaction: a bug,
    caught where ``LDP_CHECK_LOCK_ORDER`` is on (tests, development)."""

    status = 500
    slug = "lock-order-violation"
    title = "Lock order violated"


# --------------------------------------------------------------------- Price policies (market.purchases.pricing)


class PolicyError(DomainError, ValueError):
    """A price policy that does not parse (an attribute with one is not for sale)."""

    status = 400
    slug = "invalid-price-policy"
    title = "Invalid price policy"


# ---------------------------------------------------------------------- Sealed inputs (market.values.sealing)


class SealBroken(DomainError):
    """A sealed input that does not open: tampered with, moved between rows, or sealed under another key.

    A fault of the stored data, never of the request: a 500, logged."""

    status = 500
    slug = "seal-broken"
    title = "Sealed data does not open"


# -------------------------------------------------------- Purchases (market.purchases, market.purchases.oneshot)


class PurchaseError(DomainError):
    """A purchase the rules refuse (the wrong role, an attribute whose price policy is invalid, ...).

    Each subclass declares its own status, type and title (docs/errors.md)."""

    status = 400
    slug = "purchase-refused"
    title = "Purchase refused"


class IdempotencyConflict(PurchaseError):
    """The Idempotency-Key was already used for a different request."""

    status = 409
    slug = "idempotency-conflict"
    title = "Idempotency key conflict"


class InsufficientCredit(PurchaseError):
    status = 402
    slug = "insufficient-credit"
    title = "Insufficient credit"


class PriceChanged(PurchaseError):
    """The purchase now costs more than the quote it was made from said: ask for a new quote."""

    status = 409
    slug = "price-changed"
    title = "Price changed"


class PurchaseConflict(PurchaseError):
    """A concurrent change (a value added while the purchase read its values); retrying succeeds."""

    status = 503
    slug = "purchase-conflict"
    title = "Temporarily unavailable"
    retry_after = 1


class ChainConflict(PurchaseConflict):
    """A chain point or block changed since it was read: a second writer of an attribute's chains without its
    chain lock (docs/architecture.md#chains-in-blocks).  Nothing of the transaction is kept; retrying reads the
    new state."""

    status = 503
    slug = "chain-conflict"
    title = "Chains changed meanwhile"
    retry_after = 1


class PurchaseInterrupted(PurchaseError):
    """The database failed while a purchase claimed by this request ran in it (a lost connection, a restart).
    Its one transaction rolled back, so nothing was released or charged; the purchase exists (``purchase``,
    ``Location``) and is run again by a retry with the same Idempotency-Key (charged once), or by the sweeper
    (docs/operations.md#recovery-nothing-stays-stranded)."""

    status = 503
    slug = "purchase-interrupted"
    title = "Purchase interrupted"
    retry_after = 5

    def __init__(self, message: str, *, purchase_id: int | None = None):
        super().__init__(message)
        self.purchase_id = purchase_id
        self.extra = {"purchase": purchase_id} if purchase_id is not None else None


class ParameterError(PurchaseError):
    """A request whose mechanism parameters do not fit the attribute (400); ``field`` names the culprit."""

    status = 400
    slug = "invalid-parameter"
    title = "Invalid mechanism parameter"

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name

    @property
    def errors(self) -> dict[str, list[str]]:
        return {self.field: [str(self)]}


class NotForSale(PurchaseError):
    """The attribute's price policy is not valid, so nothing of it is sold."""

    status = 409
    slug = "not-for-sale"
    title = "Not for sale"


class NothingToSell(PurchaseError):
    """No value of the attribute can be released at this epsilon now (``candidates`` and ``excluded`` say why)."""

    status = 400
    slug = "nothing-to-sell"
    title = "Nothing to sell at this epsilon"

    def __init__(self, message: str, *, extra: dict | None = None):
        super().__init__(message)
        self.extra = extra


class InFlight(PurchaseError):
    """A retry with the same Idempotency-Key while the purchase still runs."""

    status = 409
    slug = "in-flight"
    title = "Still in flight"


class TooFewRespondents(PurchaseError):
    """A survey that too few owners can answer now to be run (or to be informative)."""

    status = 400
    slug = "too-few-respondents"
    title = "Too few respondents"


class EstimateMethodUnavailable(PurchaseError):
    """``?method=norm_sub|ibu`` on a purchase whose estimate has no frequencies to make consistent (LPP's graph,
    private samples, surveys): docs/mechanisms-reference.md#consistent-estimates."""

    status = 400
    slug = "estimate-method-unavailable"
    title = "Estimate method not offered for this purchase"


# ---------------------------------------------------------------------------- Quotes (market.values.services)


class QuoteInvalid(DomainError, ValueError):
    """A quote token that is not valid for this buyer now (tampered with, another buyer's, or expired)."""

    status = 400
    slug = "invalid-quote"
    title = "Invalid quote"


# ------------------------------------------------------------------------ Storage (ldpmarket.pgbinary)


class RestoreInputError(DomainError, ValueError):
    """A kept checkpoint, policy or log key that ``manage.py verify_restore`` cannot read (it exits 2;
    docs/operations.md#restore-drill)."""

    status = 400
    slug = "unreadable-restore-input"
    title = "Unreadable restore input"


class CopyFormatError(DomainError, RuntimeError):
    """A binary COPY stream that does not have the expected fixed-width layout (a fault: a 500, logged)."""

    status = 500
    slug = "copy-format"
    title = "Unexpected bulk-copy layout"
