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
    HEADER, SIGNATURE, TRAILER, CopyFormatError, binary_rows, copy_in, copy_out, numeric_fixed, parse_rows)

from . import domain, sealing
from .models import Attribute, Value


def extension_rows(attribute: Attribute, block_ids, value_ids=None) -> dict[str, np.ndarray]:
    """``services.extension_rows`` by one binary COPY: the values of ``block_ids`` holding their input, in
    (block, slot) order."""
    sealed_bytes = sealing.blocks_for(domain.payload_bytes(attribute)) * 16
    layout = [("value_id", ">i8"), ("owner_id", ">i8"), ("block_id", ">i8"), ("slot", ">i8"), ("ceiling", ">i8"),
              ("sealed", ("u1", (sealed_bytes,)))]
    only = " AND v.id = ANY(%(ids)s::bigint[])" if value_ids is not None else ""
    query = (f"SELECT v.id, v.owner_id, v.block_id, v.slot::bigint, round(b.ceiling * {MICRO})::bigint, "
             f"v.input_sealed FROM {Value._meta.db_table} v JOIN {BudgetAccount._meta.db_table} b "
             f"ON b.value_id = v.id WHERE v.block_id = ANY(%(blocks)s::bigint[]) AND v.attribute_id = %(attribute)s "
             f"AND v.input_sealed IS NOT NULL{only} ORDER BY v.block_id, v.slot")
    params = {"blocks": "{" + ",".join(str(int(b)) for b in block_ids) + "}", "attribute": attribute.id,
              "ids": "{" + ",".join(str(int(v)) for v in (value_ids or [])) + "}"}
    with connection.cursor() as wrapper:
        rows = parse_rows(copy_out(wrapper.cursor, query, params), layout)
    out = {name: rows[name].astype(np.int64) for name in ("value_id", "owner_id", "block_id", "slot", "ceiling")}
    out["sealed"] = np.ascontiguousarray(rows["sealed"])
    return out


def enabled() -> bool:
    """Whether ``services.extension_rows`` takes this path: PostgreSQL through psycopg 3 (its ``copy``).

    Tests patch it to run the generic path on PostgreSQL and compare the two.
    """
    return storage.has_binary_copy()


