"""Money services: operators' top-ups and owners' payouts (docs/money.md).

Each service is one transaction that locks the money accounts it moves in the global lock order
(``accounts.locks``), changes each balance
and writes one ``MoneyEntry`` per movement with the balance after it, so the audit replays every account.  Amounts are
exact ``Decimal`` with at most two places (cents), in the currency of the setting ``LDP_CURRENCY``.

* ``money_topup`` credits a buyer (an entry of kind ``topup`` whose memo is the reason, and a ``TopUp`` saying who
  and why; an idempotency key makes a retried top-up credit once);
* ``payout_request`` debits an owner's earnings into a held payout (kind ``payout``): the balance's CHECK means a
  payout never exceeds it, and held money cannot be spent twice;
* ``payout_settle`` records that a held payout was paid (no money moves: it already left the earnings account;
  a payment provider would be called here, see docs/money.md);
* ``payout_reject`` credits a held payout back to the owner (kind ``payout``, positive);
* ``earnings_settle`` settles one attribute's owners' earnings from the compact ledger into their balances
  (a ``Settlement``: kind ``earning`` per owner, ``settlement`` on the attribute's pending account).
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

import numpy as np
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts import roles
from accounts.ledger import hashchain as ledger
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import LedgerRelease, MoneyAccount, MoneyEntry, PayoutRequest, Settlement, TopUp, User
from accounts.money import format as money_display
from accounts.money.units import CENT, MAX_AMOUNT, UNITS
from ldpmarket import pgbinary, storage
from ldpmarket.numbers import parse_ascii_decimal
from ldpmarket.problems import MoneyError, NotABuyer, PayoutRefused, TopUpConflict

currency = money_display.currency  # the setting LDP_CURRENCY (one definition: accounts.money.format)


def parse_amount(raw) -> Decimal:
    """A positive amount of at most two decimal places, as an exact Decimal; ``MoneyError`` otherwise.  Text must
    be a plain ASCII decimal (``"100.00"``; not ``"1_000"``, ``"+5"``, ``"1e3"`` nor ``"١٠"``:
    ``ldpmarket.numbers``)."""
    try:
        if isinstance(raw, str):  # "-" read, for "must be positive" below
            amount = parse_ascii_decimal(raw.strip(), signed=True)
        else:
            amount = Decimal(repr(raw) if isinstance(raw, float) else str(raw))
    except (InvalidOperation, ValueError):
        raise MoneyError(f"{raw!r} is not an amount: write it like 100.00.") from None
    if not amount.is_finite() or amount <= 0:
        raise MoneyError(f"The amount must be positive (got {raw}).")
    if amount > MAX_AMOUNT:  # first: quantizing a huge number raises
        raise MoneyError(f"The amount {raw} is above the limit of {MAX_AMOUNT}.")
    if amount != amount.quantize(CENT):
        raise MoneyError(f"The amount {raw} has more than two decimal places.")
    return amount.quantize(CENT)


#: An amount as people read it, "0.0128 EUR", "12.50 EUR" (one definition: accounts.money.format;
#: docs/money.md#how-amounts-are-shown).
format_money = money_display.format_money


def _locked_account(user, kind: str) -> MoneyAccount:
    MoneyAccount.objects.bulk_create([MoneyAccount(user=user, kind=kind)], ignore_conflicts=True)
    take_lock(Lock.BUYER_CREDIT if kind == MoneyAccount.Kind.BUYER_CREDIT else Lock.OWNER_EARNINGS)
    return MoneyAccount.objects.select_for_update().get(user=user, kind=kind)


def _move(account: MoneyAccount, amount: Decimal, kind: str, memo: str) -> MoneyEntry:
    """Change a locked account's balance by ``amount`` and write its entry (the balance CHECK refuses < 0)."""
    account.balance += amount
    account.save(update_fields=["balance"])
    return MoneyEntry.objects.create(account=account, amount=amount, balance_after=account.balance, kind=kind,
                                     memo=memo[:200])


# ----------------------------------------------------------------------------------------------- top-ups

def money_topup(*, buyer: User, amount, reason: str, by: User | None, idempotency_key: str | None = None) -> TopUp:
    """Credit ``buyer``'s account with ``amount`` for ``reason``, done by operator ``by`` (None: a command run
    by the deployment).  With an ``idempotency_key``, a retry with the same buyer, amount and reason returns the
    first top-up and credits nothing; the same key for another top-up is a ``TopUpConflict``."""
    amount = parse_amount(amount)
    reason = (reason or "").strip()
    if not reason:
        raise MoneyError("Say why the credit is given (a reason is required).")
    if len(reason) > 200:
        raise MoneyError("The reason is longer than 200 characters.")
    if not roles.is_buyer(buyer):
        raise NotABuyer(f"{buyer.username} is not a buyer: only buyers have credit.")
    try:
        with transaction.atomic():
            account = _locked_account(buyer, MoneyAccount.Kind.BUYER_CREDIT)  # after the platform, as purchases
            if idempotency_key is not None:
                done = TopUp.objects.filter(idempotency_key=idempotency_key).select_related("entry").first()
                if done is not None:
                    return _replayed(done, buyer, amount, reason)
            entry = _move(account, amount, MoneyEntry.Kind.TOPUP, reason)
            return TopUp.objects.create(buyer=buyer, amount=amount, reason=reason, by=by,
                                        idempotency_key=idempotency_key, entry=entry)
    except IntegrityError:
        # the same key, claimed by a concurrent top-up of another buyer: answer as a replay would
        done = TopUp.objects.filter(idempotency_key=idempotency_key).first() if idempotency_key else None
        if done is None:
            raise
        return _replayed(done, buyer, amount, reason)


def _replayed(done: TopUp, buyer, amount, reason) -> TopUp:
    if done.buyer_id != buyer.id or done.amount != amount or done.reason != reason:
        raise TopUpConflict("This Idempotency-Key was used for another top-up: send a new key for a new top-up.")
    done.replayed = True
    return done


# ----------------------------------------------------------------------------------------------- payouts

def payout_request(*, owner: User, amount=None) -> PayoutRequest:
    """Hold ``amount`` (default: the whole earnings balance) of ``owner``'s earnings for a payout."""
    if not roles.is_owner(owner):
        raise PayoutRefused("Only owners have earnings to pay out.")
    with transaction.atomic():
        account = _locked_account(owner, MoneyAccount.Kind.OWNER_EARNINGS)
        if amount is None or amount == "":
            amount = account.balance.quantize(CENT, rounding="ROUND_DOWN")
            if amount <= 0:
                raise PayoutRefused("There are no earnings to pay out.")
        amount = parse_amount(amount)
        if amount > account.balance:
            raise PayoutRefused(f"You asked for {format_money(amount)} but your earnings are "
                                f"{format_money(account.balance)}.")
        payout = PayoutRequest(owner=owner, amount=amount)
        payout.hold = _move(account, -amount, MoneyEntry.Kind.PAYOUT, "payout requested")
        payout.save()
        return payout


def _locked_payout(payout_id: int) -> PayoutRequest:
    take_lock(Lock.PAYOUT)
    payout = PayoutRequest.objects.select_for_update().get(id=payout_id)
    if payout.status != PayoutRequest.Status.REQUESTED:
        raise PayoutRefused(f"Payout {payout.id} is already {payout.status}.")
    return payout


def payout_settle(*, payout_id: int, by: User | None, note: str = "") -> PayoutRequest:
    """Record that a requested payout was paid to its owner (its money left the earnings account on request)."""
    with transaction.atomic():
        payout = _locked_payout(payout_id)
        payout.status = PayoutRequest.Status.SETTLED
        payout.decided_at, payout.decided_by, payout.note = timezone.now(), by, note[:200]
        payout.save(update_fields=["status", "decided_at", "decided_by", "note"])
        return payout


def payout_reject(*, payout_id: int, by: User | None, note: str = "") -> PayoutRequest:
    """Refuse a requested payout: its amount goes back to the owner's earnings."""
    with transaction.atomic():
        # the payout row, then its owner's account: their order in accounts.locks
        payout = _locked_payout(payout_id)
        account = _locked_account(payout.owner, MoneyAccount.Kind.OWNER_EARNINGS)
        payout.release = _move(account, payout.amount, MoneyEntry.Kind.PAYOUT, f"payout {payout.id} rejected")
        payout.status = PayoutRequest.Status.REJECTED
        payout.decided_at, payout.decided_by, payout.note = timezone.now(), by, note[:200]
        payout.save(update_fields=["status", "decided_at", "decided_by", "note", "release"])
        return payout


# ----------------------------------------------------------------------------------------------- settlements

#: Most compact ledger rows one settlement covers (a row holds at most ``LDP_CHAIN_BLOCK`` values).
SETTLE_ROWS = 2000


def earnings_settle(*, shard: int, max_rows: int = SETTLE_ROWS) -> Settlement | None:
    """Settle the owners' earnings of attribute ``shard``'s sales not settled yet (docs/money.md#settlement).

    One transaction: lock the attribute's pending account (purchases write their ledger rows under it, so every
    row not yet settled is visible once it is held), read the compact ledger rows after the last settlement's
    (at most ``max_rows``), sum each owner's earnings in them exactly (integer units, ``np.bincount``), lock the
    owners' earnings accounts by id, credit each its sum, debit the pending account the total and record the
    ``Settlement``.  Idempotent: with nothing to settle, nothing is written and ``None`` is returned.  Its locks follow
    ``accounts.locks``, and ``UNIQUE (shard, after_release)`` refuses a
    second settlement of the same rows even without the lock.
    """
    Kind = MoneyAccount.Kind
    with transaction.atomic():
        take_lock(Lock.OWNERS_PENDING)
        pending = (MoneyAccount.objects.select_for_update()
                   .filter(kind=Kind.OWNERS_PENDING, shard=shard).first())
        if pending is None:
            return None
        after = (Settlement.objects.filter(shard=shard).order_by("-through_release")
                 .values_list("through_release", flat=True).first()) or 0
        through, rows, owners, earnings = release_earnings(shard=shard, after=after, max_rows=max_rows)
        if rows == 0:
            return None
        paid = earnings > 0
        users, per_user = np.unique(owners[paid], return_inverse=True)
        sums = np.bincount(per_user, weights=earnings[paid], minlength=users.size).astype(np.int64)
        # exact: bincount adds in float64; every sum is below 2**53 units (balances are NUMERIC(16, 4))
        total = int(sums.sum())
        now = timezone.now()
        settlement = Settlement.objects.create(shard=shard, after_release=after, through_release=through,
                                               releases=rows, owners=int(users.size),
                                               amount=Decimal(total).scaleb(-4), created_at=now)
        if total:
            _settle_money(settlement, pending, users, sums, total, now)
        return settlement


def _settle_money(settlement: Settlement, pending: MoneyAccount, users: np.ndarray, sums: np.ndarray, total: int,
                  now) -> None:
    """Credit each owner's earnings account its sum and debit the pending account the total: set-based (one
    locking SELECT of the owners' accounts by id, one UPDATE from a COPY, one COPY of the entries)."""
    take_lock(Lock.OWNER_EARNINGS)
    rows = storage.lock_or_create(MoneyAccount._meta.db_table, "user_id", users,
                                  select=f"user_id, id, CAST(round(balance * {UNITS}) AS bigint)",
                                  match={"kind": MoneyAccount.Kind.OWNER_EARNINGS.value}, defaults={"balance": 0})
    got = np.array(rows, dtype=np.int64).reshape(-1, 3)
    got = got[np.argsort(got[:, 0], kind="stable")]
    pos = np.searchsorted(got[:, 0], users)
    ids, after = got[pos, 1], got[pos, 2] + sums
    pending_after = int((pending.balance * UNITS).to_integral_value()) - total
    ids = np.append(ids, pending.id)
    moves = np.append(sums, -total)
    after = np.append(after, pending_after)
    Col = pgbinary.Column
    updated = storage.update_columns(MoneyAccount._meta.db_table, "id",
                                     {"id": Col.int8(ids), "balance": Col.numeric(after, 4)}, ids.size,
                                     types={"id": "bigint", "balance": "numeric(16, 4)"}, temp="ldp_settle_after")
    if updated != ids.size:
        raise RuntimeError(f"money moved for {updated} accounts instead of {ids.size}")
    debit = np.zeros(ids.size, dtype=np.int64)
    debit[-1] = 1
    storage.write_columns(MoneyEntry._meta.db_table, {
        "account_id": Col.int8(ids),
        "settlement_id": Col.int8(np.full(ids.size, settlement.id)),
        "amount": Col.numeric(moves, 4),
        "balance_after": Col.numeric(after, 4),
        "memo": Col.text(debit, ("settled earnings", f"settlement {settlement.id}")),
        "kind": Col.text(debit, (MoneyEntry.Kind.EARNING.value, MoneyEntry.Kind.SETTLEMENT.value)),
        "created_at": Col.timestamp(np.full(ids.size, ledger.micros(now)))}, ids.size)


def settle_all(*, max_rows: int = SETTLE_ROWS) -> int:
    """Settle every attribute with unsettled earnings (beat); the number of settlements made."""
    made = 0
    for shard in MoneyAccount.objects.filter(kind=MoneyAccount.Kind.OWNERS_PENDING).values_list("shard", flat=True):
        while earnings_settle(shard=shard, max_rows=max_rows) is not None:
            made += 1
    return made


def release_earnings(*, shard: int, after: int, max_rows: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """The compact release rows of ``shard`` after row id ``after`` (at most ``max_rows``, in id order): ``(last row
    id, number of rows, owner ids, earnings)``, the last two one entry per value with recorded earnings (rows from
    before earnings were recorded per value have none: their owners were paid at purchase time).  PostgreSQL: the
    arrays unnested by the server and read by one binary COPY; SQLite: the JSON arrays."""
    table = LedgerRelease._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"SELECT max(id), count(*) FROM (SELECT id FROM {table} WHERE shard = %s AND id > %s "
                    f"ORDER BY id LIMIT %s) r", [shard, after, max_rows])
        through, rows = cur.fetchone()
    if not rows:
        return after, 0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if storage.has_binary_copy():
        with connection.cursor() as cur:
            data = pgbinary.copy_out(
                cur.cursor, f"SELECT u.o, u.e FROM {table} r, unnest(r.owner_ids, r.earnings) AS u(o, e) "
                            f"WHERE r.shard = {int(shard)} AND r.id > {int(after)} AND r.id <= {int(through)} "
                            f"AND r.earnings IS NOT NULL")
        got = pgbinary.parse_rows(data, [("o", ">i8"), ("e", ">i8")])
        return int(through), int(rows), got["o"].astype(np.int64), got["e"].astype(np.int64)
    pairs = list(LedgerRelease.objects.filter(shard=shard, id__gt=after, id__lte=through, earnings__isnull=False)
                 .values_list("owner_ids", "earnings"))
    owners = np.concatenate([o for o, _ in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    earnings = np.concatenate([e for _, e in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    return int(through), int(rows), owners, earnings
