"""PostgreSQL fast path of the reads of chain extension (docs/architecture.md#chains-in-blocks, docs/quality-targets.md#performance E2).

``extension_rows`` reads what extension needs of a batch of blocks -- value id, owner id, block, slot, ceiling
as integer micro-epsilons and the sealed input -- with one ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)``,
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
    HEADER, SIGNATURE, TRAILER, CopyFormatError, binary_rows, bytea_fields, copy_in, copy_out, numeric_fixed,
    parse_rows)

from . import domain, sealing
from .models import Attribute, Value


def extension_rows(attribute: Attribute, block_ids, value_ids=None) -> dict[str, np.ndarray]:
    """``services.extension_rows`` by one binary COPY: the values of ``block_ids`` holding their input, in
    (block, slot) order.

    The server packs each block's rows into one ``bytea`` (``string_agg`` of the fixed-width fields in slot
    order), so the client reads one COPY row per block, not per value: measured about 30% faster than a COPY row
    per value, whose per-row cost in the client (one message each) was most of the read."""
    sealed_bytes = sealing.blocks_for(domain.payload_bytes(attribute)) * 16
    record = np.dtype([("value_id", ">i8"), ("owner_id", ">i8"), ("block_id", ">i8"), ("slot", ">i8"),
                       ("ceiling", ">i8"), ("sealed", "u1", (sealed_bytes,))])
    only = " AND v.id = ANY(%(ids)s::bigint[])" if value_ids is not None else ""
    value, budget = Value._meta.db_table, BudgetAccount._meta.db_table
    params = {"blocks": "{" + ",".join(str(int(b)) for b in block_ids) + "}", "attribute": attribute.id,
              "ids": "{" + ",".join(str(int(v)) for v in (value_ids or [])) + "}", "width": sealed_bytes}
    # The budgets are read by a range of their key (the values' id range in these blocks): without it the
    # planner hashes the whole budget table once per batch, quadratic in the number of values.  A sealed input of
    # another length would misalign the packed rows: such rows are refused (length check below).
    query = (f"SELECT string_agg(int8send(v.id) || int8send(v.owner_id) || int8send(v.block_id) || "
             f"int8send(v.slot::bigint) || int8send(round(b.ceiling * {MICRO})::bigint) || v.input_sealed, "
             f"''::bytea ORDER BY v.slot) FROM {value} v JOIN {budget} b ON b.value_id = v.id "
             f"WHERE v.block_id = ANY(%(blocks)s::bigint[]) AND v.attribute_id = %(attribute)s "
             f"AND v.input_sealed IS NOT NULL{only} AND b.value_id BETWEEN %(lo)s AND %(hi)s "
             f"GROUP BY v.block_id ORDER BY v.block_id")
    with connection.cursor() as wrapper:
        # (OFFSET 0 fences the subquery: otherwise min/max walk the primary key from its end until a row of
        # these blocks turns up, a scan of most of the table for the later batches)
        wrapper.execute(f"SELECT min(id), max(id), count(*) FILTER (WHERE input_sealed IS NOT NULL "
                        f"AND length(input_sealed) <> %(width)s) FROM (SELECT id, input_sealed FROM {value} "
                        f"WHERE block_id = ANY(%(blocks)s::bigint[]) OFFSET 0) s", params)
        lo, hi, misfit = wrapper.fetchone()
        if misfit:
            raise CopyFormatError(f"{misfit} sealed inputs of these blocks are not {sealed_bytes} bytes long")
        params.update(lo=lo or 0, hi=hi or -1)
        packed = bytea_fields(copy_out(wrapper.cursor, query, params))
    rows = np.frombuffer(b"".join(packed), dtype=record)
    rows = rows[np.lexsort((rows["slot"], rows["block_id"]))]  # (block, slot) order: already so; cheap insurance
    out = {name: rows[name].astype(np.int64) for name in ("value_id", "owner_id", "block_id", "slot", "ceiling")}
    out["sealed"] = np.ascontiguousarray(rows["sealed"])
    return out


def enabled() -> bool:
    """Whether ``services.extension_rows`` takes this path: PostgreSQL through psycopg 3 (its ``copy``).

    Tests patch it to run the generic path on PostgreSQL and compare the two.
    """
    return storage.has_binary_copy()


