"""PostgreSQL fast path of the reads of chain extension (docs/architecture.md#chains-in-blocks,
docs/quality-targets.md#performance E2).

``extension_rows`` reads what extension needs of a batch of blocks -- value id, owner id, block, slot, ceiling
as integer micro-epsilons and the sealed input -- with one ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)``,
parsed by ``numpy.frombuffer`` with a structured dtype (every field has a fixed width per attribute), never a
Python object per row.  The binary COPY encoders and parsers are hand-written (``ldpmarket.pgbinary``): measured
faster than building rows through psycopg's adapters (docs/architecture.md#storage).  The rows, their order
and the filter are those of the generic path in ``market.chains.extension.extension_rows``.
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
from market.models import Attribute, Value
from market.values import inputs, sealing


def extension_rows(attribute: Attribute, block_ids, value_ids=None) -> dict[str, np.ndarray]:
    """``services.extension_rows`` by one binary COPY: the values of ``block_ids`` holding their input, in
    (block, slot) order."""
    sealed_bytes = sealing.blocks_for(inputs.payload_bytes(attribute)) * 16
    layout = [("value_id", ">i8"), ("owner_id", ">i8"), ("block_id", ">i8"), ("slot", ">i8"), ("ceiling", ">i8"),
              ("sealed", ("u1", (sealed_bytes,)))]
    only = " AND v.id = ANY(%(ids)s::bigint[])" if value_ids is not None else ""
    value, budget = Value._meta.db_table, BudgetAccount._meta.db_table
    params = {"blocks": "{" + ",".join(str(int(b)) for b in block_ids) + "}", "attribute": attribute.id,
              "ids": "{" + ",".join(str(int(v)) for v in (value_ids or [])) + "}"}
    # The budgets are read by a range of their key (the values' id range in these blocks): without it the
    # planner hashes the whole budget table once per batch, quadratic in the number of values.
    query = (f"SELECT v.id, v.owner_id, v.block_id, v.slot::bigint, round(b.ceiling * {MICRO})::bigint, "
             f"v.input_sealed FROM {value} v JOIN {budget} b ON b.value_id = v.id "
             f"WHERE v.block_id = ANY(%(blocks)s::bigint[]) AND v.attribute_id = %(attribute)s "
             f"AND v.input_sealed IS NOT NULL{only} AND b.value_id BETWEEN %(lo)s AND %(hi)s")
    with connection.cursor() as wrapper:
        # (OFFSET 0 fences the subquery: otherwise min/max walk the primary key from its end until a row of
        # these blocks turns up, a scan of most of the table for the later batches)
        wrapper.execute(f"SELECT min(id), max(id) FROM (SELECT id FROM {value} "
                        f"WHERE block_id = ANY(%(blocks)s::bigint[]) OFFSET 0) s", params)
        lo, hi = wrapper.fetchone()
        params.update(lo=lo or 0, hi=hi or -1)
        rows = parse_rows(copy_out(wrapper.cursor, query, params), layout)
    rows = rows[np.lexsort((rows["slot"], rows["block_id"]))]  # in (block, slot) order: sorted here, not in SQL
    out = {name: rows[name].astype(np.int64) for name in ("value_id", "owner_id", "block_id", "slot", "ceiling")}
    out["sealed"] = np.ascontiguousarray(rows["sealed"])
    return out


def enabled() -> bool:
    """Whether ``services.extension_rows`` takes this path: PostgreSQL through psycopg 3 (its ``copy``).

    Tests patch it to run the generic path on PostgreSQL and compare the two.
    """
    return storage.has_binary_copy()


