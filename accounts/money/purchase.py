"""A purchase's money (docs/money.md): the accounts it pays through, locked in the global lock order
(``accounts.locks``), the price and credit guards under those locks, and the set-based movements: the buyer
debited, the owners' shares credited to the attribute's pending account (settled later from the ledger's
per-value earnings), the platform's fee credited last.  Called by ``market.purchases.execution`` only; no
module under ``market/`` writes ``MoneyAccount`` or ``MoneyEntry`` rows itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.utils import timezone

from accounts.ledger import hashchain
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import MoneyAccount, MoneyEntry
from accounts.money.format import format_money
from accounts.money.units import UNITS, micro_units, units_to_decimal
from ldpmarket import pgbinary, storage
from ldpmarket.problems import InsufficientCredit, PriceChanged


@dataclass
class Accounts:
    """The money accounts a purchase moves, locked: balances in integer ten-thousandths."""

    buyer: tuple[int, int]  # (account id, balance units)
    pending: tuple[int, int]  # the attribute's owners_pending account (docs/money.md#settlement)
    platform: int  # the platform's account id (not locked here: credited last, ``credit_platform``)


def lock_payment(buyer, shard: int, charge: np.ndarray, max_price) -> Accounts:
    """Lock the accounts a purchase pays through (``_lock_money``) and, under the locks, refuse it if it costs more
    than ``max_price`` (a quote's price guard) or than the buyer's credit."""
    total = int(charge.sum())
    accounts = _lock_money(buyer, shard)
    if max_price is not None and units_to_decimal(total) > max_price:
        raise PriceChanged(f"This purchase now costs {format_money(units_to_decimal(total))}, more than the "
                           f"{format_money(max_price)} quoted.")
    if accounts.buyer[1] < total:
        raise InsufficientCredit(f"This purchase costs {format_money(units_to_decimal(total))} but your credit is "
                                 f"{format_money(units_to_decimal(accounts.buyer[1]))}.")
    return accounts


def _lock_money(buyer, shard: int) -> Accounts:
    """Ensure the platform's, the buyer's and the attribute's pending-earnings accounts, and lock the buyer's and
    the pending one (their places in the global lock order: ``accounts.locks``).

    The owners' own accounts are not touched: each value's owner share is recorded in the compact ledger rows and
    settled into the owners' balances in batches (``accounts.money.services.earnings_settle``,
    docs/money.md#settlement), which reads only the rows written under the pending account's lock, so a purchase holds
    it from here to its commit.  The platform's account, which every purchase credits, is locked later
    (``credit_platform``).
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

    take_lock(Lock.BUYER_CREDIT)
    take_lock(Lock.OWNERS_PENDING)
    platform, mine, pending = read()
    if platform is None or mine is None or pending is None:  # the first purchase of this buyer or attribute
        MoneyAccount.objects.bulk_create([MoneyAccount(user=None, kind=Kind.PLATFORM),
                                          MoneyAccount(user=buyer, kind=Kind.BUYER_CREDIT),
                                          MoneyAccount(user=None, kind=Kind.OWNERS_PENDING, shard=shard)],
                                         ignore_conflicts=True)
        platform, mine, pending = read()  # (re-locking a held row is free: the order is still buyer, pending)
    return Accounts(buyer=tuple(mine), pending=tuple(pending), platform=int(platform))



def move_money(purchase, accounts: Accounts, charge, owner_share) -> int:
    """Debit the buyer and credit the owners' shares to the attribute's pending account (settled to the owners
    later, from the ledger's per-value earnings): two movements, in integer units; returns the platform's fee,
    credited last (``credit_platform``)."""
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


def credit_platform(purchase, accounts: Accounts, fee: int) -> None:
    """Credit the platform's fee: the last lock of a purchase (its account is shared by every purchase), one
    ``UPDATE ... RETURNING`` and one entry."""
    if fee == 0:
        return
    table = MoneyAccount._meta.db_table
    take_lock(Lock.PLATFORM)
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
        "created_at": Col.timestamp(np.full(ids.size, hashchain.micros(now)))}, ids.size)
