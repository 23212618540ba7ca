"""A block's entries as its entry tree hashes them (docs/receipts.md#the-monitor): what the monitor reads through
the auditors' API to recompute a block's entries root and replay the budget rules.

Each entry is given as its **leaf data** (``accounts.ledger.leaves.entry_leaf_data``): version 1, the marker and the
16 int64 of its record; version 2, the marker, the entry's blinding key ``k_e`` and the same 16 int64.  The version
is the block leaf's (the checkpoint log states it in the block leaf's marker); a block no checkpoint covers yet is
given in the version the next checkpoint will write.  ``SHA-256(0x00 || data)`` is the entry's leaf hash.
"""
from __future__ import annotations

from accounts.ledger.leaves import LEAF_VERSION, entry_keys, entry_leaf_data, position_ids, records_at
from accounts.models import LedgerBlock, LedgerCheckpointLeaf

#: The most entries one page gives.
MAX_PAGE = 10_000


def block_entries(block_id: int, start: int, limit: int) -> dict | None:
    """Entries ``start .. start + limit - 1`` of block ``block_id`` (``None`` if there is no such block): the block's
    shard, entry count, leaf version and log index (``None`` before a checkpoint covers it), and each entry's
    position, id and leaf data; ``next``: the position to ask for next, ``None`` after the last."""
    block = LedgerBlock.objects.filter(pk=block_id).values("id", "shard", "entry_count", "hash").first()
    if block is None:
        return None
    leaf = LedgerCheckpointLeaf.objects.filter(block_id=block_id).values("index", "version").first()
    version = leaf["version"] if leaf else LEAF_VERSION
    count = block["entry_count"]
    start = min(max(start, 0), count)
    stop = min(count, start + max(1, min(limit, MAX_PAGE)))
    records = records_at(block_id, start, stop) if stop > start else []
    ids = position_ids(block_id, start, stop)
    keys = entry_keys(ids) if version == 2 else [None] * len(ids)
    entries = [{"position": start + i, "id": int(ids[i]), "data": entry_leaf_data(records[i], version, keys[i])}
               for i in range(stop - start)]
    return {"block": block_id, "shard": block["shard"], "hash": block["hash"], "entry_count": count,
            "version": version, "log_index": leaf["index"] if leaf else None, "start": start, "entries": entries,
            "next": stop if stop < count else None}
