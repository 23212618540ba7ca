"""Purchases: claim an idempotency key, then release every included value of an attribute atomically
(docs/budget-rules.md#budgets-and-ceilings, docs/architecture.md#the-path-of-a-purchase).

``purchase_claim`` (``oneshot.oneshot_claim`` for one-shot purchases and surveys) claims the buyer's
idempotency key: a replay with the same body returns the same purchase, a different body is a conflict.
``purchase_execute`` is the one execution skeleton of every purchase: one transaction that takes the locks in
the one global order, lets the purchase's release (``market.releases``: from chains, or one-shot) read, draw
and price its values, refuses the whole purchase if the buyer's credit is short or the quote's price was
exceeded, and writes set-based: the release's own rows, the money movements, the outputs and one ledger entry
per released value.  Either all of it commits or none of it does (rule 6); the CHECK constraints (loss <=
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
from ldpmarket import pgbinary, storage
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
    release's ``read``); (4) the money accounts, the buyer's, then the owners' by id (``lock_payment``); (5) the
    head of the attribute's ledger shard (``ledger.append``); (6) the platform's account, credited last of all
    (``_credit_platform``) after the deferred row checks have run: purchases of different attributes share no
    lock but it (and their common owners' accounts), and hold it only for their last statements and their
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
        owners = release.owner_ids
        accounts = lock_payment(purchase.buyer, owners, charge, owner_share, max_price)

        now = timezone.now()
        release.write(now)
        fee = _move_money(purchase, accounts, owners, charge, owner_share)
        if release.outputs is not None:
            _write_chunks(purchase, release.value_ids, release.outputs)
        if release.value_ids.size:
            ledger.append(release.ledger_rows(), shard=purchase.attribute_id)
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
    platform: int  # the platform's account id (not locked here: credited last, ``_credit_platform``)
    owner_user: np.ndarray  # owners' user ids, ascending
    owner_account: np.ndarray  # their earnings account ids
    owner_balance: np.ndarray  # their balances (units)


def lock_payment(buyer, owner_ids: np.ndarray, charge: np.ndarray, owner_share: np.ndarray, max_price) -> Accounts:
    """Lock the accounts a purchase pays through (``_lock_money``: the owners with a share) and, under the
    locks, refuse it if it costs more than ``max_price`` (a quote's price guard) or than the buyer's credit."""
    total = int(charge.sum())
    accounts = _lock_money(buyer, owner_ids[owner_share > 0])
    if max_price is not None and units_to_decimal(total) > max_price:
        raise PriceChanged(f"This purchase now costs {units_to_decimal(total)}, more than the {max_price} quoted.")
    if accounts.buyer[1] < total:
        raise InsufficientCredit(f"This purchase costs {units_to_decimal(total)} but your credit is "
                                 f"{units_to_decimal(accounts.buyer[1])}.")
    return accounts


def _lock_money(buyer, owner_ids: np.ndarray) -> Accounts:
    """Ensure the platform's, the buyer's and the paid owners' accounts, and lock the buyer's and the owners'.

    Locks are taken in one fixed order: the buyer's credit, then the owners' earnings by id; the platform's
    account, which every purchase credits, is locked last of all (``_credit_platform``, after the ledger), so
    purchases of different attributes hold it only for their last statement and their commit.  Set-based: one
    INSERT ... ON CONFLICT for missing accounts and one locking SELECT per category, with the owners passed as
    one array (no per-owner rows in Python, no OR that would defeat the planner).
    """
    owners = np.unique(owner_ids)
    MoneyAccount.objects.bulk_create([MoneyAccount(user=None, kind=MoneyAccount.Kind.PLATFORM),
                                      MoneyAccount(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)],
                                     ignore_conflicts=True)
    units = micro_units("balance")
    platform = (MoneyAccount.objects.filter(kind=MoneyAccount.Kind.PLATFORM, user__isnull=True)
                .values_list("id", flat=True).get())
    mine = (MoneyAccount.objects.select_for_update().filter(kind=MoneyAccount.Kind.BUYER_CREDIT, user=buyer)
            .values_list("id", units).get())
    # Lock the existing accounts by id.  Only if some owner has none yet: create the missing ones and lock the
    # whole set again by id (re-locking a held row is free), so the locks are still taken in one order whatever
    # a concurrent purchase created meanwhile (SQLite: no row locks; the database is locked for writing by the
    # transaction).
    rows = storage.lock_or_create(MoneyAccount._meta.db_table, "user_id", owners,
                                  select=f"user_id, id, CAST(round(balance * {UNITS}) AS bigint)",
                                  match={"kind": MoneyAccount.Kind.OWNER_EARNINGS.value}, defaults={"balance": 0})
    got = np.array(rows, dtype=np.int64).reshape(-1, 3)
    order = np.argsort(got[:, 0], kind="stable")
    got = got[order]
    return Accounts(buyer=tuple(mine), platform=int(platform), owner_user=got[:, 0], owner_account=got[:, 1],
                    owner_balance=got[:, 2])


def micro_units(field: str):
    """A money column in integer ten-thousandths, computed in SQL."""
    return Cast(Round(F(field) * UNITS), BigIntegerField())


def _move_money(purchase, accounts: Accounts, owner_ids, charge, owner_share) -> int:
    """Debit the buyer and credit each owner's share: set-based, in integer units; returns the platform's fee,
    credited last (``_credit_platform``)."""
    total = int(charge.sum())
    if total == 0:
        return 0
    fee = total - int(owner_share.sum())
    paid = owner_share > 0
    owners, per_owner = np.unique(owner_ids[paid], return_inverse=True)
    amounts = np.bincount(per_owner, weights=owner_share[paid], minlength=owners.size).astype(np.int64)
    pos = np.searchsorted(accounts.owner_user, owners)
    ids = np.concatenate([[accounts.buyer[0]], accounts.owner_account[pos]])
    moves = np.concatenate([[-total], amounts])
    after = np.concatenate([[accounts.buyer[1]], accounts.owner_balance[pos]]) + moves
    keep = moves != 0
    ids, moves, after = ids[keep], moves[keep], after[keep]
    slot = np.where(np.flatnonzero(keep) == 0, 0, 2)  # 0 buyer, 2 owners
    _write_money(purchase, ids, moves, after, slot, timezone.now())
    return fee


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


MEMOS = ("purchase", "platform fee", "share of a sale")
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
    """The released outputs in chunks of ``CHUNK`` values, each sealed (``sealing.seal_released``)."""
    PurchaseChunk.objects.filter(purchase=purchase).delete()
    chunks = []
    for k, s in enumerate(range(0, value_ids.size, CHUNK)):
        ids = value_ids[s:s + CHUNK].astype("<i8").tobytes()
        chunks.append(PurchaseChunk(purchase=purchase, seq=k, count=min(CHUNK, value_ids.size - s), value_ids=ids,
                                    outputs=sealing.seal_released(outputs[s:s + CHUNK].astype("<i2").tobytes(),
                                                                  purchase_id=purchase.id, seq=k, value_ids=ids)))
    PurchaseChunk.objects.bulk_create(chunks)
