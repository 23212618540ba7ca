"""The tables the budget audit reads, each once, as exact integer numpy columns (docs/budget-rules.md#the-audit).

One query per table (``audit.sql.fetch_ints``): micro-epsilons, money in ten-thousandths, timestamps in
microseconds, coded text (``audit.codes``).  :func:`lookup` finds rows of one table by the ids another names.
"""
from __future__ import annotations

import numpy as np

from accounts.ledger import hashchain as ledger
from accounts.models import (
    BudgetAccount,
    LedgerBlock,
    LedgerCheckpoint,
    LedgerCheckpointLeaf,
    LedgerEntry,
    LedgerHead,
    MoneyAccount,
    MoneyEntry,
    PayoutRequest,
    Settlement,
    TopUp,
)
from market.models import Purchase, PurchaseChunk, Value

from .codes import ACCOUNT_KINDS, GUARANTEES, KINDS, MECHANISMS, MONEY_KINDS, PAYOUT_STATUSES, SHAPES, STATUSES
from .sql import code, fetch_ints, fetch_rows, flag, integer, micro, release_values, timestamp_us, units


def _cols(arr: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    return {n: np.ascontiguousarray(arr[:, j]) for j, n in enumerate(names)}


ENTRY_COLUMNS = ["id", "block", "value", "kind", "epsilon", "purchase", "chain_before", "chain_after",
                 "oneshot_before", "oneshot_after", "ceiling", "sched_start", "sched_cap", "sched_start_at",
                 "sched_end_at", "sched_shape", "sched_steps", "created_at", "guarantee"]


def read_entries() -> dict[str, np.ndarray]:
    """The ledger entries as integer columns, in ledger order (block id, then entry id)."""
    select = ["id", "block_id", "value_id", code("kind", KINDS), micro("epsilon"),
              integer("COALESCE(purchase_id, -1)"), micro("chain_loss_before"), micro("chain_loss_after"),
              micro("oneshot_loss_before"), micro("oneshot_loss_after"), micro("ceiling"), micro("schedule_start"),
              micro("schedule_cap"), timestamp_us("schedule_start_at"), timestamp_us("schedule_end_at"),
              code("schedule_shape", SHAPES), integer("COALESCE(schedule_steps, -1)"), timestamp_us("created_at"),
              code("guarantee", GUARANTEES)]
    cols = _cols(fetch_ints(select, LedgerEntry._meta.db_table, order="block_id, id"), ENTRY_COLUMNS)
    order = np.lexsort((cols["id"], cols["block"]))  # already sorted by the query; cheap insurance
    return {k: v[order] for k, v in cols.items()}


def entry_records(e: dict[str, np.ndarray], sl=slice(None)) -> np.ndarray:
    """The canonical ``ledger.ENTRY`` records of (a slice of) the entries, as ``ledger.stored_records`` builds them."""
    names = ["value", "kind", "epsilon", "purchase", "chain_before", "chain_after", "oneshot_before",
             "oneshot_after", "ceiling", "sched_start", "sched_cap", "sched_start_at", "sched_end_at",
             "sched_shape", "sched_steps", "guarantee"]
    n = e["id"][sl].shape[0]
    rec = np.empty(n, dtype=ledger.ENTRY)
    for field_name, col in zip(ledger.ENTRY.names, names):
        rec[field_name] = e[col][sl]
    return rec


def read_blocks() -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """The blocks in id order: integer columns (id, shard, entry count, created_at), and their prev_hash and hash."""
    table = LedgerBlock._meta.db_table
    rows = fetch_rows(f"SELECT id, prev_hash, hash, entry_count, {timestamp_us('created_at')}, shard FROM {table} "
                      f"ORDER BY id")
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    counts = np.array([r[3] for r in rows], dtype=np.int64)
    created = np.array([r[4] for r in rows], dtype=np.int64)
    shards = np.array([r[5] for r in rows], dtype=np.int64)
    return ({"id": ids, "count": counts, "created_at": created, "shard": shards}, [r[1] for r in rows],
            [r[2] for r in rows])


def read_heads() -> dict[int, tuple[int | None, int]]:
    """Each shard's head: ``{shard: (last block id or None, block count)}``."""
    return {shard: (last, n) for shard, last, n in LedgerHead.objects.values_list("shard", "last_block_id", "blocks")}


def read_checkpoints() -> tuple[list[tuple], list[tuple]]:
    """The checkpoints in tree-size order ``(id, created_at, tree_size, root_hash, key_id, signature, note)`` and the
    checkpoint log's leaves in index order ``(index, checkpoint id, shard, blocks, head_hash, block_id,
    entry_count, block created_at in microseconds, entries_root, chunk_roots, version)`` (``block_id`` to
    ``chunk_roots`` ``None``, ``None``, -1, ``""``, ``None`` for a shard-head leaf; ``version``: the leaf format,
    docs/receipts.md#entry-data)."""
    checkpoints = list(LedgerCheckpoint.objects.order_by("tree_size", "id").values_list(
        "id", "created_at", "tree_size", "root_hash", "key_id", "signature", "note"))
    leaves = [(*row[:7], ledger.micros(row[7]), row[8], None if row[9] is None else bytes(row[9]), row[10])
              for row in LedgerCheckpointLeaf.objects.order_by("index").values_list(
                  "index", "checkpoint_id", "shard", "blocks", "head_hash", "block_id", "entry_count",
                  "block_created_at", "entries_root", "chunk_roots", "version")]
    return checkpoints, leaves


def read_budgets() -> dict[str, np.ndarray]:
    select = ["value_id", micro("ceiling"), micro("chain_loss"), micro("oneshot_loss"), flag("paused"),
              micro("schedule_start"), micro("schedule_cap"), timestamp_us("schedule_start_at"),
              timestamp_us("schedule_end_at"), code("schedule_shape", SHAPES),
              integer("COALESCE(schedule_steps, -1)")]
    names = ["value", "ceiling", "chain", "oneshot", "paused", "sched_start", "sched_cap", "sched_start_at",
             "sched_end_at", "sched_shape", "sched_steps"]
    return _cols(fetch_ints(select, BudgetAccount._meta.db_table, order="value_id"), names)


def read_values() -> dict[str, np.ndarray]:
    select = ["id", "owner_id", "attribute_id", flag("raw_deleted_at IS NOT NULL"), flag("custody = 'owner'")]
    return _cols(fetch_ints(select, Value._meta.db_table), ["id", "owner", "attribute", "raw_deleted", "owner_held"])


def read_slots() -> dict[str, np.ndarray]:
    """Every value's attribute and its chain's block and slot (-1 for none), in value-id order."""
    select = ["id", "attribute_id", integer("COALESCE(block_id, -1)"), integer("COALESCE(slot, -1)")]
    return _cols(fetch_ints(select, Value._meta.db_table), ["id", "attribute", "block", "slot"])


def read_purchases() -> dict[str, np.ndarray]:
    select = ["id", "buyer_id", "attribute_id", micro("epsilon"), code("status", STATUSES), "included",
              units("price"), code("mechanism", MECHANISMS), micro("charged_epsilon"),
              code("guarantee", GUARANTEES)]
    return _cols(fetch_ints(select, Purchase._meta.db_table),
                 ["id", "buyer", "attribute", "epsilon", "status", "included", "price", "mechanism", "charged",
                  "guarantee"])


def read_chunks() -> dict[str, np.ndarray]:
    """The purchases' output chunks: (purchase id, rows) per chunk."""
    return _cols(fetch_ints(["purchase_id", "count"], PurchaseChunk._meta.db_table), ["purchase", "count"])


def read_money() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    accounts = _cols(fetch_ints(["id", code("kind", ACCOUNT_KINDS), integer("COALESCE(user_id, -1)"),
                                 units("balance"), integer("COALESCE(shard, -1)")], MoneyAccount._meta.db_table),
                     ["id", "kind", "user", "balance", "shard"])
    entries = _cols(fetch_ints(["id", "account_id", integer("COALESCE(purchase_id, -1)"), units("amount"),
                                units("balance_after"), code("kind", MONEY_KINDS),
                                integer("COALESCE(settlement_id, -1)")], MoneyEntry._meta.db_table),
                    ["id", "account", "purchase", "amount", "balance_after", "kind", "settlement"])
    return accounts, entries


def read_settlements() -> dict[str, np.ndarray]:
    """The settlements of owners' earnings (docs/money.md#settlement), in id order."""
    return _cols(fetch_ints(["id", "shard", "after_release", "through_release", "releases", "owners", units("amount")],
                            Settlement._meta.db_table),
                 ["id", "shard", "after", "through", "releases", "owners", "amount"])


def read_release_values() -> dict[str, np.ndarray]:
    """Every value of every compact release row (``LedgerRelease``): its row id, shard, purchase, value, owner and
    recorded earnings (-1: not recorded, a release from before earnings were recorded per value), in row order."""
    return _cols(fetch_ints(["row_id", "shard", "purchase", "value", "owner", "earning"], release_values(),
                            order="row_id, k"),
                 ["row", "shard", "purchase", "value", "owner", "earning"])


def read_topups_payouts() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    topups = _cols(fetch_ints(["id", "entry_id", "buyer_id", units("amount")], TopUp._meta.db_table),
                   ["id", "entry", "buyer", "amount"])
    payouts = _cols(fetch_ints(["id", "hold_id", integer("COALESCE(release_id, -1)"), "owner_id", units("amount"),
                                code("status", PAYOUT_STATUSES)], PayoutRequest._meta.db_table),
                    ["id", "hold", "release", "owner", "amount", "status"])
    return topups, payouts


def lookup(keys: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``query`` in the sorted ``keys`` and whether each was found."""
    if keys.size == 0:
        return np.zeros(query.shape, dtype=np.int64), np.zeros(query.shape, dtype=bool)
    pos = np.clip(np.searchsorted(keys, query), 0, keys.size - 1)
    return pos, keys[pos] == query
