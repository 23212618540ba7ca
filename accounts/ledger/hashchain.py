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
from django.db import transaction
from django.utils import timezone as djtz

from accounts.epsilon import to_micro
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import LedgerBlock, LedgerEntry, LedgerEvent, LedgerHead, LedgerRelease
from ldpmarket import jobs, pgbinary, storage

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
    caller's transaction; the shard's head is locked where ``accounts.locks`` puts it (after the budgets and the
    money accounts).  With ``LDP_CHECKPOINT_ON_COMMIT`` (the embedded set-up, which runs no beat) the transaction
    also makes a checkpoint once it commits, one however many blocks it appended."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("ledger.append must run inside the transaction that changes the budgets")
    rec = rows.records
    if rec.shape[0] == 0:
        raise ValueError("a ledger block needs at least one entry")
    take_lock(Lock.LEDGER_HEAD)
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
    if settings.LDP_CHECKPOINT_ON_COMMIT:  # the embedded set-up: no beat (docs/operations.md)
        jobs.enqueue_once(jobs.MAKE_CHECKPOINT)
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
        "shard": Col.int4(np.full(n, block.shard)),
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

    fields = ["value_id", "kind", "epsilon", "purchase_id", "chain_loss_before", "chain_loss_after",
              "oneshot_loss_before", "oneshot_loss_after", "ceiling", "schedule_start", "schedule_cap",
              "schedule_start_at", "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee"]
    rows = list(LedgerEntry.objects.filter(block=block).order_by("id").values_list(*fields))
    rec = Rows.empty(len(rows)).records
    m = lambda d: -1 if d is None else to_micro(d)  # noqa: E731
    code = lambda g: GUARANTEES.index(g) if g in GUARANTEES else -2  # noqa: E731
    for i, r in enumerate(rows):
        rec[i] = (r[0], KINDS.index(r[1]), m(r[2]), -1 if r[3] is None else r[3], to_micro(r[4]), to_micro(r[5]),
                  to_micro(r[6]), to_micro(r[7]), to_micro(r[8]), m(r[9]), m(r[10]), micros(r[11]), micros(r[12]),
                  SHAPES.index(r[13]), -1 if r[14] is None else r[14], code(r[15]))
    return rec


# ------------------------------------------------------------------------------------------- checkpoints


# ------------------------------------------------------------------------------------------- receipts


# ------------------------------------------------------------------------------------------- earnings

