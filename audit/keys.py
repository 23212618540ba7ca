"""The value keys (docs/security.md#rotating-the-value-key): every sealed row is under a key of ``LDP_VALUE_KEYS``
and opens with it.

Each sealed row records the id of the key that sealed it (``value_key_id``).  Checked:

* every sealed row -- a value's raw value and input (one key for both), a chain point, a purchase's released chunk
  -- names a key of the ring; a row under a key no longer in it (a retired key) cannot be opened: the check names
  the tables, the key ids and the first rows;
* every value's raw value and input opens with its key, bound to its owner and attribute (read a batch at a time,
  the inputs of a batch opened with one call per key); every purchase chunk opens with its key, bound to its
  purchase, sequence number and values.  The chain points are opened by ``audit.chains``, each with its row's key.

Rows under an older key of the ring (a rotation not finished) open and pass; :func:`check_keys` returns their count
for the report's statistics.
"""
from __future__ import annotations

import numpy as np
from django.db.models import Count

from market.models import Attribute, ChainPoint, PurchaseChunk, Value
from market.values import inputs, sealing

from .report import Recorder

S = "Keys"
#: Rows read and opened at a time (memory stays flat in the number of rows).
ROWS_PER_READ = 10_000


def _tables():
    return {"values": Value.objects.filter(input_sealed__isnull=False), "chain points": ChainPoint.objects.all(),
            "purchase chunks": PurchaseChunk.objects.all()}


def check_keys(rec: Recorder) -> int:
    """The checks of the module docstring; returns the sealed rows under an older key of the ring."""
    ring = sealing.ring_ids()
    newest = ring[0]
    retired: list[str] = []
    older = total = 0
    for table, rows in _tables().items():
        for key_id, n in rows.order_by().values_list("value_key_id").annotate(n=Count("id")):
            total += n
            if key_id not in ring:
                first = list(rows.filter(value_key_id=key_id).order_by("id").values_list("id", flat=True)[:5])
                retired.append(f"{table}: {n} row(s) under key {key_id}, not in LDP_VALUE_KEYS (first ids: "
                               f"{', '.join(map(str, first))})")
            elif key_id != newest:
                older += n
    rec.fail(S, "every sealed row is under a key of LDP_VALUE_KEYS (none under a retired key)", total, retired)
    _check_values_open(rec, set(ring))
    _check_chunks_open(rec, set(ring))
    return older


def _check_values_open(rec: Recorder, ring: set[int]) -> None:
    broken: list[str] = []
    checked = 0
    payload_bytes: dict[int, int] = {}
    after = 0
    base = Value.objects.filter(input_sealed__isnull=False, value_key_id__in=ring)
    while True:
        rows = list(base.filter(id__gt=after).order_by("id").values_list(
            "id", "owner_id", "attribute_id", "raw_sealed", "input_sealed", "value_key_id")[:ROWS_PER_READ])
        if not rows:
            break
        after = rows[-1][0]
        checked += len(rows)
        for vid, owner, attribute, raw, _, key_id in rows:
            try:
                sealing.open_raw(raw, owner_id=owner, attribute_id=attribute, key_id=key_id)
            except sealing.SealBroken as exc:
                broken.append(f"value {vid}: {exc}")
        attributes = np.array([r[2] for r in rows], dtype=np.int64)
        for aid in np.unique(attributes).tolist():
            if aid not in payload_bytes:
                payload_bytes[aid] = inputs.payload_bytes(Attribute.objects.get(id=aid))
            part = [rows[i] for i in np.flatnonzero(attributes == aid).tolist()]
            try:
                sealing.open_inputs([bytes(r[4]) for r in part], [r[1] for r in part], [aid] * len(part),
                                    payload_bytes[aid], [r[5] for r in part])
            except sealing.SealBroken:
                for r in part:  # one by one only to name the ones that do not open
                    try:
                        sealing.open_inputs([bytes(r[4])], [r[1]], [aid], payload_bytes[aid], r[5])
                    except sealing.SealBroken as exc:
                        broken.append(f"value {r[0]}'s input: {exc}")
    rec.fail(S, "every raw value and input opens with its key (bound to its owner and attribute)", checked, broken)


def _check_chunks_open(rec: Recorder, ring: set[int]) -> None:
    broken: list[str] = []
    checked = 0
    after = 0
    while True:
        rows = list(PurchaseChunk.objects.filter(id__gt=after, value_key_id__in=ring).order_by("id").values_list(
            "id", "purchase_id", "seq", "value_ids", "outputs", "value_key_id")[:ROWS_PER_READ // 10])
        if not rows:
            break
        after = rows[-1][0]
        checked += len(rows)
        for cid, pid, seq, ids, sealed, key_id in rows:
            try:
                sealing.open_released(sealed, purchase_id=pid, seq=seq, value_ids=bytes(ids), key_id=key_id)
            except sealing.SealBroken as exc:
                broken.append(f"purchase chunk {cid}: {exc}")
    rec.fail(S, "every purchase's released chunk opens with its key (bound to its purchase, chunk and values)",
             checked, broken)
