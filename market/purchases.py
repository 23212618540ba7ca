"""Purchases: release every included value of an attribute at one epsilon, atomically (docs/budget-rules.md#budgets-and-ceilings).

``purchase_claim`` claims the buyer's idempotency key (a replay with the same
body returns the same purchase; a different body is a conflict).
``purchase_execute`` then runs one transaction that

1. locks, in one global order — the purchase row, budgets by value id, chains
   by value id, money accounts by id, the ledger head last — so concurrent
   purchases, budget changes and extensions never deadlock or interleave;
2. includes a value only if it is not paused or withdrawn and
   ``max(chain_loss, e) + oneshot_loss <= ceiling`` (rules 2, 3, 7), exactly,
   in integer micro-epsilons;
3. takes each value's output at e from its chain (stored, bridged, tightened
   or extended: ``market.chainsets``), storing new points;
4. prices it (upgrade credit from the buyer's holdings) and refuses the whole
   purchase if the buyer's credit is short;
5. writes set-based: chains, budgets (``chain_loss = max(chain_loss, e)``), one
   ledger entry per released value, holdings, money movements and the outputs.

Either all of it commits or none of it does (rule 6); the CHECK constraints
(loss <= ceiling, balances >= 0) are the last line of defence.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, F
from django.db.models.functions import Cast, Round
from django.utils import timezone

from accounts import ledger, roles
from accounts.epsilon import MAX_SALE_EPSILON, from_micro, parse, to_micro
from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, User
from ldpmarket import pgbinary, storage
from ldpmarket.problems import (
    IdempotencyConflict,
    InsufficientCredit,
    PriceChanged,
    PurchaseConflict,
    PurchaseError,
)

from . import chainsets, domain, pgcopy, sealing
from .eligible import Candidates, candidates, held_epsilons
from .models import Attribute, Chain, Holding, Purchase, PurchaseChunk, Value
from .pricing import UNITS, PolicyError, PricePolicy, units_to_decimal

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
    """Run a claimed purchase in one transaction (idempotent: a completed purchase is returned as it is).

    ``progress(done, total)`` is called as phases complete (values resolved, then written); ``max_price``
    refuses the purchase, under the locks, if it would cost more (a quote's price guard).
    """
    with transaction.atomic():
        purchase = Purchase.objects.select_for_update(of=("self",)).select_related("attribute", "buyer").get(id=purchase_id)
        if purchase.status == Purchase.Status.COMPLETED:
            return purchase
        attribute, buyer = purchase.attribute, purchase.buyer
        e = to_micro(purchase.epsilon)
        m, width = attribute.domain_size, attribute.width
        try:
            policy = PricePolicy.parse(attribute.price_policy)
        except PolicyError as exc:
            raise PurchaseError(f"This attribute's price policy is invalid: {exc}") from None
        cand = candidates(attribute, purchase.cohort, e, lock=True)
        total_steps = 2 * int(cand.value_ids.size)
        last_id = int(cand.value_ids[-1]) if cand.value_ids.size else 0
        chain_rows = list(Chain.objects.select_for_update(of=("self",))
                          .filter(value__in=Value.objects.filter(attribute=attribute, id__lte=last_id, **(
                              {"cohort": purchase.cohort} if purchase.cohort is not None else {})))
                          .order_by("value_id").values_list("value_id", "epsilons", "outputs", "value__input_sealed"))
        if [r[0] for r in chain_rows] != cand.value_ids.tolist():
            raise PurchaseConflict("A value was added while this purchase read its values; retry.")
        elig = np.flatnonzero(cand.eligible)
        chains = chainsets.ChainSet.from_blobs([bytes(chain_rows[i][1]) for i in elig],
                                               [bytes(chain_rows[i][2]) for i in elig], width)
        inputs = _inputs_for_extension(attribute, cand, elig, chains, e, chain_rows)
        lookup, grown = chainsets.at(chains, e, m, inputs, rng, attribute.draw_divisor)
        if progress:
            progress(total_steps // 2, total_steps)
        ok = ~lookup.missing_input
        inc = elig[ok]  # indices into cand of the released values
        outputs = lookup.outputs[ok]

        held, holding_ids = held_epsilons(buyer.id, attribute, cand.value_ids[inc])
        charge = policy.charge_units(e, held)
        owner_share = policy.owner_units(charge)
        accounts = lock_payment(buyer, cand.owner_ids[inc], charge, owner_share, max_price)

        now = timezone.now()
        _write_chains(attribute, cand.value_ids[elig][lookup.inserted], grown, lookup.inserted, now)
        _raise_chain_loss(cand.value_ids[inc[cand.chain_loss[inc] < e]], e, now)
        if inc.size:
            ledger.append(_release_rows(cand, inc, e, purchase.id))
        _write_holdings(buyer, cand.value_ids[inc], held, holding_ids, e)
        _move_money(purchase, accounts, cand.owner_ids[inc], charge, owner_share)
        _write_chunks(purchase, cand.value_ids[inc], outputs)

        if progress:
            progress(total_steps, total_steps)
        purchase.candidates = int(cand.value_ids.size)
        purchase.included = int(inc.size)
        purchase.excluded_ceiling, purchase.excluded_budget = cand.excluded_over()
        purchase.excluded_paused = int((cand.paused & ~cand.withdrawn).sum())
        purchase.excluded_withdrawn = int(cand.withdrawn.sum())
        purchase.excluded_no_raw = int(lookup.missing_input.sum())
        purchase.new_points = int(lookup.inserted.sum())
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


def _inputs_for_extension(attribute, cand, elig, chains, e, chain_rows) -> np.ndarray | None:
    """True inputs (opened in one call) for the rows whose head is below e; -1 where the raw value is gone."""
    need = np.flatnonzero(chains.head() < e)
    if need.size == 0:
        return None
    inputs = np.full((elig.size, attribute.width), -1, dtype=np.int64)
    sealed = [chain_rows[elig[i]][3] for i in need]
    have = np.array([s is not None for s in sealed], dtype=bool)
    rows = need[have]
    if rows.size:
        payload = sealing.open_inputs([bytes(s) for s in sealed if s is not None], cand.owner_ids[elig][rows],
                                      [attribute.id] * rows.size, domain.payload_bytes(attribute))
        inputs[rows] = domain.from_payload(attribute, payload)
    return inputs


@dataclass
class Accounts:
    """The money accounts a purchase moves, locked: balances in integer ten-thousandths."""

    buyer: tuple[int, int]  # (account id, balance units)
    platform: tuple[int, int]
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
    """Ensure and lock the platform's, the buyer's and the paid owners' accounts.

    Locks are taken category by category in one fixed order (platform, buyer credit, owners' earnings by
    id); the categories are disjoint, so this is one global order and purchases cannot deadlock.  Set-based:
    one INSERT ... ON CONFLICT for missing accounts and one locking SELECT per category, with the owners
    passed as one array (no per-owner rows in Python, no OR that would defeat the planner).
    """
    owners = np.unique(owner_ids)
    MoneyAccount.objects.bulk_create([MoneyAccount(user=None, kind=MoneyAccount.Kind.PLATFORM),
                                      MoneyAccount(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)],
                                     ignore_conflicts=True)
    units = micro_units("balance")
    platform = (MoneyAccount.objects.select_for_update().filter(kind=MoneyAccount.Kind.PLATFORM, user__isnull=True)
                .values_list("id", units).get())
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
    return Accounts(buyer=tuple(mine), platform=tuple(platform), owner_user=got[:, 0], owner_account=got[:, 1],
                    owner_balance=got[:, 2])


def micro_units(field: str):
    """A money column in integer ten-thousandths, computed in SQL."""
    return Cast(Round(F(field) * UNITS), BigIntegerField())


def _write_chains(attribute, value_ids, grown: chainsets.ChainSet, inserted: np.ndarray, now) -> None:
    rows = np.flatnonzero(inserted)
    if rows.size == 0:
        return
    if pgcopy.enabled():
        pgcopy.write_chains(value_ids, grown, rows, now)
        return
    eps_blobs, out_blobs = grown.blobs()
    heads, head_out = grown.head(), grown.head_output().astype("<i2")
    lengths = grown.lengths
    storage.update_rows(
        Chain._meta.db_table, "value_id", ["epsilons", "outputs", "length", "head", "head_output", "updated_at"],
        ((int(v), eps_blobs[i], out_blobs[i], int(lengths[i]), from_micro(int(heads[i])), head_out[i].tobytes(), now)
         for v, i in zip(value_ids.tolist(), rows.tolist())),
        types={"value_id": "bigint", "epsilons": "bytea", "outputs": "bytea", "length": "integer",
               "head": "numeric(12,6)", "head_output": "bytea", "updated_at": "timestamptz"})


def _raise_chain_loss(value_ids: np.ndarray, e: int, now) -> None:
    """``chain_loss = e`` for the released values whose chain loss was below e (rule 3): one statement."""
    storage.set_where_in(BudgetAccount._meta.db_table, "value_id", value_ids,
                         {"chain_loss": from_micro(e), "updated_at": now}, alias="b")


def _release_rows(cand: Candidates, inc: np.ndarray, e: int, purchase_id: int) -> ledger.Rows:
    rows = ledger.Rows.empty(inc.size)
    rec = rows.records
    rec["value"] = cand.value_ids[inc]
    rec["kind"] = ledger.KINDS.index(LedgerEntry.Kind.CHAIN_RELEASE)
    rec["epsilon"] = e
    rec["reference"] = purchase_id
    rec["chain_before"] = cand.chain_loss[inc]
    rec["chain_after"] = np.maximum(cand.chain_loss[inc], e)
    rec["oneshot_before"] = rec["oneshot_after"] = cand.oneshot_loss[inc]
    rec["ceiling"] = cand.ceiling[inc]
    return rows


def _write_holdings(buyer, value_ids: np.ndarray, held: np.ndarray, holding_ids: np.ndarray, e: int) -> None:
    """Raise held epsilons below e to e, and record first holdings (the basis of later upgrade credit)."""
    up = holding_ids[(held > 0) & (held < e)]
    new = value_ids[held == 0]
    table = Holding._meta.db_table
    storage.set_where_in(table, "id", up, {"epsilon": from_micro(e)}, alias="h")
    storage.write_columns(table, {  # binary COPY for the new rows on PostgreSQL
        "buyer_id": pgbinary.Column.int8(np.full(new.size, buyer.id)),
        "value_id": pgbinary.Column.int8(new),
        "epsilon": pgbinary.Column.numeric(np.full(new.size, e), 6)}, new.size)


def _move_money(purchase, accounts: Accounts, owner_ids, charge, owner_share) -> None:
    """Debit the buyer, credit the platform's fee and each owner's share: set-based, in integer units."""
    total = int(charge.sum())
    if total == 0:
        return
    fee = total - int(owner_share.sum())
    paid = owner_share > 0
    owners, per_owner = np.unique(owner_ids[paid], return_inverse=True)
    amounts = np.bincount(per_owner, weights=owner_share[paid], minlength=owners.size).astype(np.int64)
    pos = np.searchsorted(accounts.owner_user, owners)
    ids = np.concatenate([[accounts.buyer[0], accounts.platform[0]], accounts.owner_account[pos]])
    moves = np.concatenate([[-total, fee], amounts])
    after = np.concatenate([[accounts.buyer[1], accounts.platform[1]], accounts.owner_balance[pos]]) + moves
    keep = moves != 0
    ids, moves, after = ids[keep], moves[keep], after[keep]
    slot = np.flatnonzero(keep)  # 0 buyer, 1 platform, 2.. owners
    now = timezone.now()
    _write_money(purchase, ids, moves, after, slot, now)


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
    PurchaseChunk.objects.filter(purchase=purchase).delete()
    PurchaseChunk.objects.bulk_create([
        PurchaseChunk(purchase=purchase, seq=k, count=min(CHUNK, value_ids.size - s),
                      value_ids=value_ids[s:s + CHUNK].astype("<i8").tobytes(),
                      outputs=outputs[s:s + CHUNK].astype("<i2").tobytes())
        for k, s in enumerate(range(0, value_ids.size, CHUNK))])
