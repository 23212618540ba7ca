"""Valid receipts files built from synthetic ledger entries (docs/receipts.md#the-receipts-file), for the tests of
the receipts verifiers: the client's (``ldpmarket_client.receipts``) and the portal's.

It is independent of the service's receipt code: it lays out the entry and block leaf data itself with
``struct`` from docs/receipts.md, builds the trees with ``accounts.ledger.merkle``, and signs the checkpoint with a
fresh Ed25519 key.  It needs no database and no Django settings::

    from tests.client import receipt_fixtures as rf

    seven = rf.history(7, [("ceiling", 1_000_000), ("chain", 200_000), ("oneshot", 300_000)])
    fx = rf.build([[seven[0]], [rf.filler(1), seven[1], seven[2]]], foreign_leaves=3)
    fx.bundle                    # the receipts file (a dict, as GET /api/v1/owner/receipts/ answers)
    fx.checkpoint                # its checkpoint (a dict, one item of GET /api/v1/ledger/checkpoints/)
    fx.public_key_pem            # bytes (``.decode()`` for JSON)
    newer, proof = fx.grow(4)    # a later checkpoint (4 leaves more) and the consistency proof to it
    blinded = rf.build([[seven[0]]], version=2)   # block leaves of version 2: entries blinded by their keys

Amounts are micro-epsilons (ints), times microseconds since 1970 or aware datetimes.  Every function returns
plain dicts and lists that ``json.dumps`` takes as they are.
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from accounts.ledger import merkle

FORMAT = "ldpmarket-receipts-v1"
HEADER = "ldpmarket ledger checkpoint v1"
ENTRY_MARKER = b"ldpmarket-ledger-entry-leaf-v1\x00"
BLOCK_MARKER = b"ldpmarket-ledger-block-leaf-v1\x00"
#: Version 2 (docs/receipts.md#entry-data): entry data blinded by the entry's key, in blocks whose leaf says so.
ENTRY_MARKER_V2 = b"ldpmarket-ledger-entry-leaf-v2\x00"
BLOCK_MARKER_V2 = b"ldpmarket-ledger-block-leaf-v2\x00"
ENTRY_MARKERS = {1: ENTRY_MARKER, 2: ENTRY_MARKER_V2}
BLOCK_MARKERS = {1: BLOCK_MARKER, 2: BLOCK_MARKER_V2}
HEAD_MARKER = b"ldpmarket-shard-head-v1\x00"
#: The fixtures' blinding key (the service derives its own from LDP_LEDGER_BLINDING_KEY): a verifier never sees
#: it, only each entry's key.
BLINDING_KEY = hashlib.sha256(b"ldpmarket receipt fixtures: blinding key").digest()
#: The entry data's 16 fields, in order (docs/receipts.md#entry-data).
FIELDS = ("value", "kind", "epsilon", "purchase", "chain_before", "chain_after", "oneshot_before", "oneshot_after",
          "ceiling", "schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at", "schedule_shape",
          "schedule_steps", "guarantee")
KINDS = ("chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted",
         "owner_custody", "owner_upload")
GUARANTEES = ("", "ldp", "uldp", "per_report_non_collusion")
#: Where each field's 8 bytes sit in the entry data (for tests that change one): version 1, and version 2 (after
#: the entry's key, at ``KEY_OFFSET``).
OFFSETS = {name: len(ENTRY_MARKER) + 8 * i for i, name in enumerate(FIELDS)}
KEY_OFFSET = len(ENTRY_MARKER_V2)
OFFSETS_V2 = {name: at + 32 for name, at in OFFSETS.items()}
#: Where the block leaf's parts sit in its data.
BLOCK_OFFSETS = {"shard": 31, "height": 39, "block_id": 47, "entry_count": 55, "created_at": 63, "block_hash": 71,
                 "entries_root": 103}
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(value: int, kind: str | int = "ceiling", *, epsilon: int = -1, purchase: int = -1,
           chain: tuple[int, int] = (0, 0), oneshot: tuple[int, int] = (0, 0), ceiling: int = 1_000_000,
           guarantee: str | int = 0, **schedule: int) -> dict[str, int]:
    """One ledger entry's 16 fields: ``chain`` and ``oneshot`` are (before, after); ``schedule``: the
    ``schedule_*`` fields (each -1 unless given)."""
    rec = dict.fromkeys(FIELDS, -1)
    rec.update(value=value, kind=KINDS.index(kind) if isinstance(kind, str) else kind, epsilon=epsilon,
               purchase=purchase, chain_before=chain[0], chain_after=chain[1], oneshot_before=oneshot[0],
               oneshot_after=oneshot[1], ceiling=ceiling,
               guarantee=GUARANTEES.index(guarantee) if isinstance(guarantee, str) else guarantee)
    for name, v in schedule.items():
        if name not in FIELDS or not name.startswith("schedule_"):
            raise TypeError(f"unknown field {name}")
        rec[name] = v
    return rec


def filler(value: int) -> dict[str, int]:
    """Another owner's entry (a contribution's ceiling event) to fill a block."""
    return record(value, "ceiling", ceiling=2_000_000)


def history(value: int, steps: Iterable[tuple], *, purchase: int = 1) -> list[dict[str, int]]:
    """A value's entries whose losses chain (each one's before is the previous one's after), from no loss.

    ``steps``: ``("ceiling", micro)`` sets the ceiling; ``("chain", micro)`` a chain release at that epsilon (the
    chain loss becomes the largest released); ``("oneshot", micro[, guarantee])`` a one-shot release (added to
    the one-shot loss, guarantee "ldp" unless given); ``(kind,)`` any other budget event.  Releases get
    purchases ``purchase``, ``purchase + 1``, ...  The ceiling starts at 1 (10^6)."""
    chain = oneshot = 0
    ceiling = 1_000_000
    out = []
    for step in steps:
        kind = step[0]
        if kind == "ceiling":
            ceiling = step[1]
            out.append(record(value, "ceiling", chain=(chain, chain), oneshot=(oneshot, oneshot), ceiling=ceiling))
        elif kind == "chain":
            after = max(chain, step[1])
            out.append(record(value, "chain_release", epsilon=step[1], purchase=purchase, chain=(chain, after),
                              oneshot=(oneshot, oneshot), ceiling=ceiling))
            chain, purchase = after, purchase + 1
        elif kind == "oneshot":
            guarantee = step[2] if len(step) > 2 else "ldp"
            out.append(record(value, "oneshot_release", epsilon=step[1], purchase=purchase, chain=(chain, chain),
                              oneshot=(oneshot, oneshot + step[1]), ceiling=ceiling, guarantee=guarantee))
            oneshot, purchase = oneshot + step[1], purchase + 1
        else:
            out.append(record(value, kind, chain=(chain, chain), oneshot=(oneshot, oneshot), ceiling=ceiling))
    return out


def entry_key(entry_id: int, blinding_key: bytes = BLINDING_KEY) -> bytes:
    """An entry's blinding key: HMAC-SHA256 of its id (8 bytes, big-endian) under the blinding key."""
    return hmac.new(blinding_key, entry_id.to_bytes(8, "big"), hashlib.sha256).digest()


def entry_data(rec: dict[str, int] | Sequence[int], version: int = 1, key: bytes | None = None) -> bytes:
    """An entry's data (a dict of the 16 fields, or the 16 ints in order): version 1, its 159 bytes; version 2, its
    191 bytes, blinded by ``key`` (32 bytes, :func:`entry_key`)."""
    values = [rec[name] for name in FIELDS] if isinstance(rec, dict) else list(rec)
    if len(values) != len(FIELDS):
        raise ValueError(f"an entry has {len(FIELDS)} fields, not {len(values)}")
    if version == 2 and (key is None or len(key) != 32):
        raise ValueError("a version-2 entry needs its 32-byte key")
    return ENTRY_MARKERS[version] + (key if version == 2 else b"") + struct.pack("<16q", *values)


def block_data(shard: int, height: int, block_id: int, entry_count: int, created_at_us: int, block_hash: bytes,
               entries_root: bytes, version: int = 1) -> bytes:
    """A block's 135 bytes in the checkpoint log (docs/receipts.md#block-leaf-data-135-bytes); ``version`` says
    how its entries are hashed."""
    return (BLOCK_MARKERS[version] + struct.pack("<5q", shard, height, block_id, entry_count, created_at_us)
            + block_hash + entries_root)


def head_leaf(shard: int, blocks: int) -> bytes:
    """A leaf written before receipts existed (a shard's head): no receipt points at it."""
    return HEAD_MARKER + struct.pack("<2q", shard, blocks) + hashlib.sha256(b"head %d %d" % (shard, blocks)).digest()


def micros(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _micro_text(m: int) -> str | None:
    return None if m < 0 else f"{m // 10**6}.{m % 10**6:06d}"


def _api_time(t: datetime) -> str:
    """A time as the API writes it (DRF: ISO 8601, ``Z`` for UTC)."""
    return t.isoformat().replace("+00:00", "Z")


def entry_json(rec: dict[str, int], entry_id: int, created_at: datetime) -> dict:
    """The ``entry`` the portal shows for a record (docs/receipts.md#the-receipts-file)."""
    return {"id": entry_id, "value": rec["value"], "kind": KINDS[rec["kind"]],
            "epsilon": _micro_text(rec["epsilon"]), "purchase": None if rec["purchase"] < 0 else rec["purchase"],
            "chain_loss_before": _micro_text(rec["chain_before"]), "chain_loss_after": _micro_text(rec["chain_after"]),
            "oneshot_loss_before": _micro_text(rec["oneshot_before"]),
            "oneshot_loss_after": _micro_text(rec["oneshot_after"]), "ceiling": _micro_text(rec["ceiling"]),
            "guarantee": GUARANTEES[rec["guarantee"]] if rec["guarantee"] >= 0 else None,
            "created_at": _api_time(created_at)}


def new_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def public_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def sign_checkpoint(key: Ed25519PrivateKey, tree_size: int, root_hash: str, created_at: datetime,
                    statement: str | None = None) -> dict:
    """A checkpoint as ``GET /api/v1/ledger/checkpoints/`` lists it, signed by ``key``; ``statement`` signs other
    text than the checkpoint's own (a forgery for tests)."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    text = statement if statement is not None else (
        f"{HEADER}\n{tree_size}\n{root_hash}\n{created_at.isoformat(timespec='microseconds')}\n")
    return {"tree_size": tree_size, "root_hash": root_hash, "created_at": _api_time(created_at),
            "key_id": hashlib.sha256(raw).hexdigest(), "signature": key.sign(text.encode()).hex(),
            "statement": text}


@dataclass
class Fixture:
    """A checkpoint log with its blocks, the receipts file at its current size, and the key that signs.

    ``leaves`` is the log's leaf data (foreign head leaves and block leaves), ``blocks`` the records of each
    block, ``block_leaves`` the log index of each block, ``bundle``/``checkpoint``/``public_key_pem`` what a
    verifier is given."""

    key: Ed25519PrivateKey
    blocks: list[list[dict[str, int]]]
    leaves: list[bytes]
    block_leaves: list[int]
    bundle: dict
    checkpoint: dict
    public_key_pem: bytes
    created_at: datetime
    signed: int = 0

    def root_of(self, size: int, leaves: Sequence[bytes] | None = None) -> str:
        return merkle.root([merkle.leaf_hash(d) for d in (leaves or self.leaves)[:size]]).hex()

    def sign(self, tree_size: int, root_hash: str, statement: str | None = None) -> dict:
        """Another checkpoint signed by this fixture's key (a later time each call)."""
        self.signed += 1
        return sign_checkpoint(self.key, tree_size, root_hash, self.created_at + timedelta(minutes=10 * self.signed),
                               statement)

    def checkpoint_of(self, size: int) -> dict:
        """The signed checkpoint of the log's first ``size`` leaves (an earlier one when ``size`` is smaller)."""
        return self.sign(size, self.root_of(size))

    def consistency(self, first: int, second: int, leaves: Sequence[bytes] | None = None) -> dict:
        """``GET /api/v1/ledger/consistency/?first=..&second=..`` over ``leaves`` (default: the log's)."""
        leaves = list(leaves or self.leaves)
        hashes = [merkle.leaf_hash(d) for d in leaves[:second]]
        proof = merkle.consistency_proof(first, hashes) if first < second else []
        return {"first": first, "second": second, "first_root": self.root_of(first, leaves),
                "second_root": self.root_of(second, leaves), "proof": [p.hex() for p in proof]}

    def grow(self, more: int, *, rewrite: dict[int, bytes] | None = None) -> tuple[dict, dict]:
        """Append ``more`` foreign leaves and return the later checkpoint and the consistency proof from the
        bundle's checkpoint to it.  ``rewrite`` (log index -> leaf data) changes leaves of the old prefix
        first: a forked log, whose proof does not verify against the old root."""
        old = self.checkpoint["tree_size"]
        leaves = list(self.leaves)
        for index, data in (rewrite or {}).items():
            leaves[index] = data
        leaves += [head_leaf(900 + i, i + 1) for i in range(more)]
        if not rewrite:
            self.leaves = leaves
        size = len(leaves)
        proof = self.consistency(old, size, leaves)
        proof["first_root"] = self.checkpoint["root_hash"]  # what the service states for the old checkpoint
        return self.sign(size, self.root_of(size, leaves)), proof


def build(blocks: Sequence[Sequence[dict[str, int] | Sequence[int]]], *, values: Iterable[int] | None = None,
          foreign_leaves: int = 0, trailing_leaves: int = 0, shard: int = 3, first_block_id: int = 100,
          key: Ed25519PrivateKey | None = None, created_at: datetime = T0, pending: list | None = None,
          version: int | Sequence[int] = 1, entry_version: int | None = None) -> Fixture:
    """A valid receipts file over ``blocks`` (each a list of entry records, as :func:`record` or 16 ints).

    The log holds ``foreign_leaves`` head leaves, then one leaf per block in order, then ``trailing_leaves``
    more; the checkpoint covers all of them.  Receipts are made for the entries of ``values`` (default: every
    value), grouped by value (ascending), each value's in ledger order; ``pending`` is copied as it is.
    ``version``: the leaf version of every block, or one per block (2: entries blinded by :func:`entry_key`).
    ``entry_version``: hash every entry as this version whatever its block leaf says (a faulty service)."""
    key = key or new_key()
    blocks = [[r if isinstance(r, dict) else dict(zip(FIELDS, r)) for r in b] for b in blocks]
    versions = [version] * len(blocks) if isinstance(version, int) else list(version)
    if len(versions) != len(blocks):
        raise ValueError(f"{len(versions)} versions for {len(blocks)} blocks")
    leaves = [head_leaf(1000 + i, i + 1) for i in range(foreign_leaves)]
    block_leaves, made = [], []
    prev = bytes(32)
    for n, records in enumerate(blocks):
        if not records:
            raise ValueError("a block holds at least one entry")
        at = created_at - timedelta(minutes=len(blocks) - n)
        hashed = entry_version or versions[n]
        datas = [entry_data(r, hashed, entry_key((first_block_id + n) * 2 ** 24 + position) if hashed == 2 else None)
                 for position, r in enumerate(records)]
        entry_leaves = [merkle.leaf_hash(d) for d in datas]
        entries_root = merkle.root(entry_leaves)
        block_hash = hashlib.sha256(prev + entries_root).digest()  # stands in for the chain's hash
        data = block_data(shard, n + 1, first_block_id + n, len(records), micros(at), block_hash, entries_root,
                          versions[n])
        block_leaves.append(len(leaves))
        leaves.append(data)
        made.append((at, entry_leaves, data, datas))
        prev = block_hash
    leaves += [head_leaf(2000 + i, i + 1) for i in range(trailing_leaves)]
    log = [merkle.leaf_hash(d) for d in leaves]
    root = merkle.root(log).hex()

    wanted = None if values is None else set(values)
    by_value: dict[int, list[dict]] = {}
    for n, records in enumerate(blocks):
        at, entry_leaves, data, datas = made[n]
        block_proof = None
        for position, rec in enumerate(records):
            if wanted is not None and rec["value"] not in wanted:
                continue
            block_proof = block_proof or [p.hex() for p in merkle.inclusion_proof(block_leaves[n], log)]
            by_value.setdefault(rec["value"], []).append({
                "entry": entry_json(rec, (first_block_id + n) * 2 ** 24 + position, at),
                "entry_data": datas[position].hex(), "entry_index": position, "block_size": len(records),
                "entry_proof": [p.hex() for p in merkle.inclusion_proof(position, entry_leaves)],
                "block_data": data.hex(), "block_index": block_leaves[n], "block_proof": list(block_proof)})
    checkpoint = sign_checkpoint(key, len(leaves), root, created_at)
    bundle = {"format": FORMAT, "checkpoint": checkpoint,
              "receipts": [r for v in sorted(by_value) for r in by_value[v]], "pending": list(pending or []),
              "next": None}
    return Fixture(key=key, blocks=blocks, leaves=leaves, block_leaves=block_leaves, bundle=bundle,
                   checkpoint=dict(checkpoint), public_key_pem=public_pem(key), created_at=created_at)
