"""Purchases: claim an idempotency key, then release every included value of an attribute atomically
(docs/budget-rules.md#budgets-and-ceilings, docs/architecture.md#the-path-of-a-purchase).

``purchase_claim`` (``oneshot.oneshot_claim`` for one-shot purchases and surveys) claims the buyer's
idempotency key: a replay with the same body returns the same purchase, a different body is a conflict.
``purchase_execute`` is the one execution skeleton of every purchase: one transaction that takes its locks in
the global lock order (``accounts.locks``), lets the purchase's release (``market.purchases.releases``: from chains, or
one-shot) read, draw and price its values, refuses the whole purchase if the buyer's credit is short or the quote's
price was exceeded, and writes set-based: the release's own rows, the money movements, the outputs and the compact
ledger rows of the released values (one per chain block, with each value's losses and its owner's earnings).  Either all
of it commits or none of it does (rule 6); the CHECK constraints (loss <= ceiling, balances >= 0) and the money trigger
are the last line of defence.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts import roles
from accounts.epsilon import MAX_SALE_EPSILON, parse
from accounts.ledger import hashchain as ledger
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import User
from accounts.money.purchase import credit_platform, lock_payment, move_money
from accounts.money.units import units_to_decimal
from ldpmarket import jobs, pgbinary, storage
from ldpmarket.problems import (
    IdempotencyConflict,
    PurchaseError,
)
from market.models import Attribute, Purchase, PurchaseChunk
from market.purchases.pricing import PolicyError, PricePolicy
from market.purchases.releases import release_of
from market.values import sealing

CHUNK = 10_000


def fingerprint(*, attribute_id: int, epsilon, cohort) -> str:
    body = json.dumps({"attribute": attribute_id, "epsilon": str(epsilon), "cohort": cohort}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def purchase_claim(*, buyer: User, attribute: Attribute, epsilon, cohort: int | None,
                   idempotency_key: str) -> tuple[Purchase, bool]:
    """Claim ``idempotency_key`` for this request; returns (purchase, created)."""
    if not roles.can_buy(buyer):
        raise PurchaseError("Only buyers can purchase.")
    e = parse(epsilon, allow_zero=False, limit=MAX_SALE_EPSILON)
    return claim_key(buyer=buyer, idempotency_key=idempotency_key,
                     request_hash=fingerprint(attribute_id=attribute.id, epsilon=e, cohort=cohort),
                     attribute=attribute, epsilon=e, cohort=cohort)


def claim_key(*, buyer: User, idempotency_key: str, request_hash: str, **fields) -> tuple[Purchase, bool]:
    """Create the purchase row under the buyer's ``idempotency_key`` (UNIQUE), or return the row a request with
    the same body (``request_hash``) created; another body under the same key is a conflict (409)."""
    try:
        with transaction.atomic():
            return Purchase.objects.create(buyer=buyer, idempotency_key=idempotency_key, request_hash=request_hash,
                                           **fields), True
    except IntegrityError:
        existing = Purchase.objects.get(buyer=buyer, idempotency_key=idempotency_key)
        return same_request_or_conflict(existing, request_hash), False


def same_request_or_conflict(existing: Purchase, request_hash: str) -> Purchase:
    """The purchase a key already names, when this request is the one that claimed it (the same
    ``request_hash``); ``IdempotencyConflict`` (409) when another body claimed the key."""
    if existing.request_hash != request_hash:
        raise IdempotencyConflict("This Idempotency-Key was already used for a different purchase.")
    return existing


def purchase_execute(*, purchase_id: int, rng=None, progress=None, max_price=None) -> Purchase:
    """Run a claimed purchase of any mechanism in one transaction (idempotent: a completed purchase is returned
    as it is).  The one execution skeleton: what differs between a chain purchase, a one-shot purchase and a
    survey is its release (``market.purchases.releases``).

    Its locks follow the global lock order (``accounts.locks.Lock``, which says where each is taken): the
    purchase row here, the budgets and the chain lock in the release's ``read``, the money accounts in
    ``lock_payment``, the ledger head in ``append``, the platform's account in ``credit_platform`` after the
    deferred row checks have run: purchases of different attributes share no lock but that last one (owners are
    paid later, by settlements), and hold it only for their last statements and their commit.  ``progress(done, total)``
    is called as phases complete (values resolved, then written); ``max_price`` refuses the purchase, under the locks,
    if it would cost more (a quote's price guard).
    """
    with transaction.atomic():
        take_lock(Lock.PURCHASE)
        purchase = (Purchase.objects.select_for_update(of=("self",)).select_related("attribute", "buyer")
                    .get(id=purchase_id))
        if purchase.status == Purchase.Status.COMPLETED:
            return purchase
        try:
            policy = PricePolicy.parse(purchase.attribute.price_policy)
        except PolicyError as exc:
            raise PurchaseError(f"This attribute's price policy is invalid: {exc}") from None
        release = release_of(purchase, rng)
        release.read()
        total_steps = 2 * release.candidates
        if progress:
            progress(total_steps // 2, total_steps)
        charge = release.charge(policy)
        owner_share = policy.owner_units(charge)
        accounts = lock_payment(purchase.buyer, purchase.attribute_id, charge, max_price)

        now = timezone.now()
        release.write(now)
        fee = move_money(purchase, accounts, charge, owner_share)
        if release.outputs is not None:
            _write_chunks(purchase, release.value_ids, release.outputs)
        if release.value_ids.size:
            rows = release.ledger_rows()
            rows.earning = owner_share  # each value's owner share, recorded in the compact ledger
            ledger.append(rows, shard=purchase.attribute_id)
        if int(owner_share.sum()) > 0:  # the owners' shares are settled into their balances after the commit
            jobs.enqueue(jobs.SETTLE_EARNINGS, purchase.attribute_id)
        storage.check_deferred_constraints()  # the row checks now, not at commit under the platform's lock
        credit_platform(purchase, accounts, fee)

        if progress:
            progress(total_steps, total_steps)
        release.record(purchase)
        purchase.candidates = release.candidates
        purchase.included = int(release.value_ids.size)
        purchase.price = units_to_decimal(int(charge.sum()))
        purchase.status = Purchase.Status.COMPLETED
        purchase.completed_at = now
        purchase.error = ""
        purchase.save()
    return purchase


def purchase_fail(*, purchase_id: int, error: str) -> None:
    """Record why a purchase could not run (nothing else was written: its transaction rolled back)."""
    Purchase.objects.filter(id=purchase_id).exclude(status=Purchase.Status.COMPLETED).update(
        status=Purchase.Status.FAILED, error=error[:2000])


def _write_chunks(purchase, value_ids: np.ndarray, outputs: np.ndarray) -> None:
    """The released outputs in chunks of ``CHUNK`` values, each sealed (``sealing.seal_released``), written by
    binary COPY (``storage.write_columns``, one per chunk length: the full chunks, then the last one), which
    sends the bytes as they are where Django's INSERT quoted them as text.
    A purchase that reaches here has no chunks yet: a completed one returns before, and a failed attempt's
    transaction left nothing."""
    starts = np.arange(0, value_ids.size, CHUNK)
    counts = np.minimum(CHUNK, value_ids.size - starts)
    ids = [value_ids[s:s + CHUNK].astype("<i8").tobytes() for s in starts.tolist()]
    key_id = sealing.newest_key_id()  # the key seal_released uses
    sealed = [sealing.seal_released(outputs[s:s + CHUNK].astype("<i2").tobytes(), purchase_id=purchase.id, seq=k,
                                    value_ids=ids[k]) for k, s in enumerate(starts.tolist())]
    Col = pgbinary.Column
    for count in np.unique(counts).tolist():
        seqs = np.flatnonzero(counts == count)
        as_matrix = lambda blobs: np.frombuffer(b"".join(blobs[k] for k in seqs.tolist()),  # noqa: E731
                                                dtype=np.uint8).reshape(seqs.size, -1)
        storage.write_columns(PurchaseChunk._meta.db_table, {
            "purchase_id": Col.int8(np.full(seqs.size, purchase.id)),
            "attribute_id": Col.int8(np.full(seqs.size, purchase.attribute_id)),
            "seq": Col.int4(seqs),
            "count": Col.int4(np.full(seqs.size, count)),
            "value_ids": Col(as_matrix(ids)),
            "outputs": Col(as_matrix(sealed)),
            "value_key_id": Col.int4(np.full(seqs.size, key_id))}, seqs.size)
