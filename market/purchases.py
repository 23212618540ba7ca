"""Purchases: claim an idempotency key, then release every included value of an attribute atomically
(docs/budget-rules.md#budgets-and-ceilings, docs/architecture.md#the-path-of-a-purchase).

``purchase_claim`` (``oneshot.oneshot_claim`` for one-shot purchases and surveys) claims the buyer's
idempotency key: a replay with the same body returns the same purchase, a different body is a conflict.
``purchase_execute`` is the one execution skeleton of every purchase: one transaction that takes the locks in
the one global order, lets the purchase's release (``market.releases``: from chains, or one-shot) read, draw
and price its values, refuses the whole purchase if the buyer's credit is short or the quote's price was
exceeded, and writes set-based: the release's own rows, the money movements, the outputs and the compact
ledger rows of the released values (one per chain block, with each value's losses and its owner's earnings).  Either all of it commits or none of it does (rule 6); the CHECK constraints (loss <=
ceiling, balances >= 0) and the money trigger are the last line of defence.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, F
from django.db.models.functions import Cast, Round
from django.utils import timezone

from accounts import ledger, roles
from accounts.epsilon import MAX_SALE_EPSILON, parse
from accounts.models import MoneyAccount, MoneyEntry, User
from ldpmarket import jobs, pgbinary, storage
from ldpmarket.problems import (
    IdempotencyConflict,
    InsufficientCredit,
    PriceChanged,
    PurchaseError,
)

from . import sealing
from .models import Attribute, Purchase, PurchaseChunk
from .pricing import UNITS, PolicyError, PricePolicy, units_to_decimal
from .releases import release_of

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
        if existing.request_hash != request_hash:
            raise IdempotencyConflict("This Idempotency-Key was already used for a different purchase.") from None
        return existing, False


def purchase_execute(*, purchase_id: int, rng=None, progress=None, max_price=None) -> Purchase:
    """Run a claimed purchase of any mechanism in one transaction (idempotent: a completed purchase is returned
    as it is).  The one execution skeleton: what differs between a chain purchase, a one-shot purchase and a
    survey is its release (``market.releases``).

    The locks, in the one global order every writer of a value follows (so nothing deadlocks): (1) the purchase
    row; (2) the budgets by value id and (3) the attribute's chain lock (``chainstore.lock``; both in the
    release's ``read``); (4) the money accounts, the buyer's, then the attribute's pending earnings (``lock_payment``); (5)
    the head of the attribute's ledger shard (``ledger.append``); (6) the platform's account, credited last of all
    (``_credit_platform``) after the deferred row checks have run: purchases of different attributes share no
    lock but it (owners are paid later, by settlements), and hold it only for their last statements and their
    commit.  ``progress(done, total)`` is called as phases complete (values resolved, then written);
    ``max_price`` refuses the purchase, under the locks, if it would cost more (a quote's price guard).
    """
    with transaction.atomic():
        purchase = Purchase.objects.select_for_update(of=("self",)).select_related("attribute", "buyer").get(id=purchase_id)
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
        fee = _move_money(purchase, accounts, charge, owner_share)
        if release.outputs is not None:
            _write_chunks(purchase, release.value_ids, release.outputs)
        if release.value_ids.size:
            rows = release.ledger_rows()
            rows.earning = owner_share  # each value's owner share, recorded in the compact ledger
            ledger.append(rows, shard=purchase.attribute_id)
        if int(owner_share.sum()) > 0:  # the owners' shares are settled into their balances after the commit
            jobs.enqueue(jobs.SETTLE_EARNINGS, purchase.attribute_id)
        storage.check_deferred_constraints()  # the row checks now, not at commit under the platform's lock
        _credit_platform(purchase, accounts, fee)

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


@dataclass
class Accounts:
    """The money accounts a purchase moves, locked: balances in integer ten-thousandths."""

    buyer: tuple[int, int]  # (account id, balance units)
    pending: tuple[int, int]  # the attribute's owners_pending account (docs/money.md#settlement)
    platform: int  # the platform's account id (not locked here: credited last, ``_credit_platform``)


def lock_payment(buyer, shard: int, charge: np.ndarray, max_price) -> Accounts:
    """Lock the accounts a purchase pays through (``_lock_money``) and, under the locks, refuse it if it costs more
    than ``max_price`` (a quote's price guard) or than the buyer's credit."""
    total = int(charge.sum())
    accounts = _lock_money(buyer, shard)
    if max_price is not None and units_to_decimal(total) > max_price:
        raise PriceChanged(f"This purchase now costs {units_to_decimal(total)}, more than the {max_price} quoted.")
    if accounts.buyer[1] < total:
        raise InsufficientCredit(f"This purchase costs {units_to_decimal(total)} but your credit is "
                                 f"{units_to_decimal(accounts.buyer[1])}.")
    return accounts


def _lock_money(buyer, shard: int) -> Accounts:
    """Ensure the platform's, the buyer's and the attribute's pending-earnings accounts, and lock the buyer's, then
    the pending one.

    The owners' own accounts are not touched: each value's owner share is recorded in the compact ledger rows and
    settled into the owners' balances in batches (``accounts.money.earnings_settle``, docs/money.md#settlement),
    which reads only the rows written under the pending account's lock, so a purchase holds it from here to its
    commit.  The platform's account, which every purchase credits, is locked last of all (``_credit_platform``).
    """
    Kind = MoneyAccount.Kind
    units = micro_units("balance")

    def read():
        platform = MoneyAccount.objects.filter(kind=Kind.PLATFORM).values_list("id", flat=True).first()
        mine = (MoneyAccount.objects.select_for_update().filter(kind=Kind.BUYER_CREDIT, user=buyer)
                .values_list("id", units).first())
        pending = (MoneyAccount.objects.select_for_update().filter(kind=Kind.OWNERS_PENDING, shard=shard)
                   .values_list("id", units).first())
        return platform, mine, pending

    platform, mine, pending = read()
    if platform is None or mine is None or pending is None:  # the first purchase of this buyer or attribute
        MoneyAccount.objects.bulk_create([MoneyAccount(user=None, kind=Kind.PLATFORM),
                                          MoneyAccount(user=buyer, kind=Kind.BUYER_CREDIT),
                                          MoneyAccount(user=None, kind=Kind.OWNERS_PENDING, shard=shard)],
                                         ignore_conflicts=True)
        platform, mine, pending = read()  # (re-locking a held row is free: the order is still buyer, pending)
    return Accounts(buyer=tuple(mine), pending=tuple(pending), platform=int(platform))


def micro_units(field: str):
    """A money column in integer ten-thousandths, computed in SQL."""
    return Cast(Round(F(field) * UNITS), BigIntegerField())


def _move_money(purchase, accounts: Accounts, charge, owner_share) -> int:
    """Debit the buyer and credit the owners' shares to the attribute's pending account (settled to the owners
    later, from the ledger's per-value earnings): two movements, in integer units; returns the platform's fee,
    credited last (``_credit_platform``)."""
    total = int(charge.sum())
    if total == 0:
        return 0
    shares = int(owner_share.sum())
    ids = np.array([accounts.buyer[0], accounts.pending[0]])
    moves = np.array([-total, shares])
    after = np.array([accounts.buyer[1], accounts.pending[1]]) + moves
    keep = moves != 0
    _write_money(purchase, ids[keep], moves[keep], after[keep], np.array([0, 2])[keep], timezone.now())
    return total - shares


def _credit_platform(purchase, accounts: Accounts, fee: int) -> None:
    """Credit the platform's fee: the last lock of a purchase (its account is shared by every purchase), one
    ``UPDATE ... RETURNING`` and one entry."""
    if fee == 0:
        return
    table = MoneyAccount._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {table} SET balance = balance + %s WHERE id = %s RETURNING "
                    f"CAST(round(balance * {UNITS}) AS bigint)", [units_to_decimal(fee), accounts.platform])
        (after,) = cur.fetchone()
    _write_money(purchase, np.array([accounts.platform]), np.array([fee]), np.array([after]), np.array([1]),
                 timezone.now())


MEMOS = ("purchase", "platform fee", "owners' shares, to settle")
#: The ``MoneyEntry.kind`` of the same three movements (buyer, platform, owners).
ENTRY_KINDS = (MoneyEntry.Kind.PURCHASE.value, MoneyEntry.Kind.FEE.value, MoneyEntry.Kind.EARNING.value)


def _write_money(purchase, ids: np.ndarray, moves: np.ndarray, after: np.ndarray, slot: np.ndarray, now) -> None:
    """The balances (``storage.update_columns``: on PostgreSQL binary COPY into a temporary table and one
    ``UPDATE ... FROM``) and the entries (``storage.write_columns``: one binary COPY).  ``slot`` is each
    movement's place in (buyer, platform, owners...): it picks the memo.
    """
    Col = pgbinary.Column
    updated = storage.update_columns(MoneyAccount._meta.db_table, "id",
                                     {"id": Col.int8(ids), "balance": Col.numeric(after, 4)}, ids.size,
                                     types={"id": "bigint", "balance": "numeric(16, 4)"}, temp="ldp_money_after")
    if updated != ids.size:
        raise RuntimeError(f"money moved for {updated} accounts instead of {ids.size}")
    storage.write_columns(MoneyEntry._meta.db_table, {
        "account_id": Col.int8(ids),
        "purchase_id": Col.int8(np.full(ids.size, purchase.id)),
        "amount": Col.numeric(moves, 4),
        "balance_after": Col.numeric(after, 4),
        "memo": Col.text(np.minimum(slot, 2), MEMOS),
        "kind": Col.text(np.minimum(slot, 2), ENTRY_KINDS),
        "created_at": Col.timestamp(np.full(ids.size, ledger.micros(now)))}, ids.size)


def _write_chunks(purchase, value_ids: np.ndarray, outputs: np.ndarray) -> None:
    """The released outputs in chunks of ``CHUNK`` values, each sealed (``sealing.seal_released``), written by
    binary COPY (``storage.write_columns``, one per chunk length: the full chunks, then the last one), which
    sends the bytes as they are where Django's INSERT quoted them as text.
    A purchase that reaches here has no chunks yet: a completed one returns before, and a failed attempt's
    transaction left nothing."""
    starts = np.arange(0, value_ids.size, CHUNK)
    counts = np.minimum(CHUNK, value_ids.size - starts)
    ids = [value_ids[s:s + CHUNK].astype("<i8").tobytes() for s in starts.tolist()]
    sealed = [sealing.seal_released(outputs[s:s + CHUNK].astype("<i2").tobytes(), purchase_id=purchase.id, seq=k,
                                    value_ids=ids[k]) for k, s in enumerate(starts.tolist())]
    Col = pgbinary.Column
    for count in np.unique(counts).tolist():
        seqs = np.flatnonzero(counts == count)
        as_matrix = lambda blobs: np.frombuffer(b"".join(blobs[k] for k in seqs.tolist()),  # noqa: E731
                                                dtype=np.uint8).reshape(seqs.size, -1)
        storage.write_columns(PurchaseChunk._meta.db_table, {
            "purchase_id": Col.int8(np.full(seqs.size, purchase.id)),
            "seq": Col.int4(seqs),
            "count": Col.int4(np.full(seqs.size, count)),
            "value_ids": Col(as_matrix(ids)),
            "outputs": Col(as_matrix(sealed))}, seqs.size)
