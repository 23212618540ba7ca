"""The checkpoint log's leaves and the entry trees of blocks (docs/receipts.md#where-the-entries-sit-two-trees).

A block leaf (``block_leaf``) commits to a block's place in its shard, its hash and its entries root, the RFC 6962
root over its entries' leaf data (``entry_leaf_data``), computed a window of entries at a time (``block_tree``);
logs from before receipts hold shard-head leaves (``head_leaf``).  ``log_leaf_hashes`` are the leaves the
checkpoints sign (``accounts.ledger.checkpoints``).
"""
from __future__ import annotations

import hashlib
from datetime import datetime

import numpy as np
from django.db import connection, models

from accounts.epsilon import to_micro
from accounts.ledger import merkle
from accounts.ledger.hashchain import (
    ENTRY,
    GUARANTEES,
    KINDS,
    SHAPES,
    V2_MARKER,
    Rows,
    block_hasher,
    canonical_records,
    micros,
)
from accounts.models import LedgerCheckpointLeaf, LedgerEvent, LedgerRelease
from ldpmarket import pgbinary, storage

HEAD_LEAF_MARKER = b"ldpmarket-shard-head-v1\x00"


def head_leaf(shard: int, blocks: int, head_hash: str) -> bytes:
    """A checkpoint leaf's data (docs/budget-rules.md#checkpoints): ``HEAD_LEAF_MARKER || shard || blocks`` (two
    little-endian int64) ``|| head hash`` (its 32 bytes)."""
    return HEAD_LEAF_MARKER + np.array([shard, blocks], dtype="<i8").tobytes() + bytes.fromhex(head_hash)


#: Entry data of a receipt, the leaf of its block's entry tree (docs/receipts.md#entry-data-159-bytes).
ENTRY_LEAF_MARKER = b"ldpmarket-ledger-entry-leaf-v1\x00"


#: A block's leaf in the checkpoint log (docs/receipts.md#block-leaf-data-135-bytes).
BLOCK_LEAF_MARKER = b"ldpmarket-ledger-block-leaf-v1\x00"


#: Entries per stored chunk root of a block's entry tree: a power of two, so each chunk is a subtree of the
#: RFC 6962 tree over the whole block and the tree over the chunk roots has the same root.
TREE_CHUNK = 2048


def entry_leaf_data(record) -> bytes:
    """One entry's data in its block's entry tree: ``ENTRY_LEAF_MARKER || the 16 int64 of its ENTRY record``
    (always with the guarantee field, whatever format the block's hash used)."""
    return ENTRY_LEAF_MARKER + np.asarray(record, dtype=ENTRY).tobytes()


def entry_leaf_hashes(records: np.ndarray) -> list[bytes]:
    """``SHA-256(0x00 || entry data)`` of each record, in order: one hash call per entry over the records' bytes,
    laid out once by numpy."""
    raw = np.ascontiguousarray(records, dtype=ENTRY).tobytes()
    width = ENTRY.itemsize
    prefix = hashlib.sha256(merkle.LEAF_PREFIX + ENTRY_LEAF_MARKER)
    out = []
    for i in range(0, len(raw), width):
        h = prefix.copy()
        h.update(raw[i:i + width])
        out.append(h.digest())
    return out


def chunk_roots(records: np.ndarray) -> list[bytes]:
    """The roots of the entry trees of ``records`` cut into chunks of ``TREE_CHUNK`` (the last one partial)."""
    leaves = entry_leaf_hashes(records)
    return [merkle.root(leaves[i:i + TREE_CHUNK]) for i in range(0, len(leaves), TREE_CHUNK)]


def entry_tree(records: np.ndarray) -> tuple[bytes, list[bytes]]:
    """A block's entries root and the roots of its chunks of ``TREE_CHUNK`` entries (the last one partial):
    ``MTH(entries) = MTH(chunk roots)`` because each aligned chunk is a subtree of the RFC 6962 tree."""
    chunks = chunk_roots(records)
    return merkle.root(chunks), chunks


#: Entries a checkpoint reads and hashes at a time (a multiple of ``TREE_CHUNK``): its memory is bounded by this,
#: not by the size of the block.
TREE_WINDOW = 32 * TREE_CHUNK


def block_tree(block_id: int, shard: int, prev_hash: str, created_at: datetime, entry_count: int,
               window: int = TREE_WINDOW) -> tuple[str, bytes, list[bytes]]:
    """A block's hash recomputed from its stored entries, with its entries root and chunk roots built from the
    same records: ``(hash hex, entries root, chunk roots)``.  The entries are read ``window`` at a time
    (``records_at``), so a block of 10^7 entries costs no more memory than one of ``window``."""
    if window % TREE_CHUNK:
        raise ValueError(f"the window must be a multiple of {TREE_CHUNK} entries")
    v2 = (LedgerRelease.objects.filter(block_id=block_id).exclude(guarantee="").exists()
          or LedgerEvent.objects.filter(block_id=block_id).exclude(guarantee="").exists())
    h = block_hasher(prev_hash, created_at, entry_count, shard)
    if v2:
        h.update(V2_MARKER)
    chunks: list[bytes] = []
    for start in range(0, entry_count, window):
        records = records_at(block_id, start, min(entry_count, start + window))
        h.update(canonical_records(records, v2))
        chunks += chunk_roots(records)
    return h.hexdigest(), merkle.root(chunks), chunks


def block_leaf(shard: int, height: int, block_id: int, entry_count: int, created_at_us: int, block_hash_hex: str,
               entries_root_hex: str) -> bytes:
    """A block's leaf data in the checkpoint log (docs/receipts.md#block-leaf-data-135-bytes)."""
    return (BLOCK_LEAF_MARKER + np.array([shard, height, block_id, entry_count, created_at_us], dtype="<i8").tobytes()
            + bytes.fromhex(block_hash_hex) + bytes.fromhex(entries_root_hex))


def records_at(block_id: int, start: int, stop: int) -> np.ndarray:
    """The canonical records of the entries of block ``block_id`` at positions ``start .. stop - 1``, read from the
    stored rows (compact releases overlapping the range, or budget events): a receipt's chunk, or a whole block
    for its entry tree.  Equal to ``stored_records(block)[start:stop]``."""
    rec = Rows.empty(stop - start).records
    seen = np.zeros(stop - start, dtype=bool)
    runs = (LedgerRelease.objects.filter(block_id=block_id, position__lt=stop)
            .annotate(end=models.F("position") + models.F("count")).filter(end__gt=start).order_by("position")
            .values_list("position", "count", "kind", "guarantee", "epsilon", "purchase_id", "value_ids",
                         "chain_before", "chain_after", "oneshot_before", "oneshot_after", "ceiling"))
    for position, count, kind, guarantee, eps, purchase, *arrays in runs:
        lo, hi = max(start, position), min(stop, position + count)
        at, part = slice(lo - start, hi - start), slice(lo - position, hi - position)
        rec["kind"][at], rec["guarantee"][at] = KINDS.index(kind), GUARANTEES.index(guarantee)
        rec["epsilon"][at], rec["reference"][at] = to_micro(eps), purchase
        for name, array in zip(("value", "chain_before", "chain_after", "oneshot_before", "oneshot_after",
                                "ceiling"), arrays):
            rec[name][at] = array[part]
        seen[at] = True
    if storage.has_binary_copy():
        events = _event_records(block_id, start, stop)
        rec[events["position"] - start] = events["records"]
        seen[events["position"] - start] = True
    else:
        _fill_events(rec, seen, block_id, start, stop)
    if not seen.all():
        raise LookupError(f"block {block_id} holds no entry at position {start + int(np.flatnonzero(~seen)[0])}")
    return rec


def _event_records(block_id: int, start: int, stop: int) -> dict[str, np.ndarray]:
    """PostgreSQL: the budget events of a block's positions ``start .. stop - 1`` as ENTRY records, by one binary
    COPY whose every column is an exact integer (micro-epsilons, microseconds, codes), no Python object per event."""
    def code(col: str, names: list[str]) -> str:  # the name's index, -2 for another (as stored_records codes it)
        return f"CASE {col} " + " ".join(f"WHEN '{n}' THEN {i}" for i, n in enumerate(names)) + " ELSE -2 END"

    micro = lambda col: f"COALESCE(ROUND({col} * 1000000)::bigint, -1)"  # noqa: E731
    usec = lambda col: f"COALESCE((EXTRACT(EPOCH FROM {col}) * 1000000)::bigint, -1)"  # noqa: E731
    columns = ["position::bigint", "value_id", code("kind", KINDS), micro("epsilon"), "COALESCE(purchase_id, -1)",
               micro("chain_loss_before"), micro("chain_loss_after"), micro("oneshot_loss_before"),
               micro("oneshot_loss_after"), micro("ceiling"), micro("schedule_start"), micro("schedule_cap"),
               usec("schedule_start_at"), usec("schedule_end_at"), code("schedule_shape", SHAPES),
               "COALESCE(schedule_steps, -1)::bigint", code("guarantee", GUARANTEES)]
    query = (f"SELECT {', '.join(f'({c})::bigint' for c in columns)} FROM {LedgerEvent._meta.db_table} "
             f"WHERE block_id = %s AND position >= %s AND position < %s")
    with connection.cursor() as cur:
        data = pgbinary.copy_out(cur.cursor, query, [block_id, start, stop])
    got = pgbinary.parse_rows(data, [(f"c{j}", ">i8") for j in range(len(columns))])
    records = np.empty(got.shape[0], dtype=ENTRY)
    for j, name in enumerate(ENTRY.names):
        records[name] = got[f"c{j + 1}"]
    return {"position": got["c0"].astype(np.int64), "records": records}


def _fill_events(rec, seen, block_id: int, start: int, stop: int) -> None:
    """The budget events of a block's positions ``start .. stop - 1`` into ``rec`` (SQLite: one row at a time)."""
    m = lambda d: -1 if d is None else to_micro(d)  # noqa: E731
    events = (LedgerEvent.objects.filter(block_id=block_id, position__gte=start, position__lt=stop)
              .order_by("position").values_list(
                  "position", "value_id", "kind", "epsilon", "purchase_id", "chain_loss_before", "chain_loss_after",
                  "oneshot_loss_before", "oneshot_loss_after", "ceiling", "schedule_start", "schedule_cap",
                  "schedule_start_at", "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee"))
    for p, v, kind, eps, purchase, cb, ca, ob, oa, ceiling, s0, s1, t0, t1, shape, steps, guarantee in events:
        rec[p - start] = (v, KINDS.index(kind), m(eps), -1 if purchase is None else purchase, to_micro(cb),
                          to_micro(ca), to_micro(ob), to_micro(oa), to_micro(ceiling), m(s0), m(s1), micros(t0),
                          micros(t1), SHAPES.index(shape), -1 if steps is None else steps,
                          GUARANTEES.index(guarantee))
        seen[p - start] = True


def leaf_data(leaf) -> bytes:
    """A stored leaf's data: a block leaf, or a shard-head leaf written before receipts existed."""
    if leaf.block_id is None:
        return head_leaf(leaf.shard, leaf.blocks, leaf.head_hash)
    return block_leaf(leaf.shard, leaf.blocks, leaf.block_id, leaf.entry_count, micros(leaf.block_created_at),
                      leaf.head_hash, leaf.entries_root)


def log_leaf_hashes(size: int | None = None) -> list[bytes]:
    """``SHA-256(0x00 || data)`` of the checkpoint log's first ``size`` leaves (all when ``None``), in index
    order."""
    leaves = LedgerCheckpointLeaf.objects.order_by("index").only(
        "index", "shard", "blocks", "head_hash", "block_id", "entry_count", "block_created_at", "entries_root")
    if size is not None:
        leaves = leaves.filter(index__lt=size)
    return [merkle.leaf_hash(leaf_data(leaf)) for leaf in leaves.iterator(chunk_size=10_000)]
