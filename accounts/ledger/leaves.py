"""The checkpoint log's leaves and the entry trees of blocks (docs/receipts.md#where-the-entries-sit-two-trees).

A block leaf (``block_leaf``) commits to a block's place in its shard, its hash and its entries root, the RFC 6962
root over its entries' leaf data (``entry_leaf_data``), computed a window of entries at a time (``block_tree``);
logs from before receipts hold shard-head leaves (``head_leaf``).  ``log_leaf_hashes`` are the leaves the
checkpoints sign (``accounts.ledger.checkpoints``).

Leaves have a version, which the block leaf's marker states (docs/receipts.md#entry-data):

* **1** (blocks checkpointed before blinding): an entry's leaf data is ``ENTRY_LEAF_MARKER || its 16 int64``, so a
  sibling hash in a receipt's proof can be brute-forced back to another owner's entry;
* **2** (``LEAF_VERSION``, every block leaf written since): ``ENTRY_LEAF_MARKER_V2 || k_e || its 16 int64``, where
  ``k_e = HMAC-SHA256(blinding key, entry id as 8 bytes big-endian)`` (``entry_keys``) is the entry's own secret,
  given only to its owner and to auditors with its receipt; the blinding key is HKDF-SHA256 of
  ``LDP_LEDGER_BLINDING_KEY`` (or, when it is empty, ``LDP_VALUE_KEY``) under ``BLINDING_LABEL``
  (``blinding_key``).  It must never change: the audit recomputes every entries root with it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models

from accounts.epsilon import to_micro
from accounts.ledger import merkle
from accounts.ledger.hashchain import (
    ENTRY,
    GUARANTEES,
    ID_SHIFT,
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


#: Entry data of a receipt, the leaf of its block's entry tree (docs/receipts.md#entry-data): version 1, the
#: entry's fields alone; version 2, blinded by the entry's key.
ENTRY_LEAF_MARKER = b"ldpmarket-ledger-entry-leaf-v1\x00"
ENTRY_LEAF_MARKER_V2 = b"ldpmarket-ledger-entry-leaf-v2\x00"


#: A block's leaf in the checkpoint log (docs/receipts.md#block-leaf-data-135-bytes): its marker states the version
#: of its entries' leaves, so that a verifier reads it from the signed data alone.
BLOCK_LEAF_MARKER = b"ldpmarket-ledger-block-leaf-v1\x00"
BLOCK_LEAF_MARKER_V2 = b"ldpmarket-ledger-block-leaf-v2\x00"

ENTRY_LEAF_MARKERS = {1: ENTRY_LEAF_MARKER, 2: ENTRY_LEAF_MARKER_V2}
BLOCK_LEAF_MARKERS = {1: BLOCK_LEAF_MARKER, 2: BLOCK_LEAF_MARKER_V2}

#: The leaf version checkpoints write for every new block leaf.
LEAF_VERSION = 2

#: The HKDF label of the blinding key (its own: independent of every other key derived from the same secret).
BLINDING_LABEL = b"ldpmarket ledger entry blinding key v1"
#: Bytes of an entry's blinding key ``k_e``.
ENTRY_KEY_SIZE = 32


#: Entries per stored chunk root of a block's entry tree: a power of two, so each chunk is a subtree of the
#: RFC 6962 tree over the whole block and the tree over the chunk roots has the same root.
TREE_CHUNK = 2048


def blinding_key() -> bytes:
    """The 32-byte key every entry's ``k_e`` is derived from: HKDF-SHA256 of ``LDP_LEDGER_BLINDING_KEY`` or, when
    that setting is empty, of ``LDP_VALUE_KEY`` (refused with a ring of value keys: a rotation would change it), under
    ``BLINDING_LABEL``.
    Changing it would make every version-2 entries root unreproducible (the audit fails, receipts of earlier
    entries could not be reissued): docs/security.md#keys."""
    if not settings.LDP_LEDGER_BLINDING_KEY and len(settings.LDP_VALUE_KEYS) > 1:
        # the settings refuse this at start-up; a ring of value keys would otherwise change the derived key
        raise ImproperlyConfigured("LDP_VALUE_KEYS holds more than one key: set LDP_LEDGER_BLINDING_KEY to the value "
                                   "key the blinding key was derived from (docs/security.md#rotating-the-value-key).")
    secret = settings.LDP_LEDGER_BLINDING_KEY or settings.LDP_VALUE_KEY
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=BLINDING_LABEL).derive(secret.encode())


def _hmac_states(key: bytes) -> tuple:
    """HMAC-SHA256 (RFC 2104) under ``key`` as two SHA-256 states after their 64-byte padded keys, to be copied
    per message: the same digest as ``hmac.new(key, msg, "sha256")`` at a fraction of its cost per call."""
    block = (key if len(key) <= 64 else hashlib.sha256(key).digest()).ljust(64, b"\x00")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in block)), hashlib.sha256(bytes(b ^ 0x5C for b in block)))


def _entry_ids(ids) -> bytes:
    """The entry ids as 8 bytes each, big-endian (the message ``k_e`` is the HMAC of)."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and ids.min() < 0:
        raise ValueError("an entry id is never negative")
    return ids.astype(">i8").tobytes()


def entry_keys(ids, key: bytes | None = None) -> list[bytes]:
    """``k_e = HMAC-SHA256(blinding key, entry id as 8 bytes big-endian)`` of each entry id in ``ids`` (an entry's
    id is its block id * 2^24 + its position, ``LedgerEntry.id``); ``key``: the blinding key (default
    ``blinding_key()``)."""
    inner, outer = _hmac_states(blinding_key() if key is None else key)
    raw = _entry_ids(ids)
    out = []
    for i in range(0, len(raw), 8):
        h = inner.copy()
        h.update(raw[i:i + 8])
        o = outer.copy()
        o.update(h.digest())
        out.append(o.digest())
    return out


def entry_leaf_data(record, version: int = 1, key: bytes | None = None) -> bytes:
    """One entry's data in its block's entry tree (always with the guarantee field, whatever format the block's
    hash used): version 1, ``ENTRY_LEAF_MARKER || the 16 int64 of its ENTRY record`` (159 bytes); version 2,
    ``ENTRY_LEAF_MARKER_V2 || k_e || the 16 int64`` (191 bytes), ``key`` being the entry's ``k_e``."""
    fields = np.asarray(record, dtype=ENTRY).tobytes()
    if version == 1:
        return ENTRY_LEAF_MARKER + fields
    if version != 2:
        raise ValueError(f"no entry leaf version {version}")
    if key is None or len(key) != ENTRY_KEY_SIZE:
        raise ValueError(f"a version-2 entry leaf needs the entry's {ENTRY_KEY_SIZE}-byte key")
    return ENTRY_LEAF_MARKER_V2 + key + fields


def entry_leaf_hashes(records: np.ndarray, version: int = 1, ids: Sequence[int] | np.ndarray | None = None,
                      key: bytes | None = None) -> list[bytes]:
    """``SHA-256(0x00 || entry data)`` of each record, in order (``entry_leaf_data`` of ``version``): one hash call
    per entry over the records' bytes, laid out once by numpy, from copies of a hash state after the fixed prefix.
    Version 2 needs the entries' ``ids`` (one per record) and derives each ``k_e`` from copied HMAC states in the
    same loop (``key``: the blinding key, default ``blinding_key()``)."""
    raw = np.ascontiguousarray(records, dtype=ENTRY).tobytes()
    width = ENTRY.itemsize
    out = []
    if version == 1:
        prefix = hashlib.sha256(merkle.LEAF_PREFIX + ENTRY_LEAF_MARKER)
        for i in range(0, len(raw), width):
            h = prefix.copy()
            h.update(raw[i:i + width])
            out.append(h.digest())
        return out
    if version != 2:
        raise ValueError(f"no entry leaf version {version}")
    if ids is None or len(ids) != len(records):
        raise ValueError("version-2 entry leaves need the id of every entry")
    message = _entry_ids(ids)
    inner, outer = _hmac_states(blinding_key() if key is None else key)
    prefix = hashlib.sha256(merkle.LEAF_PREFIX + ENTRY_LEAF_MARKER_V2)
    for j, i in enumerate(range(0, len(raw), width)):
        m = inner.copy()
        m.update(message[8 * j:8 * j + 8])
        k = outer.copy()
        k.update(m.digest())
        h = prefix.copy()
        h.update(k.digest())
        h.update(raw[i:i + width])
        out.append(h.digest())
    return out


def chunk_roots(records: np.ndarray, version: int = 1, ids: Sequence[int] | np.ndarray | None = None,
                key: bytes | None = None) -> list[bytes]:
    """The roots of the entry trees of ``records`` cut into chunks of ``TREE_CHUNK`` (the last one partial), with
    leaves of ``version`` (``entry_leaf_hashes``)."""
    leaves = entry_leaf_hashes(records, version, ids, key)
    return [merkle.root(leaves[i:i + TREE_CHUNK]) for i in range(0, len(leaves), TREE_CHUNK)]


def entry_tree(records: np.ndarray, version: int = 1, ids: Sequence[int] | np.ndarray | None = None,
               key: bytes | None = None) -> tuple[bytes, list[bytes]]:
    """A block's entries root and the roots of its chunks of ``TREE_CHUNK`` entries (the last one partial), with
    leaves of ``version`` (version 2: ``ids``, the entries' ids, one per record):
    ``MTH(entries) = MTH(chunk roots)`` because each aligned chunk is a subtree of the RFC 6962 tree."""
    chunks = chunk_roots(records, version, ids, key)
    return merkle.root(chunks), chunks


def position_ids(block_id: int, start: int, stop: int) -> np.ndarray:
    """The ids of the entries at positions ``start .. stop - 1`` of block ``block_id`` (``LedgerEntry.id``)."""
    return block_id * ID_SHIFT + np.arange(start, stop, dtype=np.int64)


#: Entries a checkpoint reads and hashes at a time (a multiple of ``TREE_CHUNK``): its memory is bounded by this,
#: not by the size of the block.
TREE_WINDOW = 32 * TREE_CHUNK


def block_tree(block_id: int, shard: int, prev_hash: str, created_at: datetime, entry_count: int,
               window: int = TREE_WINDOW, *, version: int = 1) -> tuple[str, bytes, list[bytes]]:
    """A block's hash recomputed from its stored entries, with its entries root and chunk roots built from the
    same records, with entry leaves of ``version``: ``(hash hex, entries root, chunk roots)``.  The entries are
    read ``window`` at a time (``records_at``), so a block of 10^7 entries costs no more memory than one of
    ``window``.  Checkpoints pass ``LEAF_VERSION``."""
    if window % TREE_CHUNK:
        raise ValueError(f"the window must be a multiple of {TREE_CHUNK} entries")
    key = blinding_key() if version == 2 else None
    v2 = (LedgerRelease.objects.filter(block_id=block_id).exclude(guarantee="").exists()
          or LedgerEvent.objects.filter(block_id=block_id).exclude(guarantee="").exists())
    h = block_hasher(prev_hash, created_at, entry_count, shard)
    if v2:
        h.update(V2_MARKER)
    chunks: list[bytes] = []
    for start in range(0, entry_count, window):
        stop = min(entry_count, start + window)
        records = records_at(block_id, start, stop)
        h.update(canonical_records(records, v2))
        chunks += chunk_roots(records, version, position_ids(block_id, start, stop) if version == 2 else None, key)
    return h.hexdigest(), merkle.root(chunks), chunks


def block_leaf(shard: int, height: int, block_id: int, entry_count: int, created_at_us: int, block_hash_hex: str,
               entries_root_hex: str, version: int = 1) -> bytes:
    """A block's leaf data in the checkpoint log (docs/receipts.md#block-leaf-data-135-bytes): the marker of
    ``version`` (how its entries' leaves are hashed), then the same fields for every version."""
    return (BLOCK_LEAF_MARKERS[version]
            + np.array([shard, height, block_id, entry_count, created_at_us], dtype="<i8").tobytes()
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
    """A stored leaf's data: a block leaf of its ``version`` (1 or 2), or a shard-head leaf written before receipts
    existed."""
    if leaf.block_id is None:
        return head_leaf(leaf.shard, leaf.blocks, leaf.head_hash)
    return block_leaf(leaf.shard, leaf.blocks, leaf.block_id, leaf.entry_count, micros(leaf.block_created_at),
                      leaf.head_hash, leaf.entries_root, leaf.version)


def log_leaf_hashes(size: int | None = None) -> list[bytes]:
    """``SHA-256(0x00 || data)`` of the checkpoint log's first ``size`` leaves (all when ``None``), in index
    order."""
    leaves = LedgerCheckpointLeaf.objects.order_by("index").only(
        "index", "shard", "blocks", "head_hash", "block_id", "entry_count", "block_created_at", "entries_root",
        "version")
    if size is not None:
        leaves = leaves.filter(index__lt=size)
    return [merkle.leaf_hash(leaf_data(leaf)) for leaf in leaves.iterator(chunk_size=10_000)]
