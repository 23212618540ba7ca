"""Writing and re-hashing the privacy ledger (docs/architecture.md#apps-and-models).

Every transaction that changes a budget appends one ``LedgerBlock`` holding its
entries.  The block's hash is

    sha256(prev_hash || entry_count || created_at || canonical bytes of the entries in id order)

where the canonical bytes are a fixed-width little-endian record per entry
(``ENTRY``: exact micro-epsilons, microsecond timestamps, -1 for nulls), built
with numpy and hashed in one call.

The record's last field is the release's ``guarantee`` (``GUARANTEES`` index:
0 none, 1 ldp, 2 uldp, 3 per-report with non-collusion).  A block in which every
entry has guarantee 0 is hashed exactly as before the field existed (the first
15 fields, ``ENTRY_V1``), so ledgers written earlier, and the anchors recorded
for them, still verify; a block with any guarantee is hashed as
``V2_MARKER || ENTRY records``.  Changing a guarantee either way changes the
bytes hashed, so the hash chain covers it.

**Shards** (docs/budget-rules.md#the-ledger).  The ledger is one hash chain per shard: shard 0 is the chain
written before shards existed, shard ``a`` holds the blocks about attribute ``a``'s values.  A writing
transaction appends to one shard and locks that shard's ``LedgerHead`` row (``SELECT ... FOR UPDATE``) last, so
each shard's blocks form a single chain and writers of different attributes never wait for each other;
``UNIQUE (shard, prev_hash)`` refuses a fork even without the lock.  A block of shard ``s > 0`` hashes its
shard too (``SHARD_MARKER || s`` after the previous hash), so a block cannot be moved to another shard; shard
0's blocks hash exactly as before, so their hashes and the anchors recorded for them still verify.
``block_hash`` is also what the audit recomputes from the rows as stored.

**Storage** (docs/budget-rules.md#the-ledger).  The hash covers the entries in the order given (position 0, 1,
...); how they are stored does not enter it.  Budget events are one ``LedgerEvent`` row each; a block of releases
is stored as ``LedgerRelease`` rows, one per run of values of one chain block (``release_runs``), its per-value
fields as arrays; the view ``LedgerEntry`` shows them one row per value, in position order (id = block id *
``ID_SHIFT`` + position), which is what ``stored_records`` and the audit re-hash.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone as djtz

from ldpmarket import merkle, pgbinary, storage

from .epsilon import to_micro
from .models import LedgerBlock, LedgerCheckpointLeaf, LedgerEntry, LedgerEvent, LedgerHead, LedgerRelease

GENESIS = "0" * 64
KINDS = LedgerEntry.Kind.values
SHAPES = ["", "linear", "steps"]
GUARANTEES = LedgerEntry.Guarantee.values  # "", "ldp", "uldp", "per_report_non_collusion"
_V1_FIELDS = [
    ("value", "<i8"), ("kind", "<i8"), ("epsilon", "<i8"), ("reference", "<i8"),  # reference: purchase id
    ("chain_before", "<i8"), ("chain_after", "<i8"), ("oneshot_before", "<i8"), ("oneshot_after", "<i8"),
    ("ceiling", "<i8"), ("sched_start", "<i8"), ("sched_cap", "<i8"), ("sched_start_at", "<i8"),
    ("sched_end_at", "<i8"), ("sched_shape", "<i8"), ("sched_steps", "<i8"),
]
#: The record hashed for blocks without any guarantee (every block written before guarantees existed).
ENTRY_V1 = np.dtype(_V1_FIELDS)
ENTRY = np.dtype(_V1_FIELDS + [("guarantee", "<i8")])
V2_MARKER = b"ldpmarket-ledger-entry-v2\x00"
SHARD_MARKER = b"ldpmarket-ledger-shard-v1\x00"
#: The shard of the chain written before shards existed (and of owner-wide events).
LEGACY_SHARD = 0
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(dt: datetime | None) -> int:
    if dt is None:
        return -1
    delta = dt - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def canonical_bytes(entries: np.ndarray) -> bytes:
    """The bytes a block's entries contribute to its hash (module doc: v1 when no entry has a guarantee)."""
    rec = np.ascontiguousarray(entries, dtype=ENTRY)
    v2 = bool((rec["guarantee"] != 0).any())
    return (V2_MARKER if v2 else b"") + canonical_records(rec, v2)


def canonical_records(entries: np.ndarray, v2: bool) -> bytes:
    """The records of (a run of) a block's entries as its hash covers them: all 16 fields when the block is hashed
    as v2, the first 15 otherwise."""
    rec = np.ascontiguousarray(entries, dtype=ENTRY)
    if v2:
        return rec.tobytes()
    v1 = np.empty(rec.shape[0], dtype=ENTRY_V1)
    for name in ENTRY_V1.names:
        v1[name] = rec[name]
    return v1.tobytes()


def block_hasher(prev_hash: str, created_at: datetime, entry_count: int, shard: int = LEGACY_SHARD):
    """A SHA-256 fed with a block's header (``prev_hash || [shard marker || shard] || entry count ||
    created_at``): its entries' canonical bytes follow."""
    h = hashlib.sha256()
    h.update(prev_hash.encode())
    if shard != LEGACY_SHARD:
        h.update(SHARD_MARKER + np.array([shard], dtype="<i8").tobytes())
    h.update(np.array([entry_count, micros(created_at)], dtype="<i8").tobytes())
    return h


def block_hash(prev_hash: str, created_at: datetime, entries: np.ndarray, shard: int = LEGACY_SHARD) -> str:
    h = block_hasher(prev_hash, created_at, entries.shape[0], shard)
    h.update(canonical_bytes(entries))
    return h.hexdigest()


RELEASE_CODES = (KINDS.index(LedgerEntry.Kind.CHAIN_RELEASE), KINDS.index(LedgerEntry.Kind.ONESHOT_RELEASE))
#: An entry's id in the per-value view is ``block id * ID_SHIFT + position`` (migration 0013).
ID_SHIFT = 2 ** 24


@dataclass
class Rows:
    """Ledger entries as columns (numpy int64, micro-epsilons, -1 for null) — one array per field of ENTRY.

    Releases also carry, per value, its owner, its chain block (-1: none) and the owner's earnings (money units
    of 1/10000), which the compact rows store (``LedgerRelease``) but the hash does not cover as such."""

    records: np.ndarray  # dtype ENTRY
    owner: np.ndarray | None = None
    chain_block: np.ndarray | None = None
    earning: np.ndarray | None = None

    @classmethod
    def empty(cls, n: int) -> "Rows":
        rec = np.full(n, -1, dtype=ENTRY)
        rec["sched_shape"] = 0
        rec["guarantee"] = 0
        return cls(rec)


def append(rows: Rows, *, shard: int) -> LedgerBlock:
    """Append ``rows`` as one block of ``shard`` (the attribute whose values they concern); must run inside the
    caller's transaction, after its budget locks: the shard's head is locked last."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("ledger.append must run inside the transaction that changes the budgets")
    rec = rows.records
    if rec.shape[0] == 0:
        raise ValueError("a ledger block needs at least one entry")
    head, _ = LedgerHead.objects.select_for_update().get_or_create(shard=shard)
    # The previous block's hash is read after the lock, by its own query.  Joined into the locking SELECT
    # (``select_related``), it came back NULL whenever the lock had waited: PostgreSQL re-reads the locked head
    # row after the wait (EvalPlanQual) but joins it with the block rows of the statement's older snapshot,
    # which lack the block the other writer just appended (docs/budget-rules.md#the-ledger).
    prev = (LedgerBlock.objects.filter(pk=head.last_block_id).values_list("hash", flat=True).get()
            if head.last_block_id else GENESIS)
    created_at = djtz.now()
    block = LedgerBlock.objects.create(shard=shard, prev_hash=prev, hash=block_hash(prev, created_at, rec, shard),
                                       entry_count=rec.shape[0], created_at=created_at)
    _insert_entries(block, created_at, rows)
    head.last_block = block
    head.blocks += 1
    head.save(update_fields=["last_block", "blocks"])
    return block


def _insert_entries(block, created_at, rows: Rows) -> None:
    """A block's entries at positions 0..n-1 in the order given (the order its hash covers): releases as compact
    rows (``_insert_releases``), budget events one row each (``_insert_events``)."""
    rec = rows.records
    if rec.shape[0] >= ID_SHIFT:
        raise ValueError(f"a ledger block holds at most {ID_SHIFT - 1} entries")
    release = np.isin(rec["kind"], RELEASE_CODES)
    if release.any():
        if not release.all():
            raise ValueError("a ledger block holds either releases or budget events")
        if (rec["reference"] < 0).any():
            raise ValueError("every release names the purchase that made it")
        _insert_releases(block, created_at, rows)
    else:
        _insert_events(block, created_at, rec)


def release_runs(rows: Rows, cap: int) -> np.ndarray:
    """The starts of the compact rows of a block of releases: a new row wherever the chain block, the purchase
    or the epsilon changes, the value ids stop increasing, or ``cap`` values are reached."""
    rec = rows.records
    n = rec.shape[0]
    chain_block = rows.chain_block if rows.chain_block is not None else np.full(n, -1)
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    brk[1:] = ((chain_block[1:] != chain_block[:-1]) | (rec["reference"][1:] != rec["reference"][:-1])
               | (rec["epsilon"][1:] != rec["epsilon"][:-1]) | (rec["kind"][1:] != rec["kind"][:-1])
               | (rec["guarantee"][1:] != rec["guarantee"][:-1]) | (rec["value"][1:] <= rec["value"][:-1]))
    starts = np.flatnonzero(brk)
    # split runs longer than cap
    lengths = np.diff(np.append(starts, n))
    extra = [np.arange(s + cap, s + ln, cap) for s, ln in zip(starts.tolist(), lengths.tolist()) if ln > cap]
    return np.sort(np.concatenate([starts, *extra])) if extra else starts


def _insert_releases(block, created_at, rows: Rows) -> None:
    """The compact rows of a block of releases (``LedgerRelease``, docs/budget-rules.md#the-ledger): one per run
    (``release_runs``), the per-value columns as ``bigint[]`` arrays; one binary COPY per distinct run length
    (on PostgreSQL; SQLite: JSON arrays), no Python object per value."""
    rec = rows.records
    n = rec.shape[0]
    starts = release_runs(rows, int(settings.LDP_CHAIN_BLOCK))
    lengths = np.diff(np.append(starts, n))
    owner = rows.owner if rows.owner is not None else np.full(n, -1)
    chain_block = rows.chain_block if rows.chain_block is not None else np.full(n, -1)
    Col = pgbinary.Column
    for length in np.unique(lengths).tolist():
        s = starts[lengths == length]
        idx = s[:, None] + np.arange(length)[None, :]
        k = s.size
        first = rec[s]
        matrix = lambda name: rec[name][idx]  # noqa: E731
        columns = {
            "block_id": Col.int8(np.full(k, block.id)),
            "position": Col.int4(s),
            "shard": Col.int4(np.full(k, block.shard)),
            "purchase_id": Col.int8(first["reference"]),
            "chain_block_id": Col.int8(chain_block[s], null=chain_block[s] < 0),
            "kind": Col.text(first["kind"], KINDS),
            "guarantee": Col.text(first["guarantee"], GUARANTEES),
            "epsilon": Col.numeric(first["epsilon"], 6),
            "created_at": Col.timestamp(np.full(k, micros(created_at))),
            "count": Col.int4(np.full(k, length)),
            "first_value": Col.int8(rec["value"][s]),
            "last_value": Col.int8(rec["value"][s + length - 1]),
            "value_ids": Col.int8_array(matrix("value")),
            "owner_ids": Col.int8_array(owner[idx]),
            "chain_before": Col.int8_array(matrix("chain_before")),
            "chain_after": Col.int8_array(matrix("chain_after")),
            "oneshot_before": Col.int8_array(matrix("oneshot_before")),
            "oneshot_after": Col.int8_array(matrix("oneshot_after")),
            "ceiling": Col.int8_array(matrix("ceiling")),
        }
        if rows.earning is not None:
            columns["earnings"] = Col.int8_array(rows.earning[idx])
        storage.write_columns(LedgerRelease._meta.db_table, columns, k)


def _insert_events(block, created_at, rec) -> None:
    """Set-based insert of a block's budget events, built from the records as columns
    (``ldpmarket.storage.write_columns``: one binary COPY on PostgreSQL, no Python object per entry)."""
    n = rec.shape[0]
    Col = pgbinary.Column
    micro_col = lambda name: Col.numeric(rec[name], 6, null=rec[name] < 0)  # noqa: E731
    storage.write_columns(LedgerEvent._meta.db_table, {
        "block_id": Col.int8(np.full(n, block.id)),
        "position": Col.int4(np.arange(n)),
        "value_id": Col.int8(rec["value"]),
        "purchase_id": Col.int8(rec["reference"], null=rec["reference"] < 0),
        "kind": Col.text(rec["kind"], KINDS),
        "created_at": Col.timestamp(np.full(n, micros(created_at))),
        "epsilon": micro_col("epsilon"),
        "chain_loss_before": micro_col("chain_before"),
        "chain_loss_after": micro_col("chain_after"),
        "oneshot_loss_before": micro_col("oneshot_before"),
        "oneshot_loss_after": micro_col("oneshot_after"),
        "ceiling": micro_col("ceiling"),
        "schedule_start": micro_col("sched_start"),
        "schedule_cap": micro_col("sched_cap"),
        "schedule_start_at": Col.timestamp(rec["sched_start_at"], null=rec["sched_start_at"] < 0),
        "schedule_end_at": Col.timestamp(rec["sched_end_at"], null=rec["sched_end_at"] < 0),
        "schedule_shape": Col.text(rec["sched_shape"], SHAPES),
        "schedule_steps": Col.int4(rec["sched_steps"], null=rec["sched_steps"] < 0),
        "guarantee": Col.text(rec["guarantee"], GUARANTEES),
    }, n)


def _dt(v: int):
    return EPOCH + timedelta(microseconds=v)


def stored_records(block: LedgerBlock) -> np.ndarray:
    """The canonical records of a block's entries as stored now (for the audit's re-hash)."""

    fields = ["value_id", "kind", "epsilon", "purchase_id", "chain_loss_before", "chain_loss_after", "oneshot_loss_before",
              "oneshot_loss_after", "ceiling", "schedule_start", "schedule_cap", "schedule_start_at",
              "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee"]
    rows = list(LedgerEntry.objects.filter(block=block).order_by("id").values_list(*fields))
    rec = Rows.empty(len(rows)).records
    m = lambda d: -1 if d is None else to_micro(d)  # noqa: E731
    code = lambda g: GUARANTEES.index(g) if g in GUARANTEES else -2  # noqa: E731
    for i, r in enumerate(rows):
        rec[i] = (r[0], KINDS.index(r[1]), m(r[2]), -1 if r[3] is None else r[3], to_micro(r[4]), to_micro(r[5]),
                  to_micro(r[6]), to_micro(r[7]), to_micro(r[8]), m(r[9]), m(r[10]), micros(r[11]), micros(r[12]),
                  SHAPES.index(r[13]), -1 if r[14] is None else r[14], code(r[15]))
    return rec


def verify_chain() -> list[str]:
    """Recompute every block's hash from its stored entries, shard by shard; return a list of problems (empty
    when intact).  The audit (``audit.hashchain``) does the same set-based, and checks the checkpoints too."""
    problems = []
    prev: dict[int, str] = {}
    count: dict[int, int] = {}
    for block in LedgerBlock.objects.order_by("shard", "id").iterator():
        rec = stored_records(block)
        if block.prev_hash != prev.get(block.shard, GENESIS):
            problems.append(f"block {block.id}: prev_hash does not match the block before it in shard {block.shard}")
        if rec.shape[0] != block.entry_count:
            problems.append(f"block {block.id}: holds {rec.shape[0]} entries, recorded {block.entry_count}")
        if block_hash(block.prev_hash, block.created_at, rec, block.shard) != block.hash:
            problems.append(f"block {block.id}: entries do not match the block's hash")
        prev[block.shard] = block.hash
        count[block.shard] = count.get(block.shard, 0) + 1
    heads = {h.shard: h for h in LedgerHead.objects.select_related("last_block")}
    for shard in sorted(set(prev) | set(heads)):
        head = heads.get(shard)
        if head is None or not head.last_block_id or head.last_block.hash != prev.get(shard):
            problems.append(f"the head of shard {shard} does not point at its last block")
        elif head.blocks != count.get(shard, 0):
            problems.append(f"the head of shard {shard} counts {head.blocks} blocks, the chain holds "
                            f"{count.get(shard, 0)}")
    return problems


# ------------------------------------------------------------------------------------------- checkpoints

HEAD_LEAF_MARKER = b"ldpmarket-shard-head-v1\x00"


def head_leaf(shard: int, blocks: int, head_hash: str) -> bytes:
    """A checkpoint leaf's data (docs/budget-rules.md#checkpoints): ``HEAD_LEAF_MARKER || shard || blocks`` (two
    little-endian int64) ``|| head hash`` (its 32 bytes)."""
    return HEAD_LEAF_MARKER + np.array([shard, blocks], dtype="<i8").tobytes() + bytes.fromhex(head_hash)


# ------------------------------------------------------------------------------------------- receipts

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


# ------------------------------------------------------------------------------------------- earnings

def release_earnings(*, shard: int, after: int, max_rows: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """The compact release rows of ``shard`` after row id ``after`` (at most ``max_rows``, in id order): ``(last row
    id, number of rows, owner ids, earnings)``, the last two one entry per value with recorded earnings (rows from
    before earnings were recorded per value have none: their owners were paid at purchase time).  PostgreSQL: the
    arrays unnested by the server and read by one binary COPY; SQLite: the JSON arrays."""
    table = LedgerRelease._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"SELECT max(id), count(*) FROM (SELECT id FROM {table} WHERE shard = %s AND id > %s "
                    f"ORDER BY id LIMIT %s) r", [shard, after, max_rows])
        through, rows = cur.fetchone()
    if not rows:
        return after, 0, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if storage.has_binary_copy():
        with connection.cursor() as cur:
            data = pgbinary.copy_out(
                cur.cursor, f"SELECT u.o, u.e FROM {table} r, unnest(r.owner_ids, r.earnings) AS u(o, e) "
                            f"WHERE r.shard = {int(shard)} AND r.id > {int(after)} AND r.id <= {int(through)} "
                            f"AND r.earnings IS NOT NULL")
        got = pgbinary.parse_rows(data, [("o", ">i8"), ("e", ">i8")])
        return int(through), int(rows), got["o"].astype(np.int64), got["e"].astype(np.int64)
    pairs = list(LedgerRelease.objects.filter(shard=shard, id__gt=after, id__lte=through, earnings__isnull=False)
                 .values_list("owner_ids", "earnings"))
    owners = np.concatenate([o for o, _ in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    earnings = np.concatenate([e for _, e in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    return int(through), int(rows), owners, earnings
