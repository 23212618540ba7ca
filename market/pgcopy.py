"""PostgreSQL fast path of chain extension (docs/architecture.md#the-path-of-a-chain-extension, docs/quality-targets.md#performance E2).

A batch (the caller's transaction) moves its data in three statements, with
no Python loop per row:

1. ``COPY (SELECT ... ORDER BY value_id FOR UPDATE OF chain) TO STDOUT (FORMAT BINARY)``
   locks the chains in value-id order as the generic path does (a chain held
   by a purchase is waited for; PostgreSQL re-checks the filter after the
   wait, so nothing is extended twice) and reads only the fixed-width fields
   growth needs (value id, owner id, sealed input, head and ceiling as integer
   micro-epsilons, last outputs) -- never the chain blobs -- which
   ``numpy.frombuffer`` parses with a structured dtype (every field has a
   fixed width per attribute);
2. the appended steps are written with ``COPY ... FROM STDIN (FORMAT BINARY)``
   into a temporary table, the binary rows built as numpy structured arrays
   (rows are grouped by their number of new steps, so each group has fixed
   width; the new head is a fixed-width binary ``numeric``);
3. one ``UPDATE ... FROM`` appends them (``epsilons || new``, ``outputs || new``)
   and sets length, head, last outputs and ``updated_at``.

(plus planner settings around the read, and creating/dropping the temporary table.)

The rows, their order (by value id), the filter and the growth call are those
of the generic path in ``market.services``, so with the same random source both
paths store the same chains.  Each chain is either fully extended or untouched:
everything happens inside the caller's transaction.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from django.db import connection

from accounts.epsilon import MICRO
from accounts.models import BudgetAccount
from ldpmarket import storage
from ldpmarket.pgbinary import (  # noqa: F401  (re-exported: the binary COPY primitives)
    HEADER, SIGNATURE, TRAILER, CopyFormatError, binary_rows, copy_in, copy_out, numeric_fixed, parse_rows)

from . import chains, domain, sealing
from .models import Attribute, Chain, Value

GROWTH_TABLE = "ldp_chain_growth"


# --------------------------------------------------------------------------- chain extension

def _tables() -> dict[str, str]:
    return {"chain": Chain._meta.db_table, "value": Value._meta.db_table,
            "budget": BudgetAccount._meta.db_table}


#: Ids spanning at most this many times their count are "dense": read by pkey range scans and merge joins.
DENSE_SPAN = 4
_MERGE_ONLY = ("enable_nestloop", "enable_hashjoin")


def _read_query(dense: bool) -> str:
    """The rows of ``services._extendable`` among the given ids, locked, by value id.

    Dense ids: the three tables are read by pkey range scans (``BETWEEN``) and
    merge-joined; membership is a bit in a bitmap over ``lo..hi`` (a filter,
    cheap to plan, never an index descent per id).  Sparse ids (a few values
    far apart): membership is the index condition, one lookup per id.
    """
    t = _tables()
    if dense:
        where = ("c.value_id BETWEEN %(lo)s AND %(hi)s "
                 "AND get_bit(%(bitmap)s::bytea, (c.value_id - %(lo)s)::int) = 1 "
                 "AND v.id BETWEEN %(lo)s AND %(hi)s AND b.value_id BETWEEN %(lo)s AND %(hi)s")
    else:
        where = "c.value_id = ANY(%(ids)s::bigint[]) AND c.value_id BETWEEN %(lo)s AND %(hi)s"
    return (
        f"SELECT c.value_id, v.owner_id, v.input_sealed, (c.head * {MICRO})::bigint, c.head_output, "
        f"(b.ceiling * {MICRO})::bigint "
        f"FROM {t['chain']} c JOIN {t['value']} v ON v.id = c.value_id "
        f"JOIN {t['budget']} b ON b.value_id = c.value_id "
        f"WHERE {where} AND v.attribute_id = %(attribute)s "
        f"AND v.input_sealed IS NOT NULL AND b.ceiling > c.head AND c.head < %(stop)s "
        f"ORDER BY c.value_id FOR UPDATE OF c"
    )


def _bitmap(ids: np.ndarray, lo: int, hi: int) -> bytes:
    """Bit ``id - lo`` set per id, in ``get_bit`` order: bit k is bit ``k % 8`` (LSB first) of byte k // 8."""
    bits = np.zeros(hi - lo + 1, dtype=np.uint8)
    bits[ids - lo] = 1
    return np.packbits(bits, bitorder="little").tobytes()


def read_batch(cursor, attribute: Attribute, ids: Sequence[int]) -> np.ndarray:
    """Lock and read the extendable rows among ``ids``: a structured array ordered by value id."""
    width = attribute.width
    sealed_bytes = sealing.blocks_for(domain.payload_bytes(attribute)) * 16
    layout = [("value_id", ">i8"), ("owner_id", ">i8"), ("sealed", ("u1", (sealed_bytes,))), ("head", ">i8"),
              ("head_output", (chains.OUT, (width,))), ("ceiling", ">i8")]
    ids = np.asarray(ids, dtype=np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    params = {"lo": lo, "hi": hi, "attribute": attribute.id, "stop": attribute.grid_stop}
    if hi - lo + 1 > DENSE_SPAN * ids.size:
        params["ids"] = "{" + ",".join(map(str, ids.tolist())) + "}"
        return parse_rows(copy_out(cursor, _read_query(False), params), layout)
    params["bitmap"] = _bitmap(ids, lo, hi)
    # The planner misjudges the filters' selectivity and may pick per-row nested loops: merge joins only, for
    # this statement (restored after; SET LOCAL semantics, so a rollback restores them too).
    names = ", ".join(f"current_setting('{g}'), set_config('{g}', 'off', true)" for g in _MERGE_ONLY)
    cursor.execute(f"SELECT {names}")
    saved = cursor.fetchone()[::2]
    data = copy_out(cursor, _read_query(True), params)
    cursor.execute("SELECT " + ", ".join(f"set_config('{g}', %s, true)" for g in _MERGE_ONLY), saved)
    return parse_rows(data, layout)


def _numeric_micro(micro: np.ndarray) -> np.ndarray:
    """Binary ``numeric(12, 6)`` values of micro-epsilons (0 <= e < 10000), fixed width: (n, 14) uint8."""
    micro = np.asarray(micro, dtype=np.int64)
    if micro.size and (micro.min() < 0 or micro.max() >= 10_000 * MICRO):
        raise ValueError("epsilon out of the range this encoding covers")
    return numeric_fixed(micro, 6, int_digits=1)


def growth_bodies(value_ids: np.ndarray, growth: chains.Growth, rows: np.ndarray, width: int) -> list[bytes]:
    """Binary COPY rows ``(value_id, eps, outs, k, head, head_output)`` of the grown ``rows``.

    Rows with the same number of new steps ``k`` have the same width: one
    structured array per distinct ``k``.
    """
    bodies = []
    counts = growth.count[rows]
    for k in np.unique(counts):
        k = int(k)
        sel = rows[counts == k]
        eps = growth.eps[sel, :k]
        out = growth.out[sel, :k]
        bodies.append(binary_rows([
            value_ids[sel].astype(">i8"),
            eps.astype(chains.EPS),
            out.astype(chains.OUT).reshape(sel.size, k * width),
            np.full(sel.size, k, dtype=">i4"),
            _numeric_micro(eps[:, k - 1]),
            out[:, k - 1].astype(chains.OUT),
        ]))
    return bodies


def write_growth(cursor, value_ids: np.ndarray, growth: chains.Growth, rows: np.ndarray, width: int) -> int:
    """Append the new steps of ``rows`` (indices into the batch) set-based; returns the rows updated."""
    t = _tables()
    # Created and dropped inside the caller's transaction: on any error the rollback removes it too.
    cursor.execute(f"CREATE TEMP TABLE {GROWTH_TABLE} (value_id bigint, eps bytea, outs bytea, k integer, "
                   f"head numeric(12, 6), head_output bytea) ON COMMIT DROP")
    copy_in(cursor, GROWTH_TABLE, growth_bodies(value_ids, growth, rows, width))
    ids = value_ids[rows]
    cursor.execute(
        f"UPDATE {t['chain']} c SET epsilons = c.epsilons || g.eps, outputs = c.outputs || g.outs, "
        f"length = c.length + g.k, head = g.head, head_output = g.head_output, "
        f"updated_at = now() FROM {GROWTH_TABLE} g "
        f"WHERE c.value_id = g.value_id AND c.value_id BETWEEN %s AND %s",
        (int(ids.min()), int(ids.max())))
    updated = cursor.rowcount
    # Dropped now, not at commit: a caller's transaction may span batches.
    cursor.execute(f"DROP TABLE {GROWTH_TABLE}")
    if updated != rows.size:
        raise RuntimeError(f"chain extension updated {updated} rows instead of {rows.size}")
    return updated


CHAINS_TABLE = "ldp_chain_rewrite"


def chain_bodies(value_ids: np.ndarray, chainset, rows: np.ndarray) -> list[bytes]:
    """Binary COPY rows ``(value_id, epsilons, outputs, length, head, head_output)`` of whole chains.

    ``value_ids[i]`` is the value of ``chainset`` row ``rows[i]``.  Chains of one length have one width:
    one structured array per distinct length (gathered with fancy indexing, no loop per chain).
    """
    lengths = chainset.lengths[rows]
    width = chainset.out.shape[1]
    bodies = []
    for length in np.unique(lengths):
        length = int(length)
        sel = np.flatnonzero(lengths == length)
        idx = chainset.offsets[rows[sel]][:, None] + np.arange(length)
        eps = chainset.eps[idx]
        out = chainset.out[idx]
        bodies.append(binary_rows([
            value_ids[sel].astype(">i8"),
            eps.astype(chains.EPS),
            out.astype(chains.OUT).reshape(sel.size, length * width),
            np.full(sel.size, length, dtype=">i4"),
            _numeric_micro(eps[:, -1]),
            out[:, -1].astype(chains.OUT),
        ]))
    return bodies


def write_chains(value_ids: np.ndarray, chainset, rows: np.ndarray, now) -> None:
    """Replace the stored chains of ``chainset`` rows ``rows`` (their values ``value_ids``): binary COPY
    into a temporary table and one ``UPDATE ... FROM`` (the caller holds the chains' locks)."""
    t = _tables()
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        cursor.execute(f"CREATE TEMP TABLE {CHAINS_TABLE} (value_id bigint, epsilons bytea, outputs bytea, "
                       f"length integer, head numeric(12, 6), head_output bytea) ON COMMIT DROP")
        copy_in(cursor, CHAINS_TABLE, chain_bodies(value_ids, chainset, rows))
        cursor.execute(
            f"UPDATE {t['chain']} c SET epsilons = g.epsilons, outputs = g.outputs, length = g.length, "
            f"head = g.head, head_output = g.head_output, updated_at = %s FROM {CHAINS_TABLE} g "
            f"WHERE c.value_id = g.value_id", (now,))
        updated = cursor.rowcount
        cursor.execute(f"DROP TABLE {CHAINS_TABLE}")
    if updated != rows.size:
        raise RuntimeError(f"chain write updated {updated} rows instead of {rows.size}")


def enabled() -> bool:
    """Whether ``services._extend_batch`` takes this path: PostgreSQL through psycopg 3 (its ``copy``).

    Tests patch it to run the generic path on PostgreSQL and compare the two.
    """
    return storage.has_binary_copy()


def extend_batch(attribute: Attribute, grid: chains.Grid, ids: Sequence[int], rng) -> int:
    """``services._extend_batch`` on PostgreSQL: lock, read, grow and append, in the caller's transaction."""
    if len(ids) == 0:
        return 0
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor  # the psycopg cursor: COPY needs it
        rows = read_batch(cursor, attribute, ids)
        n = rows.size
        if n == 0:
            return 0
        value_ids = rows["value_id"].astype(np.int64)
        owner_ids = rows["owner_id"].astype(np.int64)
        head = rows["head"].astype(np.int64)
        target = grid.last_point_upto(rows["ceiling"].astype(np.int64))
        sealed = np.ascontiguousarray(rows["sealed"])
        payload = sealing.open_inputs(list(sealed), owner_ids, np.full(n, attribute.id),
                                      domain.payload_bytes(attribute))
        inputs = domain.from_payload(attribute, payload)
        last = rows["head_output"].astype(np.int64).reshape(n, attribute.width)
        growth = chains.grow(inputs, head, last, target, grid, attribute.domain_size, rng, attribute.draw_divisor)
        grown = np.flatnonzero(growth.count > 0)
        if grown.size == 0:
            return 0
        return write_growth(cursor, value_ids, growth, grown, attribute.width)
