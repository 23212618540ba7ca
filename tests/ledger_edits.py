"""Editing the stored ledger as an attacker with database access would, for the tampering tests.

The per-value rows tests read (``LedgerEntry``) are a view over the budget events (``LedgerEvent``, one row each)
and the compact releases (``LedgerRelease``, arrays); these helpers change, delete or insert one entry where it
is stored.  On PostgreSQL the ledger tables are append-only: call them inside ``tests.audit.conftest.tampering``.

Editing one value of a compact row first splits the row so that value has a row of its own (``_isolate``): the
view shows exactly the same entries, in the same order, so the split itself changes nothing an audit can see;
the edit then touches that one entry and nothing else, whatever field it changes (epsilon, time, kind and
guarantee are kept once per row), and the row still satisfies the database's CHECKs as far as the edit does.
Values given are final values (not ``F()`` expressions): read the entry first, compute, then edit.
"""
from __future__ import annotations

from decimal import Decimal

import numpy as np

from accounts.ledger.hashchain import ID_SHIFT
from accounts.models import LedgerBlock, LedgerEntry, LedgerEvent, LedgerRelease
from market.models import Value

#: ``LedgerEntry`` field -> the ``LedgerRelease`` array holding it (micro-epsilons, but value ids).
ARRAY_OF = {"value_id": "value_ids", "chain_loss_before": "chain_before", "chain_loss_after": "chain_after",
            "oneshot_loss_before": "oneshot_before", "oneshot_loss_after": "oneshot_after", "ceiling": "ceiling",
            "earning": "earnings"}
#: ``LedgerEntry`` fields a compact row keeps once for all its values.
ROW_FIELDS = {"epsilon", "created_at", "kind", "guarantee", "purchase_id", "block_id"}
#: The per-value arrays of a compact row.
ARRAYS = ["value_ids", "owner_ids", "chain_before", "chain_after", "oneshot_before", "oneshot_after", "ceiling",
          "earnings"]
#: The per-row columns of a compact row copied as they are when a row is split.
COLUMNS = ["block_id", "shard", "purchase_id", "chain_block_id", "kind", "guarantee", "epsilon", "created_at"]


def _where(entry) -> tuple[LedgerEvent | None, LedgerRelease | None, int]:
    """Where an entry (a ``LedgerEntry`` or its id) is stored: its event, or its compact row and index there."""
    entry_id = entry if isinstance(entry, int) else entry.id
    block, position = divmod(int(entry_id), ID_SHIFT)
    event = LedgerEvent.objects.filter(block_id=block, position=position).first()
    if event is not None:
        return event, None, 0
    row = LedgerRelease.objects.filter(block_id=block, position__lte=position).order_by("-position").first()
    assert row is not None and position < row.position + row.count, f"no ledger entry {entry_id}"
    return None, row, position - row.position


def _micro(v) -> int:
    return int(Decimal(str(v)).scaleb(6))


def _piece(row: LedgerRelease, start: int, stop: int) -> LedgerRelease:
    """A new compact row holding the values ``start:stop`` of ``row``, at their positions."""
    fields = {name: getattr(row, name) for name in COLUMNS}
    for name in ARRAYS:
        arr = getattr(row, name)
        fields[name] = None if arr is None else np.asarray(arr, dtype=np.int64)[start:stop]
    ids = fields["value_ids"]
    return LedgerRelease.objects.create(position=row.position + start, count=stop - start,
                                        first_value=int(ids[0]), last_value=int(ids[-1]), **fields)


def _isolate(row: LedgerRelease, k: int) -> LedgerRelease:
    """Split ``row`` so its ``k``-th value has a compact row of its own (the view is unchanged); return that row."""
    if row.count == 1:
        return row
    before = _view(row.block_id)
    LedgerRelease.objects.filter(id=row.id).delete()
    if k > 0:
        _piece(row, 0, k)
    alone = _piece(row, k, k + 1)
    if k + 1 < row.count:
        _piece(row, k + 1, row.count)
    assert _view(row.block_id) == before, "splitting a compact row changed the ledger entries"
    return alone


def _view(block_id: int) -> list[tuple]:
    """A block's entries as the view shows them (but the bounds of the compact row holding each)."""
    fields = [f.attname for f in LedgerEntry._meta.concrete_fields if f.name not in ("first_value", "last_value")]
    return list(LedgerEntry.objects.filter(block_id=block_id).order_by("id").values_list(*fields))


def edit_entry(entry, **changes) -> None:
    """Change fields of one entry (final values, named as the ``LedgerEntry`` fields); only that entry changes.
    Changing a release's value also gives it the new value's owner (what an attacker would keep consistent)."""
    event, row, k = _where(entry)
    if event is not None:
        LedgerEvent.objects.filter(id=event.id).update(**changes)
        return
    row = _isolate(row, k)
    update = {}
    for name, v in changes.items():
        if name in ROW_FIELDS:
            update[name] = v
        elif name == "value_id":
            update.update(value_ids=[int(v)], first_value=int(v), last_value=int(v),
                          owner_ids=[Value.objects.get(id=v).owner_id])
        elif name == "earning":
            update["earnings"] = None if v is None else [int(Decimal(str(v)).scaleb(4))]
        elif name in ARRAY_OF:
            update[ARRAY_OF[name]] = [_micro(v)]
        else:
            raise ValueError(f"a compact release row has no per-value {name}")
    LedgerRelease.objects.filter(id=row.id).update(**update)


def delete_entry(entry) -> None:
    """Remove one entry (a compact row loses one value, the later ones move up a place; an empty row is
    deleted)."""
    event, row, k = _where(entry)
    if event is not None:
        LedgerEvent.objects.filter(id=event.id).delete()
        return
    if row.count == 1:
        LedgerRelease.objects.filter(id=row.id).delete()
        return
    update = {n: np.delete(np.asarray(getattr(row, n)), k) for n in ARRAYS if getattr(row, n) is not None}
    update["count"] = row.count - 1
    update["first_value"], update["last_value"] = int(update["value_ids"][0]), int(update["value_ids"][-1])
    LedgerRelease.objects.filter(id=row.id).update(**update)


def delete_block_entries(block_id: int) -> None:
    """Remove every entry of a block (the block itself stays: delete it separately)."""
    LedgerEvent.objects.filter(block_id=block_id).delete()
    LedgerRelease.objects.filter(block_id=block_id).delete()


def insert_entry(*, block_id: int, **fields) -> None:
    """A forged entry appended to a block (stored as a one-row event; the view shows it like any entry)."""
    taken = [e.id % ID_SHIFT for e in LedgerEntry.objects.filter(block_id=block_id)]
    shard = LedgerBlock.objects.values_list("shard", flat=True).get(pk=block_id)
    LedgerEvent.objects.create(block_id=block_id, shard=shard, position=max(taken, default=-1) + 1, **fields)


def edit_block_entries(block_id: int, **changes) -> None:
    """Change a field of every entry of a block (fields a compact row keeps once: time, epsilon, kind, ...)."""
    bad = set(changes) - ROW_FIELDS
    if bad:
        raise ValueError(f"per-value fields {sorted(bad)}: use edit_entry on each entry")
    LedgerEvent.objects.filter(block_id=block_id).update(**changes)
    LedgerRelease.objects.filter(block_id=block_id).update(**changes)
