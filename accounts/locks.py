"""The one global lock order (docs/architecture.md#the-lock-order), as code.

Every transaction that takes more than one of the locks below takes them in the order of :class:`Lock`, so no
two writers ever wait for each other in a cycle (no deadlock), whatever mix of purchases, uploads, budget
changes, settlements and payouts runs at once.  A lock of one kind may be taken again, or for several rows at
once, as long as the rows of that kind are taken in id order (budgets by value id, owners' accounts by id).

Each place that takes a lock calls :func:`take` just before, naming its kind; with ``LDP_CHECK_LOCK_ORDER`` on
(the test settings and ``DJANGO_DEBUG``) a lock taken after a later one in the same transaction raises
:class:`LockOrderViolation`, so the whole test suite checks the order on every path it runs.  This module is the
only statement of the order: docstrings and docs cite it instead of restating it.
"""
from __future__ import annotations

import weakref
from enum import IntEnum

from django.conf import settings
from django.db import transaction

from ldpmarket.problems import LockOrderViolation


class Lock(IntEnum):
    """The locks, in the order a transaction may take them (a lower value first)."""

    #: A purchase's row (``market.purchases.execution.purchase_execute``; the sweeper, ``SKIP LOCKED``).
    PURCHASE = 10
    #: Budget rows (``BudgetAccount``), in value-id order: purchases (``market.purchases.eligibility``), budget
    #: services (``accounts.services``), value services (``market.values.services``).
    BUDGETS = 20
    #: A value's own row (``market.values.services``: deleting its raw value, tagging it; ``market.values.rotation``:
    #: sealing it again under a new value key, rows in id order).
    VALUE = 30
    #: The attribute's chain lock, ``FOR NO KEY UPDATE`` of its row (``market.chains.store.lock``; also taken by
    #: ``market.values.rotation`` to seal the attribute's chain points again).
    CHAIN = 40
    #: The buyer's credit account (``accounts.money.purchase``, ``accounts.money.services.money_topup``).
    BUYER_CREDIT = 50
    #: The attribute's pending-earnings account (``accounts.money.purchase``, settlements).
    OWNERS_PENDING = 60
    #: A payout request's row (``accounts.money.services``: settling or rejecting it).
    PAYOUT = 70
    #: Owners' earnings accounts, by id (settlements, payouts).
    OWNER_EARNINGS = 80
    #: The head of a ledger shard (``accounts.ledger.hashchain.append``): the last lock of every budget change.
    LEDGER_HEAD = 90
    #: The platform's account, credited last of all by a purchase (held for its last statements only).
    PLATFORM = 100
    #: The checkpoint log (``accounts.ledger.checkpoints``), in transactions of its own.
    CHECKPOINT_LOG = 110
    #: A witness's row (``accounts.ledger.witnesses``: recording its answer), in transactions of its own.
    WITNESS = 120


def _transaction_key(connection):
    """The outermost atomic block of the transaction (a test case's own wrapping blocks do not count: each
    service a test calls is then a transaction of its own, as it is in production)."""
    for block in connection.atomic_blocks:
        if not getattr(block, "_from_testcase", False):
            return block
    return None


def take(lock: Lock) -> None:
    """Record that the current transaction takes ``lock`` now; with ``LDP_CHECK_LOCK_ORDER``, refuse it after a
    later one (:class:`LockOrderViolation`).  Outside a transaction a row lock ends with its statement: nothing
    to check."""
    if not getattr(settings, "LDP_CHECK_LOCK_ORDER", False):
        return
    connection = transaction.get_connection()
    outer = _transaction_key(connection)
    if outer is None:
        return
    state = getattr(connection, "_ldp_lock_order", None)
    if state is None or state[0]() is not outer:
        state = (weakref.ref(outer), lock)
    elif lock < state[1]:
        raise LockOrderViolation(f"{lock.name} taken after {state[1].name} in one transaction: the global lock order "
                                 f"(accounts/locks.py) takes {lock.name} first")
    else:
        state = (state[0], lock)
    connection._ldp_lock_order = state
