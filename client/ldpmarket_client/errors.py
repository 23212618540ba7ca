"""Errors of the client: every ``application/problem+json`` answer of the API becomes a :class:`ProblemError`.

Each problem type of the service (``tag:ldpmarket,2025:problems/<slug>``, listed in the repository's
docs/errors.md) has its own subclass, found by its slug; problems of type ``about:blank`` ("the status says it
all": 401, 403, 404, 429, ...) get a subclass per status.  A type this client does not know (a newer server)
is raised as :class:`ProblemError` itself, with everything the server sent::

    try:
        client.buy(attribute=1, epsilon="0.5")
    except InsufficientCredit as exc:
        print(exc.detail)            # "The purchase costs 12.50 ..."
    except ProblemError as exc:      # any other problem
        print(exc.status, exc.type, exc.title, exc.detail, exc.errors)
"""
from __future__ import annotations

from typing import Any, ClassVar

PROBLEM_BASE = "tag:ldpmarket,2025:problems/"
ABOUT_BLANK = "about:blank"


class ClientError(Exception):
    """Base of every error this package raises."""


class ProblemError(ClientError):
    """An error answer of the API.

    ``status`` (int), ``type`` (the problem's URI), ``title``, ``detail``, ``errors`` (field -> messages, or
    ``None``), ``instance``, ``body`` (the whole problem document, with extra members such as ``excluded``),
    ``retry_after`` (seconds, or ``None``) and ``request_id`` (the request's id on the service, its
    ``X-Request-ID``: quote it when reporting a problem; ``None`` from a server that sends none).
    """

    slug: ClassVar[str | None] = None  # the problem type after PROBLEM_BASE
    status_code: ClassVar[int | None] = None  # about:blank problems: the status this class stands for

    def __init__(self, *, status: int, type: str = ABOUT_BLANK, title: str = "", detail: str = "",
                 errors: dict[str, list[str]] | None = None, instance: str | None = None,
                 body: dict[str, Any] | None = None, retry_after: float | None = None,
                 request_id: str | None = None):
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.errors = errors
        self.instance = instance
        self.body = body or {}
        self.retry_after = retry_after
        self.request_id = request_id
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"{self.status} {self.title}" + (f": {self.detail}" if self.detail else "")
        if self.errors and not self.detail:  # the service's detail already names the fields
            parts = []
            for field, messages in self.errors.items():
                messages = messages if isinstance(messages, list) else [messages]
                parts.append(f"{field}: {' '.join(map(str, messages))}")
            text += " (" + "; ".join(parts) + ")"
        return text


#: slug -> class, and status -> class for about:blank problems; filled by the subclasses below.
BY_SLUG: dict[str, type[ProblemError]] = {}
BY_STATUS: dict[int, type[ProblemError]] = {}


def _register(cls):
    if cls.__dict__.get("slug"):
        BY_SLUG[cls.slug] = cls
    if cls.__dict__.get("status_code"):
        BY_STATUS[cls.status_code] = cls
    return cls


def _problem(name: str, *, slug: str | None = None, status: int | None = None, doc: str) -> type[ProblemError]:
    cls = type(name, (ProblemError,), {"slug": slug, "status_code": status, "__doc__": doc,
                                       "__module__": __name__})
    return _register(cls)


# --- typed problems of the service (docs/errors.md) ---------------------------------------------------------
InvalidInput = _problem("InvalidInput", slug="invalid-input",
                        doc="400: a field is missing or invalid (``errors`` names it).")
MalformedRequest = _problem("MalformedRequest", slug="malformed-request",
                            doc="400: the body is not valid JSON, too deeply nested, or has too many fields.")
InvalidParameter = _problem("InvalidParameter", slug="invalid-parameter",
                            doc="400: a one-shot mechanism's parameter does not fit the attribute.")
IdempotencyKeyRequired = _problem("IdempotencyKeyRequired", slug="idempotency-key-required",
                                  doc="400: a purchase or survey without the Idempotency-Key header.")
IdempotencyKeyInvalid = _problem("IdempotencyKeyInvalid", slug="idempotency-key-invalid",
                                 doc="400: the Idempotency-Key is not 1 to 255 visible ASCII characters.")
NothingToSell = _problem("NothingToSell", slug="nothing-to-sell",
                         doc="400: no value can be released at this epsilon now (``body['excluded']`` says why).")
TooFewRespondents = _problem("TooFewRespondents", slug="too-few-respondents",
                             doc="400: a survey that too few owners can answer now.")
EstimateMethodUnavailable = _problem("EstimateMethodUnavailable", slug="estimate-method-unavailable",
                                     doc="400: a consistent estimate (method norm_sub or ibu) of a purchase with "
                                         "no frequencies to make consistent.")
PurchaseRefused = _problem("PurchaseRefused", slug="purchase-refused", doc="400: the rules refuse the purchase.")
BuyerNotApproved = _problem("BuyerNotApproved", slug="buyer-not-approved",
                            doc="403: the operator has not approved this buyer account yet; nothing was charged "
                                "(quotes, the catalog and the account stay open).")
SignUpRefused = _problem("SignUpRefused", slug="signup-refused",
                         doc="400: a buyer sign-up the rules refuse (the web sign-up, /buyer/signup/).")
TokenRefused = _problem("TokenRefused", slug="token-refused",
                        doc="400: a named API token that cannot be made (its name or expiry).")
NoSuchToken = _problem("NoSuchToken", slug="no-such-token",
                       doc="404: no API token of yours starts with these characters.")
InsufficientCredit = _problem("InsufficientCredit", slug="insufficient-credit",
                              doc="402: the purchase costs more than the credit; nothing was charged.")
IdempotencyConflict = _problem("IdempotencyConflict", slug="idempotency-conflict",
                               doc="409: the Idempotency-Key was already used for a different request.")
PriceChanged = _problem("PriceChanged", slug="price-changed",
                        doc="409: the price went up since the quote: ask for a new quote.")
InFlight = _problem("InFlight", slug="in-flight", doc="409: a retry while the purchase with this key still runs.")
NotForSale = _problem("NotForSale", slug="not-for-sale", doc="409: the attribute's price policy is not valid.")
PurchaseNotCompleted = _problem("PurchaseNotCompleted", slug="purchase-not-completed",
                                doc="409: outputs or an estimate of a purchase that has not completed.")
NoOutputs = _problem("NoOutputs", slug="no-outputs", doc="409: an estimate of a purchase that released no values.")
PurchaseConflict = _problem("PurchaseConflict", slug="purchase-conflict",
                            doc="503: a concurrent change; nothing was written (retried after Retry-After).")
ChainConflict = _problem("ChainConflict", slug="chain-conflict",
                         doc="503: a chain point was written by another writer meanwhile; nothing was written "
                             "(retried after Retry-After).")
PurchaseInterrupted = _problem("PurchaseInterrupted", slug="purchase-interrupted",
                               doc="503: the database failed while the purchase ran in the request; nothing was "
                                   "charged. ``body['purchase']`` is its id; retried with the same "
                                   "Idempotency-Key after Retry-After.")
TrailingSlashRequired = _problem("TrailingSlashRequired", slug="trailing-slash-required",
                                 doc="404: a request with a body to a path without its trailing slash.")
# Types the API does not send as such today (docs/errors.md, second table), known so that they stay typed.
BudgetRefused = _problem("BudgetRefused", slug="budget-refused", doc="400: a budget change the rules forbid.")
InvalidValue = _problem("InvalidValue", slug="invalid-value", doc="400: a value that does not fit its attribute.")
CustodyRefused = _problem("CustodyRefused", slug="custody-refused",
                          doc="400: an owner-held contribution or chain upload the rules refuse (``errors`` names the "
                              "field).")
NoSuchCheckpoint = _problem("NoSuchCheckpoint", slug="no-such-checkpoint",
                            doc="404: receipts asked for at a tree size no signed checkpoint has.")
InvalidQuote = _problem("InvalidQuote", slug="invalid-quote", doc="400: a tampered, foreign or expired quote.")
InvalidPricePolicy = _problem("InvalidPricePolicy", slug="invalid-price-policy",
                              doc="400: a price policy that does not parse.")
UnknownRole = _problem("UnknownRole", slug="unknown-role", doc="400: a role that does not exist.")
AttributeMisconfigured = _problem("AttributeMisconfigured", slug="attribute-misconfigured",
                                  doc="409: an attribute whose one-shot fields describe no usable mechanism.")
LockOrderViolation = _problem("LockOrderViolation", slug="lock-order-violation",
                              doc="500: a bug caught by the service's lock-order check (development and tests only).")
SignInLocked = _problem("SignInLocked", slug="sign-in-locked",
                        doc="429: too many failed sign-ins for this account or address; retry after Retry-After.")
InvalidAmount = _problem("InvalidAmount", slug="invalid-amount", doc="400: an amount of money that is not valid.")
InvalidNumber = _problem("InvalidNumber", slug="invalid-number",
                         doc="400: a number that is not plain ASCII digits (and a point), or out of its range.")
NotABuyer = _problem("NotABuyer", slug="not-a-buyer", doc="400: a top-up for a user who is not a buyer.")
PayoutRefused = _problem("PayoutRefused", slug="payout-refused", doc="409: a payout request the rules refuse.")
TopUpKeyReused = _problem("TopUpKeyReused", slug="topup-key-reused",
                          doc="409: an Idempotency-Key already used for a different top-up.")
NoMoneyAccount = _problem("NoMoneyAccount", slug="no-money-account",
                          doc="404: only buyers and owners have a money account.")
SealBroken = _problem("SealBroken", slug="seal-broken", doc="500: a sealed value that does not open.")
CopyFormat = _problem("CopyFormat", slug="copy-format", doc="500: an unexpected bulk-copy layout.")
RestoreInput = _problem("RestoreInput", slug="unreadable-restore-input",
                        doc="400: verify_restore cannot read a kept checkpoint, policy or key (a command's error).")

# --- about:blank problems, by status ------------------------------------------------------------------------
Unauthorized = _problem("Unauthorized", status=401, doc="401: no valid token (sign in again: tokens expire).")
Forbidden = _problem("Forbidden", status=403, doc="403: the account may not do this (for example not a buyer).")
NotFound = _problem("NotFound", status=404, doc="404: no such resource (or not yours).")
MethodNotAllowed = _problem("MethodNotAllowed", status=405, doc="405: the method is not allowed here.")
NotAcceptable = _problem("NotAcceptable", status=406, doc="406: no representation for the Accept header.")
PayloadTooLarge = _problem("PayloadTooLarge", status=413, doc="413: the request body is too large.")
UnsupportedMediaType = _problem("UnsupportedMediaType", status=415, doc="415: the body's content type.")
TooManyRequests = _problem("TooManyRequests", status=429,
                           doc="429: throttled or signing in locked out; ``retry_after`` says for how long.")
ServerError = _problem("ServerError", status=500, doc="500: a fault of the service.")


class PurchaseFailed(ClientError):
    """A purchase that ran in the background and failed; ``purchase`` is its last state (``error`` says why)."""

    def __init__(self, purchase: dict):
        self.purchase = purchase
        super().__init__(f"purchase {purchase.get('id')} failed: {purchase.get('error') or 'no reason given'}")


class WaitTimeout(ClientError):
    """A purchase still running when the wait's timeout ran out; ``purchase`` is its last state (poll again)."""

    def __init__(self, purchase: dict, timeout: float):
        self.purchase = purchase
        super().__init__(f"purchase {purchase.get('id')} is still {purchase.get('status')} after {timeout:g} s; "
                         f"wait for it again with wait({purchase.get('id')})")


def problem_class(type_: str | None, status: int) -> type[ProblemError]:
    """The class for a problem's ``type`` and ``status``: by slug, by status for about:blank, else ProblemError."""
    if type_ and type_.startswith(PROBLEM_BASE):
        return BY_SLUG.get(type_[len(PROBLEM_BASE):], ProblemError)
    if not type_ or type_ == ABOUT_BLANK:
        return BY_STATUS.get(status, ProblemError)
    return ProblemError
