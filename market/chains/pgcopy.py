"""PostgreSQL fast path of the reads of chain extension (docs/architecture.md#chains-in-blocks,
docs/quality-targets.md#performance E2).

``extension_rows`` reads what extension needs of a batch of blocks -- value id, owner id, block, slot, ceiling
as integer micro-epsilons and the sealed input -- as ONE binary record per value, aggregated by the database into
one ``bytea`` (``string_agg`` of ``int8send(...) || ...``) and sent as the single row of a binary ``COPY``, parsed by
``numpy.frombuffer`` with a structured dtype (every field has a fixed width per attribute): no Python object, and
no protocol message, per row.  (A ``COPY`` of one row per value made the client call psycopg's ``read()`` once per
row: about 0.7 us of Python each, 44 ms per batch of 65,536 values, in the read-ahead thread and holding the GIL
while the batch before computes; the database's work was about the same either way, on benchmark E2's data.)  The
binary COPY encoders and parsers are hand-written (``ldpmarket.pgbinary``): measured faster than building rows
through psycopg's adapters (docs/architecture.md#storage).  The rows, their order and the filter are those of the
generic path in ``market.chains.extension.extension_rows``.
"""
from __future__ import annotations

import struct

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
    """``services.extension_rows`` by one binary COPY of one row: the values of ``block_ids`` holding their input,
    in (block, slot) order."""
    sealed_bytes = sealing.blocks_for(inputs.payload_bytes(attribute)) * 16
    record = np.dtype([("value_id", ">i8"), ("owner_id", ">i8"), ("block_id", ">i8"), ("slot", ">i4"),
                       ("ceiling", ">i8"), ("key_id", ">i4"), ("sealed", ("u1", (sealed_bytes,)))])
    only = " AND v.id = ANY(%(ids)s::bigint[])" if value_ids is not None else ""
    value, budget = Value._meta.db_table, BudgetAccount._meta.db_table
    params = {"blocks": "{" + ",".join(str(int(b)) for b in block_ids) + "}", "attribute": attribute.id,
              "ids": "{" + ",".join(str(int(v)) for v in (value_ids or [])) + "}", "sealed_bytes": sealed_bytes}
    # One record per value (the fields of ``record``, big-endian), all of them in one bytea: string_agg skips a NULL
    # record, and a sealed input of another length would shift the ones after it, so the count and the lengths are
    # read beside it and checked.  The budgets are read by a range of their key (the values' id range in these
    # blocks): without it the planner hashes the whole budget table once per batch, quadratic in the number of
    # values.  (``ceiling * 10**6`` is a whole number, the ceiling having 6 decimals: the cast to bigint is exact,
    # and cheaper than ``round`` before it.)
    query = (f"SELECT count(*), bool_and(length(v.input_sealed) = %(sealed_bytes)s), "
             f"string_agg(int8send(v.id) || int8send(v.owner_id) || int8send(v.block_id) || int4send(v.slot) || "
             f"int8send((b.ceiling * {MICRO})::bigint) || int4send(v.value_key_id) || v.input_sealed, ''::bytea) "
             f"FROM {value} v JOIN {budget} b ON b.value_id = v.id "
             f"WHERE v.block_id = ANY(%(blocks)s::bigint[]) AND v.attribute_id = %(attribute)s "
             f"AND v.input_sealed IS NOT NULL{only} AND b.value_id BETWEEN %(lo)s AND %(hi)s")
    with connection.cursor() as wrapper:
        # (OFFSET 0 fences the subquery: otherwise min/max walk the primary key from its end until a row of
        # these blocks turns up, a scan of most of the table for the later batches)
        wrapper.execute(f"SELECT min(id), max(id) FROM (SELECT id FROM {value} "
                        f"WHERE block_id = ANY(%(blocks)s::bigint[]) OFFSET 0) s", params)
        lo, hi = wrapper.fetchone()
        params.update(lo=lo or 0, hi=hi or -1)
        count, same_length, data = _one_row(copy_out(wrapper.cursor, query, params), 3)
    n = int.from_bytes(count, "big", signed=True)
    if n and (same_length != b"\x01" or data is None or len(data) != n * record.itemsize):
        raise CopyFormatError(f"extension rows: {n} values, but a sealed input not of {sealed_bytes} bytes or a "
                              f"NULL field")
    rows = np.frombuffer(data, dtype=record) if n else np.zeros(0, dtype=record)
    rows = rows[np.lexsort((rows["slot"], rows["block_id"]))]  # in (block, slot) order: sorted here, not in SQL
    out = {name: rows[name].astype(np.int64) for name in ("value_id", "owner_id", "block_id", "slot", "ceiling")}
    out["key_id"] = rows["key_id"].astype(np.int64)  # the value key that sealed each input (docs/security.md#keys)
    out["sealed"] = np.ascontiguousarray(rows["sealed"])
    return out


def _one_row(data: bytes, fields: int) -> list[bytes | None]:
    """The fields of the one row of a binary COPY stream (``None`` for a NULL)."""
    mv = memoryview(data)
    if bytes(mv[:len(SIGNATURE)]) != SIGNATURE or bytes(mv[-len(TRAILER):]) != TRAILER:
        raise CopyFormatError("not a binary COPY stream")
    at = len(HEADER) + struct.unpack_from(">i", mv, len(SIGNATURE) + 4)[0]
    if struct.unpack_from(">h", mv, at)[0] != fields:
        raise CopyFormatError("a row has an unexpected number of fields")
    at += 2
    out = []
    for _ in range(fields):
        size = struct.unpack_from(">i", mv, at)[0]
        at += 4
        out.append(None if size < 0 else mv[at:at + size])
        at += max(size, 0)
    if at != len(mv) - len(TRAILER):
        raise CopyFormatError("a binary COPY stream of more than one row")
    return out


def enabled() -> bool:
    """Whether ``services.extension_rows`` takes this path: PostgreSQL through psycopg 3 (its ``copy``).

    Tests patch it to run the generic path on PostgreSQL and compare the two.
    """
    return storage.has_binary_copy()


