"""Value-key rotation, online (docs/security.md#rotating-the-value-key): every sealed row sealed again with the
newest key of ``settings.LDP_VALUE_KEYS``, while purchases and extensions run.

The sealed rows are the values' raw values and inputs (one key for both, ``Value.value_key_id``), the chain points
and the purchases' released chunks.  :func:`rotate` walks each table by id, a batch at a time, each batch one
transaction taking the locks the writers of those rows take (``accounts.locks``: a value's own row, ``VALUE``; an
attribute's chains, its chain lock ``CHAIN`` via ``market.chains.store.lock``); a chunk is written once by its purchase
and never again, so only its sealed outputs and key id are updated.  Only rows whose key is not the newest are read,
so a run stopped anywhere is continued by the next one, and rows written meanwhile (sealed with the newest key by
every process that has the new ring) are not touched.  A row under a key that is no longer in the ring cannot be
opened: it is counted and left as it is (:func:`counts` names them; the audit fails on them).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Count

from accounts.locks import Lock
from accounts.locks import take as take_lock
from ldpmarket import storage
from market.chains import store as chainstore
from market.models import Attribute, ChainPoint, PurchaseChunk, Value
from market.values import sealing

#: The sealed tables, as the command and the audit name them.
TABLES = ("values", "chain points", "purchase chunks")
#: Rows per batch (one transaction each).  Chain points are larger (a block's outputs at one epsilon) and hold the
#: attribute's chain lock while they are sealed again: fewer per batch.
BATCH = {"values": 2000, "chain points": 200, "purchase chunks": 200}


def _sealed(table: str):
    """The rows of ``table`` that hold something sealed."""
    if table == "values":
        return Value.objects.filter(input_sealed__isnull=False)  # raw and input together (a CHECK constraint)
    return {"chain points": ChainPoint, "purchase chunks": PurchaseChunk}[table].objects.all()


def counts() -> dict[str, dict[int, int]]:
    """Per table, the sealed rows per key id: ``{table: {key id: rows}}``."""
    out = {}
    for table in TABLES:
        rows = _sealed(table).order_by().values_list("value_key_id").annotate(n=Count("id"))
        out[table] = {int(k): int(n) for k, n in rows}
    return out


@dataclass
class Progress:
    """What a run did: per table, rows sealed again and seconds spent; rows it could not open (``broken``)."""

    rotated: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TABLES, 0.0))
    broken: list[str] = field(default_factory=list)

    def rate(self, table: str) -> float:
        return self.rotated[table] / self.seconds[table] if self.seconds[table] else 0.0


def rotate(*, batch: dict[str, int] | None = None, tables=TABLES,
           progress: Callable[[str, int, int], None] | None = None) -> Progress:
    """Seal again with the newest key every sealed row of ``tables`` under an older key of the ring; resumable.
    ``progress(table, done, total)`` is called after each batch."""
    newest = sealing.newest_key_id()
    older = [k for k in sealing.ring_ids() if k != newest]
    sizes = {**BATCH, **(batch or {})}
    done = Progress()
    for table in tables:
        pending = _sealed(table).filter(value_key_id__in=older)
        total = pending.count()
        started = time.perf_counter()
        after = 0
        while older:
            ids = list(pending.filter(id__gt=after).order_by("id").values_list("id", flat=True)[:sizes[table]])
            if not ids:
                break
            done.rotated[table] += ROTATE[table](ids, newest, older, done.broken)
            after = ids[-1]
            if progress is not None:
                progress(table, done.rotated[table], total)
        done.seconds[table] = time.perf_counter() - started
    return done


def _values(ids: list[int], newest: int, older: list[int], broken: list[str]) -> int:
    """One batch of values: their rows locked (``VALUE``, in id order), raw values and inputs opened and sealed
    again."""
    with transaction.atomic():
        take_lock(Lock.VALUE)
        rows = list(Value.objects.select_for_update().filter(id__in=ids, input_sealed__isnull=False,
                                                             value_key_id__in=older).order_by("id")
                    .values_list("id", "owner_id", "attribute_id", "raw_sealed", "input_sealed", "value_key_id"))
        if not rows:
            return 0
        try:
            raws = [sealing.seal_raw(sealing.open_raw(r[3], owner_id=r[1], attribute_id=r[2], key_id=r[5]),
                                     owner_id=r[1], attribute_id=r[2]) for r in rows]
            inputs = sealing.reseal_inputs([bytes(r[4]) for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                                           [r[5] for r in rows])
        except sealing.SealBroken:
            return _one_by_one(rows, broken)
        storage.update_rows(Value._meta.db_table, "id", ["raw_sealed", "input_sealed", "value_key_id"],
                            [(r[0], raw, inp, newest) for r, raw, inp in zip(rows, raws, inputs)],
                            types={"id": "bigint", "raw_sealed": "bytea", "input_sealed": "bytea",
                                   "value_key_id": "integer"})
    return len(rows)


def _one_by_one(rows: list[tuple], broken: list[str]) -> int:
    """A batch of values one of which does not open: each sealed again in a savepoint of its own, the broken ones
    named and left as they are (the caller's transaction holds their locks)."""
    done = 0
    for r in rows:
        try:
            raw = sealing.seal_raw(sealing.open_raw(r[3], owner_id=r[1], attribute_id=r[2], key_id=r[5]),
                                   owner_id=r[1], attribute_id=r[2])
            inp = sealing.reseal_inputs([bytes(r[4])], [r[1]], [r[2]], [r[5]])[0]
        except sealing.SealBroken as exc:
            broken.append(f"value {r[0]}: {exc}")
            continue
        Value.objects.filter(id=r[0]).update(raw_sealed=raw, input_sealed=inp, value_key_id=sealing.newest_key_id())
        done += 1
    return done


def _points(ids: list[int], newest: int, older: list[int], broken: list[str]) -> int:
    """One batch of chain points, per attribute under its chain lock (``CHAIN``): each row opened with its key and
    sealed again with the newest, bound to the same row (its revision is kept: its outputs did not change)."""
    by_attribute: dict[int, list[int]] = {}
    for pid, aid in ChainPoint.objects.filter(id__in=ids).values_list("id", "attribute_id"):
        by_attribute.setdefault(aid, []).append(pid)
    done = 0
    for aid in sorted(by_attribute):
        width = Attribute.objects.get(id=aid).width
        with transaction.atomic():
            chainstore.lock(aid)
            rows = list(ChainPoint.objects.filter(id__in=by_attribute[aid], value_key_id__in=older).order_by("id")
                        .values_list("id", "block_id", "epsilon", "present", "sealed", "value_key_id"))
            out = []
            for pid, bid, eps, present, sealed, key_id in rows:
                try:
                    points = sealing.open_points(sealed, attribute_id=aid, block_id=bid, epsilon=eps,
                                                 present=bytes(present), width=width, key_id=key_id)
                except sealing.SealBroken as exc:
                    broken.append(f"chain point {pid}: {exc}")
                    continue
                out.append((pid, sealing.seal_points(points, attribute_id=aid, block_id=bid, epsilon=eps,
                                                     present=bytes(present)), newest))
            storage.update_rows(ChainPoint._meta.db_table, "id", ["sealed", "value_key_id"], out,
                                types={"id": "bigint", "sealed": "bytea", "value_key_id": "integer"})
            done += len(out)
    return done


def _chunks(ids: list[int], newest: int, older: list[int], broken: list[str]) -> int:
    """One batch of purchase chunks: their outputs opened with their key and sealed again with the newest."""
    with transaction.atomic():
        rows = list(PurchaseChunk.objects.filter(id__in=ids, value_key_id__in=older).order_by("id")
                    .values_list("id", "purchase_id", "seq", "value_ids", "outputs", "value_key_id"))
        out = []
        for cid, pid, seq, value_ids, sealed, key_id in rows:
            try:
                plain = sealing.open_released(sealed, purchase_id=pid, seq=seq, value_ids=bytes(value_ids),
                                              key_id=key_id)
            except sealing.SealBroken as exc:
                broken.append(f"purchase chunk {cid}: {exc}")
                continue
            out.append((cid, sealing.seal_released(plain, purchase_id=pid, seq=seq, value_ids=bytes(value_ids)),
                        newest))
        storage.update_rows(PurchaseChunk._meta.db_table, "id", ["outputs", "value_key_id"], out,
                            types={"id": "bigint", "outputs": "bytea", "value_key_id": "integer"})
    return len(out)


ROTATE = {"values": _values, "chain points": _points, "purchase chunks": _chunks}


def remaining(current: dict[str, dict[int, int]] | None = None) -> dict[str, dict[str, int]]:
    """Per table, the sealed rows under the newest key, under an older key of the ring and under a key no longer in
    it (retired: they do not open)."""
    current = counts() if current is None else current
    newest, ring = sealing.newest_key_id(), set(sealing.ring_ids())
    return {table: {"newest": sum(n for k, n in per.items() if k == newest),
                    "older": sum(n for k, n in per.items() if k != newest and k in ring),
                    "retired": sum(n for k, n in per.items() if k not in ring)}
            for table, per in current.items()}


def key_names() -> dict[int, str]:
    """The ring's key ids, named by their place: ``LDP_VALUE_KEYS[0]`` (newest), ...."""
    return {k: f"LDP_VALUE_KEYS[{i}]" for i, k in enumerate(sealing.ring_ids())}
