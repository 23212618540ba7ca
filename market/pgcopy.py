"""PostgreSQL fast path of the reads of chain extension (docs/architecture.md#chains-in-blocks, docs/quality-targets.md#performance E2).

``extension_rows`` reads what extension needs of a batch of blocks -- value id, owner id, block, slot, ceiling
as integer micro-epsilons and the sealed input -- with two ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` (the
values, then their budgets, merged by value id in numpy),
parsed by ``numpy.frombuffer`` with a structured dtype (every field has a fixed width per attribute), never a
Python object per row.  The binary COPY encoders and parsers are hand-written (``ldpmarket.pgbinary``): measured
faster than building rows through psycopg's adapters (docs/architecture.md#storage).  The rows, their order
and the filter are those of the generic path in ``market.services.extension_rows``.
"""
from __future__ import annotations

import numpy as np
from django.db import connection

from accounts.epsilon import MICRO
from accounts.models import BudgetAccount
from ldpmarket import storage
from ldpmarket.pgbinary import (  # noqa: F401  (re-exported: the binary COPY primitives)
    HEADER,
    SIGNATURE,
    TRAILER,
    CopyFormatError,
    binary_rows,
    copy_in,
    copy_out,
    numeric_fixed,
    parse_rows,
)

from . import domain, sealing
from .models import Attribute, Value


def extension_rows(attribute: Attribute, block_ids, value_ids=None) -> dict[str, np.ndarray]:
    """``services.extension_rows`` by two binary COPYs (the values, then their budgets): the values of
    ``block_ids`` holding their input, in (block, slot) order."""
    sealed_bytes = sealing.blocks_for(domain.payload_bytes(attribute)) * 16
    layout_values = [("value_id", ">i8"), ("owner_id", ">i8"), ("block_id", ">i8"), ("slot", ">i8"),
                     ("sealed", ("u1", (sealed_bytes,)))]
    only = " AND v.id = ANY(%(ids)s::bigint[])" if value_ids is not None else ""
    value, budget = Value._meta.db_table, BudgetAccount._meta.db_table
    params = {"blocks": "{" + ",".join(str(int(b)) for b in block_ids) + "}", "attribute": attribute.id,
              "ids": "{" + ",".join(str(int(v)) for v in (value_ids or [])) + "}"}
    # Two reads merged here rather than one join: the values of these blocks, then the budgets of their id range
    # (by the budgets' key), matched by value id with numpy.  Measured faster than the server's join of the same
    # rows (a hash join of 65,536 rows a batch costs more than the two scans together: benchmarks/e2_extension).
    values_query = (f"SELECT v.id, v.owner_id, v.block_id, v.slot::bigint, v.input_sealed FROM {value} v "
                    f"WHERE v.block_id = ANY(%(blocks)s::bigint[]) AND v.attribute_id = %(attribute)s "
                    f"AND v.input_sealed IS NOT NULL{only}")
    budgets_query = f"SELECT b.value_id, round(b.ceiling * {MICRO})::bigint FROM {budget} b WHERE "
    with connection.cursor() as wrapper:
        rows = parse_rows(copy_out(wrapper.cursor, values_query, params), layout_values)
        if rows.size:
            lo, hi = int(rows["value_id"].min()), int(rows["value_id"].max())
            if hi - lo + 1 <= 4 * rows.size:  # the usual case: the blocks' values were contributed together
                where, params["lo"], params["hi"] = "b.value_id BETWEEN %(lo)s AND %(hi)s", lo, hi
            else:  # ids spread among other attributes' values: look the budgets up by key, not by range
                where = "b.value_id = ANY(%(wanted)s::bigint[])"
                params["wanted"] = "{" + ",".join(map(str, rows["value_id"].astype(np.int64).tolist())) + "}"
            budgets = parse_rows(copy_out(wrapper.cursor, budgets_query + where, params),
                                 [("value_id", ">i8"), ("ceiling", ">i8")])
        else:
            budgets = np.zeros(0, dtype=[("value_id", ">i8"), ("ceiling", ">i8")])
    budget_ids = budgets["value_id"].astype(np.int64)
    order = np.argsort(budget_ids, kind="stable")
    at = np.searchsorted(budget_ids, rows["value_id"].astype(np.int64), sorter=order)
    at = np.minimum(at, max(budget_ids.size - 1, 0))
    found = (budget_ids[order[at]] == rows["value_id"]) if budget_ids.size else np.zeros(rows.size, dtype=bool)
    rows = rows[found]  # a value without a budget row is not extended (the join left it out too)
    ceilings = budgets["ceiling"].astype(np.int64)[order[at[found]]]
    by_slot = np.lexsort((rows["slot"], rows["block_id"]))  # in (block, slot) order: sorted here, not in SQL
    rows, ceilings = rows[by_slot], ceilings[by_slot]
    out = {name: rows[name].astype(np.int64) for name in ("value_id", "owner_id", "block_id", "slot")}
    out["ceiling"] = ceilings
    out["sealed"] = np.ascontiguousarray(rows["sealed"])
    return out


def enabled() -> bool:
    """Whether ``services.extension_rows`` takes this path: PostgreSQL through psycopg 3 (its ``copy``).

    Tests patch it to run the generic path on PostgreSQL and compare the two.
    """
    return storage.has_binary_copy()


