"""One purchase pipeline: every purchase, one-shot purchase and survey goes through :func:`purchase_request`
(the API) and :func:`purchase_run` (it, and the Celery worker), docs/architecture.md#the-path-of-a-purchase.

:func:`purchase_request` owns what happens between a parsed request and its execution:

1. **replay**: the buyer's ``Idempotency-Key`` already names a purchase. The same body gets that purchase
   (completed: as it is; failed: run again; pending or running: sent again to a worker if nobody holds it, or
   refused as in flight); another body is a conflict;
2. **the quote guard**: what the purchase would include and cost now (``selectors``, no locks); nothing to
   sell is refused, and a purchase made from a quote is refused if it now costs more than quoted;
3. **the claim**: the purchase row under the key, in a durable transaction, so that it is committed (a
   worker can see it) before anything runs;
4. **run or enqueue**: a small purchase runs in this request (:func:`purchase_run`), a large one is sent to
   Celery once the claim is committed.

:func:`purchase_run` makes every status change of an execution: ``running`` (an attempt, a heartbeat), then
``completed`` (by ``purchases.purchase_execute``, in its one transaction) or ``failed`` with the reason.  The
view and the task only parse, call and respond.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal

import structlog
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts import roles
from accounts.epsilon import MAX_SALE_EPSILON, parse
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import User
from accounts.money.format import format_money
from ldpmarket import jobs
from ldpmarket.problems import (
    BuyerNotApproved,
    InFlight,
    NotForSale,
    NothingToSell,
    PriceChanged,
    PurchaseConflict,
    PurchaseError,
    PurchaseInterrupted,
)
from market import selectors
from market.models import Attribute, Purchase
from market.purchases import execution as purchases
from market.purchases import oneshot
from market.purchases.execution import purchase_fail
from market.purchases.oneshot_specs import Spec
from market.purchases.progress import progress_reporter, progress_set

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class PurchaseRequest:
    """A parsed purchase request: the attribute, the epsilon (a chain purchase, ``spec`` None) or the one-shot
    or survey ``spec``, the cohort, and ``quoted_price`` when it was made from a quote (the price guard)."""

    attribute: Attribute
    epsilon: Decimal | None
    cohort: int | None
    spec: Spec | None = None
    quoted_price: Decimal | None = None

    @property
    def fingerprint(self) -> str:
        """The body's hash the Idempotency-Key is bound to."""
        if self.spec is None:  # the epsilon as purchase_claim stores it (6 places)
            return purchases.fingerprint(attribute_id=self.attribute.id, cohort=self.cohort,
                                         epsilon=parse(self.epsilon, allow_zero=False, limit=MAX_SALE_EPSILON))
        return self.spec.fingerprint(self.attribute.id, self.cohort)


@dataclass(frozen=True)
class Outcome:
    """What a request led to: the purchase, and whether it was created by this request and still runs in a
    worker (the API answers 201, 200 for a replay, 202 while a worker runs it)."""

    purchase: Purchase
    created: bool
    running: bool

    @property
    def status_code(self) -> int:
        if self.running:
            return 202
        return 201 if self.created else 200


def purchase_request(*, buyer: User, request: PurchaseRequest, idempotency_key: str) -> Outcome:
    """Replay, quote guard, claim, then run or enqueue (module docstring).  A buyer whose account the operator has
    not approved is refused first (``BuyerNotApproved``): nothing is claimed, charged or written to the ledger."""
    refuse_unapproved(buyer)
    existing = Purchase.objects.filter(buyer=buyer, idempotency_key=idempotency_key).first()
    if existing is not None:
        return _replay(purchases.same_request_or_conflict(existing, request.fingerprint))
    with transaction.atomic(durable=True):
        q = _quote_now(buyer, request)
        if q.included == 0:
            raise nothing_to_sell(q)
        if request.quoted_price is not None and q.price > request.quoted_price:
            raise PriceChanged(f"The price is now {format_money(q.price)}, more than the "
                               f"{format_money(request.quoted_price)} quoted: ask for a new quote.")
        if request.spec is None:
            purchase, created = purchases.purchase_claim(buyer=buyer, attribute=request.attribute,
                                                         epsilon=request.epsilon, cohort=request.cohort,
                                                         idempotency_key=idempotency_key)
        else:
            purchase, created = oneshot.oneshot_claim(buyer=buyer, attribute=request.attribute, spec=request.spec,
                                                      cohort=request.cohort, idempotency_key=idempotency_key)
    if not created:  # the same key and body, claimed by a concurrent request
        return _replay(purchase)
    return _run_or_enqueue(purchase, q.candidates, q.included, created=True, max_price=request.quoted_price)


def refuse_unapproved(buyer: User) -> None:
    """``BuyerNotApproved`` (403) unless ``buyer`` is a buyer the operator approved
    (docs/security.md#buyer-accounts)."""
    if not roles.buyer_is_approved(buyer):
        raise BuyerNotApproved(
            "This buyer account awaits the operator's approval: purchases and surveys are possible once the operator "
            "has approved it (you will get an e-mail). Meanwhile the catalog and quotes are open to you.")


def _quote_now(buyer: User, request: PurchaseRequest) -> selectors.Quote:
    policy = policy_or_refuse(request.attribute)
    if request.spec is None:
        return selectors.quote(buyer_id=buyer.id, attribute=request.attribute, epsilon=request.epsilon,
                               cohort=request.cohort, policy=policy)
    return selectors.oneshot_quote(buyer_id=buyer.id, attribute=request.attribute, spec=request.spec,
                                   cohort=request.cohort, policy=policy)


def policy_or_refuse(attribute: Attribute):
    """The attribute's price policy, or ``NotForSale`` (409) when it is not valid."""
    policy = selectors.price_policy_or_none(attribute)
    if policy is None:
        raise NotForSale(f"The attribute {attribute.id} is not for sale: its price policy is not valid.")
    return policy


def nothing_to_sell(q: selectors.Quote) -> NothingToSell:
    """The 400 of a request no value can be sold to now, saying how many values were left out and why."""
    why = (f"{q.excluded_ceiling} have a ceiling below it, {q.excluded_budget} have too little budget remaining "
           f"(their ceiling minus what was already spent), {q.excluded_paused} are paused, "
           f"{q.excluded_withdrawn} were withdrawn, {q.excluded_no_raw} cannot be extended to it, "
           f"{q.excluded_awaiting_owner} await their owner's upload")
    return NothingToSell(
        f"No value of attribute {q.attribute.id} can be sold at epsilon {q.epsilon} now: of {q.candidates} values, "
        f"{why}. See the catalog's histogram for the epsilons available.",
        extra={"candidates": q.candidates, "excluded": selectors.excluded_counts(q)})


def _runs_in_a_worker(candidates: int) -> bool:
    return candidates > settings.LDP_ASYNC_PURCHASE_THRESHOLD


def _run_or_enqueue(purchase: Purchase, candidates: int, total: int, *, created: bool, max_price=None) -> Outcome:
    """Run a claimed purchase: in this request, or (large) in Celery once the claim is committed."""
    structlog.contextvars.bind_contextvars(purchase_id=purchase.id)  # the request's lines from here on name it
    if _runs_in_a_worker(candidates):
        progress_set(purchase.id, 0, total)
        log.info("purchase %s sent to a worker (%s candidate values)", purchase.id, candidates)
        jobs.enqueue(jobs.RUN_PURCHASE, purchase.id)
        purchase.refresh_from_db()
        return Outcome(purchase, created, True)
    try:
        return Outcome(purchase_run(purchase_id=purchase.id, max_price=max_price, total=total), created, False)
    except (OperationalError, InterfaceError) as exc:
        # The database went away mid-way: the purchase's transaction rolled back, the claim stays.  The buyer
        # gets its id and retries it with the same key (or the sweeper runs it): a 503, not a 500 with no id.
        log.warning("purchase %s interrupted by a database failure: %s", purchase.id, exc)
        raise PurchaseInterrupted(
            f"The database failed while purchase {purchase.id} ran; nothing was released or charged. Retry the "
            f"request with the same Idempotency-Key: it runs the purchase once (or shows it completed).",
            purchase_id=purchase.id) from exc


def _replay(purchase: Purchase) -> Outcome:
    """The same key and body again: the completed purchase, or its current state, or run it if it stalled."""
    structlog.contextvars.bind_contextvars(purchase_id=purchase.id)
    if purchase.status == Purchase.Status.COMPLETED:
        return Outcome(purchase, False, False)
    policy_or_refuse(purchase.attribute)  # running it again needs a valid price policy
    candidates, total = selectors.request_size(purchase)
    if purchase.status == Purchase.Status.FAILED:  # nothing was written: try again
        return _run_or_enqueue(purchase, candidates, total, created=False)
    if _runs_in_a_worker(candidates):
        # Pending, or "running" with nobody holding its row (a worker killed mid-way: its transaction rolled
        # back): send it again.  The task is idempotent, so a copy still queued or redelivered later (Redis
        # visibility timeout) finds it completed; one whose worker is just starting waits for its lock.
        if not _locked(purchase.id):
            jobs.enqueue(jobs.RUN_PURCHASE, purchase.id)
        purchase.refresh_from_db()
        return Outcome(purchase, False, purchase.status != Purchase.Status.COMPLETED)
    if _locked(purchase.id):
        raise InFlight("A purchase with this Idempotency-Key is still in flight; retry when it has finished.")
    return _run_or_enqueue(purchase, candidates, total, created=False)


def _locked(purchase_id: int) -> bool:
    """Whether another transaction holds the purchase row (it is being executed right now)."""
    if not connection.features.has_select_for_update_nowait:
        return False
    try:
        with transaction.atomic():
            take_lock(Lock.PURCHASE)
            list(Purchase.objects.select_for_update(nowait=True).filter(id=purchase_id).values_list("id"))
        return False
    except DatabaseError:
        return True


def purchase_run(*, purchase_id: int, rng=None, max_price=None, total: int | None = None,
                 conflicts_retried: bool = False, skip_if_held: bool = False) -> Purchase:
    """Execute a claimed purchase now, making its status changes: ``running`` (one more attempt, a fresh
    heartbeat), then completed by its one transaction (``purchases.purchase_execute``: idempotent, a completed
    purchase is returned as it is), or ``failed`` with the reason when the rules refuse it (``PurchaseError``,
    raised again).  ``skip_if_held`` (workers): a purchase another transaction is executing is returned as it
    is.  ``total`` sizes the progress reports (counted now when not given).  A worker retries a
    ``PurchaseConflict`` (a concurrent change; nothing was written) itself: ``conflicts_retried`` leaves the
    purchase running then.  Its log lines carry ``purchase_id`` (docs/operations.md#logs)."""
    with structlog.contextvars.bound_contextvars(purchase_id=purchase_id):
        return _run(purchase_id=purchase_id, rng=rng, max_price=max_price, total=total,
                    conflicts_retried=conflicts_retried, skip_if_held=skip_if_held)


def _run(*, purchase_id: int, rng, max_price, total: int | None, conflicts_retried: bool,
         skip_if_held: bool) -> Purchase:
    purchase = Purchase.objects.select_related("attribute").get(id=purchase_id)
    if purchase.status == Purchase.Status.COMPLETED:
        return purchase
    if skip_if_held and _locked(purchase_id):
        # A worker: another transaction is executing it right now (its row lock is its heartbeat, and ends with
        # its session).  A copy sent by the sweeper or redelivered returns at once instead of holding a worker
        # until the first finishes; if that one dies, the sweeper sends it again
        # (docs/operations.md#recovery-nothing-stays-stranded).
        return purchase
    if total is None:  # a worker: size the progress reports now
        _, total = selectors.request_size(purchase)
        progress_set(purchase_id, 0, total)
    Purchase.objects.filter(id=purchase_id).exclude(status=Purchase.Status.COMPLETED).update(
        status=Purchase.Status.RUNNING, error="", attempts=F("attempts") + 1, heartbeat_at=timezone.now())
    try:
        done = purchases.purchase_execute(purchase_id=purchase_id, rng=rng, max_price=max_price,
                                          progress=progress_reporter(purchase_id, total))
    except PurchaseError as exc:
        if not (conflicts_retried and isinstance(exc, PurchaseConflict)):
            purchase_fail(purchase_id=purchase_id, error=str(exc))
        log.info("purchase %s not completed: %s", purchase_id, exc.slug)  # the reason is in the purchase
        raise
    log.info("purchase %s %s", purchase_id, done.status)
    return done
