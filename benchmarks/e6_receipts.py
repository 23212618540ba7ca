"""E6: the cost of receipts at scale (docs/receipts.md, docs/quality-targets.md#performance).

For n = 10^5 and 10^6 values of one categorical attribute, on PostgreSQL, with E3's set-up (chains stored at
0.1 .. 1.0, ``benchmarks.e3_purchase._setup``, itself ``benchmarks.e2_extension``'s values and the Celery task
``extend_chains``), each round times, side by side, in this order:

(a) **the purchase** (the reference): one purchase of every value at epsilon 0.35 through the service path,
    ``purchase_claim`` + ``purchase_execute`` (E3's ``_run_purchase``, the owners' settlement it enqueues held
    back as in E3), checked as E3 checks it.  It appends one ledger block of n chain releases.
(b) **the checkpoint that covers it**: ``accounts.ledger.checkpoints.checkpoint_make()`` appending that block's leaf:
    reading the block's n entries a window of 65,536 at a time (``block_tree``: ``records_at``),
    re-hashing the block (the records laid out by ``ledger.canonical_records``), hashing every entry and the roots
    of its chunks of 2,048 (``chunk_roots``), the log's root, the signature, the
    leaf row.  Reported as a ratio to (a): what the checkpoint task pays for a purchase, relative to the purchase.
    It must append exactly one leaf, for that block, of n entries.
(c) **receipts**: ``accounts.ledger.receipts.receipts_bundle(value_ids=...)`` for 100 values drawn at random (fixed
    seed) from the attribute (best of ``E6_BUNDLE_REPEAT`` calls), and for each of those values alone (one call
    per value: the per-request latency; median, 90th percentile and max over the 100).  A receipt's entry proof
    reads one chunk of 2,048 entries whatever n is, so neither should grow with n: the two sizes are printed side
    by side with the ratio 10^6 / 10^5.  The 100 values fall into fewer distinct chunks at 10^5 (49 chunks in
    all) than at 10^6 (489), and the bundle reads each chunk once, so the bundle is expected to cost more at
    10^6 by about that ratio of chunks read: the chunks read are reported, and the seconds per chunk.

Before (b) and before (c) the tables just written are analyzed and the server checkpointed (``CHECKPOINT``), so
neither pays for the writes before it and the planner has the ledger tables' statistics (untimed).

Correctness, not timed, every round: every receipt of the 100-value bundle verifies with ``accounts.ledger.merkle``
alone -- the entry data (decoded from its bytes: the value, a chain release of epsilon 0.35 by this purchase,
losses 0 -> 0.35, ceiling 1.0) is leaf ``entry_index`` of a tree of ``block_size`` = n leaves whose root is the
entries root inside ``block_data`` (which names the purchase's block and n entries), and ``block_data`` is leaf
``block_index`` of the signed checkpoint's tree -- the checkpoint's signature verifies (``accounts.ledger.signing``),
nothing is pending, a receipt with one byte of its entry changed does NOT verify, and each single-value call
answers exactly the receipt the bundle holds for that value.  So the benchmark cannot time something broken.

Where the time goes: the timed checkpoint runs with ``perf_counter`` probes around the module functions
``checkpoint_make`` calls (``records_at``, ``ledger.canonical_records``, ``chunk_roots`` and within it
``entry_leaf_hashes``, ``log_leaf_hashes``, ``ledger_key.sign``; the service code is not touched)
and a Django ``execute_wrapper`` splitting ``records_at`` into its SQL (server, transfer) and the rest (psycopg
parsing the ``bigint[]`` arrays into Python lists, numpy filling the records); one extra call of the 100-value
bundle per round runs with probes too (``receipts._entry_proofs``, ``records_at``, ``receipts._log_tree``).

Memory: after the rounds of each n the checkpoint rows are cleared and the same checkpoint is made once more,
untimed, in a fresh child process (``python -m benchmarks.e6_receipts --checkpoint-child``: Django on the same
database, no migration), which reports its peak resident set size (``VmHWM`` of ``/proc/self/status``) and its
``VmRSS`` just before ``checkpoint_make`` (E2's method); it must find the same root as the rounds did.

State between rounds. A checkpoint covers a block once, and every round must cover a block of n entries, so each
round starts from the state right after the set-up, which writes no ledger rows (checked): the chains and budgets
are put back as E3 does (``e3_purchase._reset``) and the ledger and its checkpoint log are emptied with
``TRUNCATE`` of ``LEDGER_TABLES`` (the cosignatures, stored tiles, checkpoint log and ledger) ``RESTART IDENTITY``.
The append-only triggers of these tables are row-level ``BEFORE UPDATE OR DELETE`` triggers, which ``TRUNCATE``
does not fire, so no trigger is disabled; this is done only in the benchmark's own database. The earlier rounds'
purchase and money rows stay (a fresh buyer per round, as in E3). So every round does the same work: a purchase
appending block 1 at the head of an empty shard, a checkpoint of tree size 1, and receipts against it. The log
therefore holds one leaf: the block-proof side of a receipt (the log tree, built once per checkpoint and cached) is
not what this measures; the entry side, which depends on the block's size n, is.

Uses a dedicated database ``ldpbench_e6`` (created, migrated and dropped at the end) on the server of
``E6_POSTGRES_URL``, ``E3_POSTGRES_URL``, ``E2_POSTGRES_URL`` or ``DATABASE_URL`` (default
postgresql://postgres@127.0.0.1:5432/).

Run: ``python -m benchmarks e6``; figures go to ``benchmarks/results/e6_receipts_<date>_<machine tag>.json``
(tag: ``E6_MACHINE_TAG``, default a word of the CPU model; a run of other sizes than the default adds them,
e.g. ``..._1e5.json``).  Quicker: ``E6_N=1e5 E6_ROUNDS=2 python -m benchmarks e6``.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from urllib.parse import urlsplit

from . import _common
from ._postgres import admin, checkpoint, server_url, setup_django, with_db
from .e2_extension import _rss_kib  # the same /proc/self/status reader as E2's memory figure

NAME = "e6_receipts"
DB_NAME = "ldpbench_e6"
DEFAULT_N = "1e5,1e6"
N_VALUES = tuple(int(float(x)) for x in os.environ.get("E6_N", DEFAULT_N).split(","))
DEFAULT_ROUNDS = {10**5: 3, 10**6: 2}
ROUNDS = {n: int(os.environ.get("E6_ROUNDS", DEFAULT_ROUNDS.get(n, 2))) for n in N_VALUES}
SAMPLE = 100  # values whose receipts are fetched
SEED = 20261126  # which values (set-up only)
BUNDLE_REPEAT = int(os.environ.get("E6_BUNDLE_REPEAT", "3"))
FLAT_FACTOR = 1.5  # "does not grow with n": one value's receipt latency at the largest n <= 1.5x the smallest's
LINEAR_FACTOR = 1.5  # the checkpoint's time per entry at the largest n <= 1.5x the smallest's
LEDGER_TABLES = ("accounts_ledgercosignature, accounts_ledgertile, accounts_ledgercheckpointleaf, "
                 "accounts_ledgercheckpoint, accounts_ledgerrelease, accounts_ledgerevent, accounts_ledgerhead, "
                 "accounts_ledgerblock")
CHILD_MARK = "E6-CHECKPOINT-CHILD "


# --------------------------------------------------------------------------- state

def _ledger_rows() -> dict:
    from django.db import connection

    out = {}
    with connection.cursor() as c:
        for table in LEDGER_TABLES.split(", "):
            c.execute(f"SELECT count(*) FROM {table}")
            out[table] = c.fetchone()[0]
    return out


def _clear_ledger() -> None:
    """The ledger and its checkpoint log emptied (module doc: TRUNCATE fires no row-level trigger)."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(f"TRUNCATE {LEDGER_TABLES} RESTART IDENTITY")


def _clear_checkpoints() -> None:
    """Only the checkpoint log emptied: every block is uncovered again."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute("TRUNCATE accounts_ledgercosignature, accounts_ledgertile, accounts_ledgercheckpointleaf, "
                  "accounts_ledgercheckpoint RESTART IDENTITY")


def _settle_tables(tables: str) -> None:
    """Untimed, before a timed step: the planner's statistics of the tables just written, dirty pages flushed."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(f"ANALYZE {tables}")
    checkpoint()


# --------------------------------------------------------------------------- probes

class _Probes:
    """``perf_counter`` probes around module functions (outermost calls of each label; ``nested`` labels are
    inside another probed function and reported apart), and the SQL run inside ``records_at``."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.nested: set[str] = set()
        self._undo = []
        self._depth: dict[str, int] = {}
        self._in_records = 0

    def wrap(self, module, name: str, label: str, *, nested: bool = False) -> None:
        original = getattr(module, name)

        def timed(*args, **kwargs):
            depth = self._depth.get(label, 0)
            self._depth[label] = depth + 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._depth[label] = depth
                if depth == 0:
                    self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - start

        setattr(module, name, timed)
        self._undo.append((module, name, original))
        if nested:
            self.nested.add(label)

    def records_sql(self, records_label: str, sql_label: str):
        """An ``execute_wrapper`` adding the time of the SQL run while ``records_label`` runs to ``sql_label``."""
        self.nested.add(sql_label)

        def wrapper(execute, sql, params, many, context):
            if not self._depth.get(records_label):
                return execute(sql, params, many, context)
            start = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                self.seconds[sql_label] = self.seconds.get(sql_label, 0.0) + time.perf_counter() - start

        return wrapper

    def restore(self) -> None:
        for module, name, original in reversed(self._undo):
            setattr(module, name, original)
        self._undo.clear()


READ = "read entries (records_at)"
READ_SQL = "  of which SQL: server + transfer"
READ_REST = "  of which parse arrays + fill records"
REHASH = "block hash records (ledger.canonical_records)"
TREE = "entry tree (chunk_roots)"
LEAVES = "  of which entry hashes (entry_leaf_hashes)"
ROOTS = "  of which chunk roots + root (merkle.root)"
LOG = "log leaf hashes (log_leaf_hashes)"
SIGN = "sign (ledger_key.sign)"
OTHER = "other (uncovered blocks, heights, log root, leaf row, commit)"


def _checkpoint_probed() -> tuple[float, object, dict]:
    """``checkpoint_make()`` timed, with its phases."""
    from django.db import connection

    from accounts.ledger import checkpoints, leaves
    from accounts.ledger import signing as ledger_key
    from accounts.ledger.checkpoints import checkpoint_make

    pr = _Probes()
    # each function wrapped where its caller looks it up (block_tree in leaves, checkpoint_make in checkpoints)
    pr.wrap(leaves, "records_at", READ)
    pr.wrap(leaves, "canonical_records", REHASH)
    pr.wrap(leaves, "chunk_roots", TREE)
    pr.wrap(leaves, "entry_leaf_hashes", LEAVES, nested=True)
    pr.wrap(checkpoints, "log_leaf_hashes", LOG)
    pr.wrap(ledger_key, "sign", SIGN)
    try:
        with connection.execute_wrapper(pr.records_sql(READ, READ_SQL)):
            start = time.perf_counter()
            cp = checkpoint_make()
            seconds = time.perf_counter() - start
    finally:
        pr.restore()
    s = pr.seconds
    phases = {k: s.get(k, 0.0) for k in (READ, READ_SQL)}
    phases[READ_REST] = s.get(READ, 0.0) - s.get(READ_SQL, 0.0)
    phases.update({REHASH: s.get(REHASH, 0.0), TREE: s.get(TREE, 0.0), LEAVES: s.get(LEAVES, 0.0),
                   ROOTS: s.get(TREE, 0.0) - s.get(LEAVES, 0.0), LOG: s.get(LOG, 0.0), SIGN: s.get(SIGN, 0.0)})
    phases[OTHER] = seconds - sum(v for k, v in phases.items() if not k.startswith("  "))
    return seconds, cp, phases


R_PROOFS = "entry proofs (receipts._entry_proofs)"
R_CHUNKS = "  of which read chunks (records_at)"
R_LOG = "log tree + block proofs (receipts._log_tree)"
R_OTHER = "other (checkpoint, entries query, leaves query, receipts as JSON)"


def _bundle_probed(value_ids) -> dict:
    from accounts.ledger import receipts

    pr = _Probes()
    pr.wrap(receipts, "_entry_proofs", R_PROOFS)
    pr.wrap(receipts, "records_at", R_CHUNKS, nested=True)
    pr.wrap(receipts, "_log_tree", R_LOG)
    try:
        start = time.perf_counter()
        receipts.receipts_bundle(value_ids=value_ids)
        seconds = time.perf_counter() - start
    finally:
        pr.restore()
    phases = {k: pr.seconds.get(k, 0.0) for k in (R_PROOFS, R_CHUNKS, R_LOG)}
    phases[R_OTHER] = seconds - phases[R_PROOFS] - phases[R_LOG]
    return {"seconds": seconds, "phases": phases}


# --------------------------------------------------------------------------- correctness (untimed)

# docs/receipts.md#entry-data and #block-leaf-data-135-bytes: new blocks are version 2 (entries blinded by their key)
ENTRY_MARKER = b"ldpmarket-ledger-entry-leaf-v2\x00"  # then the entry's 32-byte key, then its 16 int64
BLOCK_MARKER = b"ldpmarket-ledger-block-leaf-v2\x00"
ENTRY_KEY = 32


def _ints(data: bytes, count: int) -> list[int]:
    return [int.from_bytes(data[8 * i:8 * i + 8], "little", signed=True) for i in range(count)]


def _verify(bundle: dict, value_ids: list[int], *, n: int, purchase_id: int, block_id: int, epsilon_micro: int,
            ceiling_micro: int) -> None:
    """Every receipt proven with ``accounts.ledger.merkle`` from the bytes alone (module doc); raises when one is
    not."""
    from accounts.ledger import merkle
    from accounts.ledger import signing as ledger_key

    cp = bundle["checkpoint"]
    if bundle["format"] != "ldpmarket-receipts-v1" or cp is None or bundle["pending"]:
        raise RuntimeError(f"receipts: format {bundle['format']}, checkpoint {cp}, pending {bundle['pending'][:3]}")
    statement = cp["statement"].encode()
    if (not ledger_key.verify(statement, cp["signature"])
            or cp["statement"].split("\n")[1:3] != [str(cp["tree_size"]), cp["root_hash"]]):
        raise RuntimeError("receipts: the checkpoint's signature or statement does not verify")
    root = bytes.fromhex(cp["root_hash"])
    got = sorted(r["entry"]["value"] for r in bundle["receipts"])
    if got != sorted(value_ids):
        raise RuntimeError(f"receipts: {len(got)} receipts, expected one for each of {len(value_ids)} values")
    for r in bundle["receipts"]:
        entry, block = bytes.fromhex(r["entry_data"]), bytes.fromhex(r["block_data"])
        if len(entry) != 159 + ENTRY_KEY or not entry.startswith(ENTRY_MARKER):
            raise RuntimeError(f"receipt of value {r['entry']['value']}: entry data of {len(entry)} bytes")
        (value, kind, eps, purchase, chain_before, chain_after, oneshot_before, oneshot_after, ceiling,
         *_schedule, guarantee) = _ints(entry[len(ENTRY_MARKER) + ENTRY_KEY:], 16)
        want = (r["entry"]["value"], 0, epsilon_micro, purchase_id, 0, epsilon_micro, 0, 0, ceiling_micro, 0)
        have = (value, kind, eps, purchase, chain_before, chain_after, oneshot_before, oneshot_after, ceiling,
                guarantee)
        if have != want or r["entry"]["purchase"] != purchase_id or r["entry"]["epsilon"] != f"{eps / 1e6:.6f}":
            raise RuntimeError(f"receipt entry {have} (shown {r['entry']}), expected {want}")
        if len(block) != 135 or not block.startswith(BLOCK_MARKER):
            raise RuntimeError(f"receipt of value {value}: block data of {len(block)} bytes")
        _shard, _height, leaf_block, count, _created = _ints(block[len(BLOCK_MARKER):], 5)
        entries_root = block[len(BLOCK_MARKER) + 40 + 32:]
        if (leaf_block, count, r["block_size"]) != (block_id, n, n):
            raise RuntimeError(f"receipt's block {leaf_block} of {count} entries (size {r['block_size']}), "
                               f"expected block {block_id} of {n}")
        if r["entry"]["id"] != block_id * 2**24 + r["entry_index"]:
            raise RuntimeError(f"receipt entry id {r['entry']['id']} is not at position {r['entry_index']}")
        if not merkle.verify_inclusion(r["entry_index"], r["block_size"], merkle.leaf_hash(entry),
                                       [bytes.fromhex(p) for p in r["entry_proof"]], entries_root):
            raise RuntimeError(f"receipt of value {value}: the entry is not in its block's entries root")
        if not merkle.verify_inclusion(r["block_index"], cp["tree_size"], merkle.leaf_hash(block),
                                       [bytes.fromhex(p) for p in r["block_proof"]], root):
            raise RuntimeError(f"receipt of value {value}: the block leaf is not in the checkpoint's root")
    # the check is not vacuous: one changed byte of an entry fails it
    r = bundle["receipts"][0]
    forged = bytearray.fromhex(r["entry_data"])
    forged[len(ENTRY_MARKER) + ENTRY_KEY + 16] ^= 1  # the epsilon's lowest byte
    entries_root = bytes.fromhex(r["block_data"])[-32:]
    if merkle.verify_inclusion(r["entry_index"], r["block_size"], merkle.leaf_hash(bytes(forged)),
                               [bytes.fromhex(p) for p in r["entry_proof"]], entries_root):
        raise RuntimeError("a forged entry verified: the check is vacuous")


# --------------------------------------------------------------------------- one round

def _round(attribute_id: int, n: int, sample: list[int]) -> dict:
    from django.conf import settings

    from accounts.ledger.receipts import receipts_bundle
    from accounts.models import LedgerCheckpointLeaf, LedgerRelease

    from . import e3_purchase as e3

    e3._reset()  # chains and budgets as after the set-up (vacuumed, checkpointed)
    _clear_ledger()
    if any(_ledger_rows().values()):
        raise RuntimeError(f"ledger not empty before the round: {_ledger_rows()}")
    checkpoint()

    # (a) the purchase
    run = e3._run_purchase(attribute_id, n, probes=False)
    e3._check(attribute_id, n, run["purchase_id"])
    blocks = sorted(set(LedgerRelease.objects.filter(purchase_id=run["purchase_id"]).values_list("block_id",
                                                                                                  flat=True)))
    if len(blocks) != 1:
        raise RuntimeError(f"the purchase wrote the ledger blocks {blocks}, expected one")
    block_id = blocks[0]

    # (b) the checkpoint covering its block
    _settle_tables("accounts_ledgerblock, accounts_ledgerrelease, accounts_ledgerhead")
    cp_seconds, cp, phases = _checkpoint_probed()
    leaves = list(LedgerCheckpointLeaf.objects.values_list("block_id", "entry_count", "chunk_roots"))
    chunks = -(-n // 2048)
    if (cp is None or cp.appended != 1 or cp.tree_size != 1 or len(leaves) != 1 or leaves[0][:2] != (block_id, n)
            or len(bytes(leaves[0][2])) != 32 * chunks):
        raise RuntimeError(f"the checkpoint appended {getattr(cp, 'appended', None)} leaves {leaves}; expected one, "
                           f"for block {block_id} of {n} entries with {chunks} chunk roots")

    # (c) receipts
    _settle_tables("accounts_ledgercheckpointleaf, accounts_ledgercheckpoint")
    receipts_bundle(value_ids=sample[:1])  # the log tree of this checkpoint built and cached, as a server would
    bundle_seconds = []
    for _ in range(max(1, BUNDLE_REPEAT)):
        start = time.perf_counter()
        bundle = receipts_bundle(value_ids=sample)
        bundle_seconds.append(time.perf_counter() - start)
    single = []
    for v in sample:
        start = time.perf_counter()
        one = receipts_bundle(value_ids=[v])
        single.append(time.perf_counter() - start)
        mine = [r for r in bundle["receipts"] if r["entry"]["value"] == v]
        if one["receipts"] != mine or one["pending"] or one["checkpoint"] != bundle["checkpoint"]:
            raise RuntimeError(f"the receipts of value {v} alone differ from the bundle's")
    probed = _bundle_probed(sample)

    # correctness, untimed
    _verify(bundle, sample, n=n, purchase_id=run["purchase_id"], block_id=block_id,
            epsilon_micro=int(Decimal(e3.EPSILON) * 1_000_000), ceiling_micro=int(Decimal(e3.CEILING) * 1_000_000))
    chunks_read = len({r["entry_index"] // 2048 for r in bundle["receipts"]})
    if settings.LDP_CHECKPOINT_MAX_ENTRIES < n:
        raise RuntimeError("LDP_CHECKPOINT_MAX_ENTRIES is below n: one checkpoint would not cover the block")
    return {"purchase_seconds": run["seconds"], "purchase_id": run["purchase_id"], "block_id": block_id,
            "checkpoint_seconds": cp_seconds, "checkpoint_root": cp.root_hash, "checkpoint_phases": phases,
            "bundle_seconds": min(bundle_seconds), "bundle_seconds_all": bundle_seconds,
            "single_seconds": single, "single_median": statistics.median(single),
            "single_p90": sorted(single)[int(0.9 * len(single)) - 1], "single_max": max(single),
            "chunks_read": chunks_read, "bundle_probed": probed}


# --------------------------------------------------------------------------- fresh process (memory)

def _checkpoint_child(db_url: str, name: str) -> None:
    """In a fresh process (``--checkpoint-child DB_URL NAME``): Django on the benchmark's database (no migration),
    ``checkpoint_make`` once; one JSON line (after ``CHILD_MARK``): leaves appended, root, seconds, VmRSS before
    and VmHWM at the end."""
    setup_django(db_url, name, migrate=False)
    from django.db import connection

    from accounts.ledger.checkpoints import checkpoint_make

    connection.ensure_connection()
    gc.collect()
    rss_before = _rss_kib("VmRSS")
    start = time.perf_counter()
    cp = checkpoint_make()
    seconds = time.perf_counter() - start
    connection.close()
    print(CHILD_MARK + json.dumps({"appended": cp.appended, "tree_size": cp.tree_size, "root_hash": cp.root_hash,
                                   "seconds": seconds, "rss_before_kib": rss_before, "rss_end_kib": _rss_kib("VmRSS"),
                                   "rss_peak_kib": _rss_kib("VmHWM")}), flush=True)


def _checkpoint_fresh_process(expected_root: str) -> dict:
    from django.db import connection

    _clear_checkpoints()
    checkpoint()
    settings_dict = connection.settings_dict
    connection.close()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.e6_receipts", "--checkpoint-child",
                           os.environ["DATABASE_URL"], settings_dict["NAME"]],
                          cwd=root, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(CHILD_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the fresh-process checkpoint failed (exit {proc.returncode}):\n{proc.stdout}\n"
                           f"{proc.stderr}")
    child = json.loads(lines[-1][len(CHILD_MARK):])
    if child["appended"] != 1 or child["tree_size"] != 1 or child["root_hash"] != expected_root:
        raise RuntimeError(f"the fresh-process checkpoint {child}; expected one leaf and the root {expected_root}")
    child["checkpoint_share_kib"] = child["rss_peak_kib"] - child["rss_before_kib"]
    return child


# --------------------------------------------------------------------------- one size

def measure(n: int, rounds: int) -> dict:
    from market.models import Value

    from . import e3_purchase as e3

    t0 = time.perf_counter()
    _clear_ledger()  # an earlier size's last block (its release rows went with that size's users)
    attribute_id = e3._setup(n)
    if any(_ledger_rows().values()):  # the reset to an empty ledger is the reset to the set-up's state
        raise RuntimeError(f"the set-up wrote ledger rows: {_ledger_rows()}")
    ids = sorted(Value.objects.filter(attribute_id=attribute_id).values_list("id", flat=True))
    sample = sorted(random.Random(SEED).sample(ids, SAMPLE))
    del ids
    print(f"  set up n={_common.pow10(n)}: values, budgets, chains extended to {e3.CEILING} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    runs = []
    for r in range(rounds):
        run = _round(attribute_id, n, sample)
        runs.append(run)
        print(f"  n={_common.pow10(n)} round {r + 1}/{rounds}: purchase {run['purchase_seconds']:.2f} s, checkpoint "
              f"{run['checkpoint_seconds']:.2f} s ({run['checkpoint_seconds'] / run['purchase_seconds']:.2f}x), "
              f"receipts of {SAMPLE} values {1e3 * run['bundle_seconds']:.1f} ms ({run['chunks_read']} chunks), "
              f"of one value median {1e3 * run['single_median']:.2f} ms; all {SAMPLE} receipts verified", flush=True)
    fresh = _checkpoint_fresh_process(runs[-1]["checkpoint_root"])
    print(f"  n={_common.pow10(n)} fresh process (untimed): checkpoint peak RSS "
          f"{fresh['rss_peak_kib'] / 1024:.0f} MiB, {fresh['rss_before_kib'] / 1024:.0f} MiB before it, its share "
          f"{fresh['checkpoint_share_kib'] / 1024:.0f} MiB ({fresh['seconds']:.2f} s)", flush=True)
    purchase = min(r["purchase_seconds"] for r in runs)
    best_cp = min(runs, key=lambda r: r["checkpoint_seconds"])
    best_single = min(runs, key=lambda r: r["single_median"])
    bundle = min(r["bundle_seconds"] for r in runs)
    chunks_read = runs[0]["chunks_read"]
    return {
        "n": n, "rounds": rounds, "attribute_id": attribute_id,
        "purchase_seconds": purchase, "purchase_us_per_value": 1e6 * purchase / n,
        "checkpoint_seconds": best_cp["checkpoint_seconds"],
        "checkpoint_us_per_entry": 1e6 * best_cp["checkpoint_seconds"] / n,
        "checkpoint_ratio_to_purchase": best_cp["checkpoint_seconds"] / purchase,
        "checkpoint_ratio_to_purchase_per_round": [r["checkpoint_seconds"] / r["purchase_seconds"] for r in runs],
        "checkpoint_phases_best_round": best_cp["checkpoint_phases"],
        "receipts_100_seconds": bundle, "receipts_100_chunks_read": chunks_read,
        "receipts_100_ms_per_chunk_read": 1e3 * bundle / chunks_read,
        "receipts_100_phases_probed_call": min((r["bundle_probed"] for r in runs), key=lambda p: p["seconds"]),
        "receipts_1_median_seconds": best_single["single_median"], "receipts_1_p90_seconds": best_single["single_p90"],
        "receipts_1_max_seconds": best_single["single_max"],
        "receipts_1_seconds_best_round": best_single["single_seconds"],
        "fresh_process": fresh,
        "per_round": [{k: v for k, v in r.items() if k not in ("single_seconds", "bundle_probed")} for r in runs],
        "sample_values": sample,
    }


# --------------------------------------------------------------------------- main

def _machine_tag(info: dict) -> str:
    tag = os.environ.get("E6_MACHINE_TAG")
    if tag:
        return re.sub(r"[^a-z0-9-]+", "-", tag.lower())
    words = [w for w in re.findall(r"[a-z0-9]+", info["cpu_model"].lower())
             if w not in {"amd", "intel", "r", "tm", "cpu", "processor", "genuine", "core"}]
    return words[0] if words else "machine"


def _write(result: dict, info: dict) -> str:
    suffix = "" if os.environ.get("E6_N", DEFAULT_N) == DEFAULT_N else "_" + "_".join(
        f"1e{len(str(n)) - 1}" if str(n).strip("0") == "1" else str(n) for n in N_VALUES)
    path = _common.RESULTS_DIR / f"{NAME}_{info['date'][:10]}_{_machine_tag(info)}{suffix}.json"
    _common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"benchmark": NAME, **result}, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return str(path)


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    server = server_url("E6_POSTGRES_URL", "E3_POSTGRES_URL", "E2_POSTGRES_URL")
    db_url = with_db(server, DB_NAME)
    print(f"E6 receipts on PostgreSQL (database {DB_NAME} on {urlsplit(server).hostname}): per round, a purchase "
          f"of n values (the reference), checkpoint_make() covering its block of n entries, the receipts of "
          f"{SAMPLE} random values and of each alone; rounds: "
          f"{', '.join(f'{_common.pow10(n)}: {ROUNDS[n]}' for n in N_VALUES)}", flush=True)
    admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    admin(server, f"CREATE DATABASE {DB_NAME}")
    results = []
    try:
        setup_django(db_url, DB_NAME)
        from django.db import connection

        with connection.cursor() as c:
            c.execute("SELECT version()")
            pg_version = c.fetchone()[0]
        for n in N_VALUES:
            results.append(measure(n, ROUNDS[n]))
    finally:
        from django.core.exceptions import ImproperlyConfigured
        from django.db import connections

        with contextlib.suppress(ImproperlyConfigured):  # Django never set up
            connections.close_all()
        admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    print(flush=True)

    def ms(s):
        return f"{1e3 * s:.1f}"

    small, big = results[0], results[-1]
    rows = [
        ["purchase (reference) s", *(f"{r['purchase_seconds']:.2f}" for r in results)],
        ["purchase us/value", *(f"{r['purchase_us_per_value']:.1f}" for r in results)],
        ["checkpoint_make s", *(f"{r['checkpoint_seconds']:.2f}" for r in results)],
        ["checkpoint us/entry", *(f"{r['checkpoint_us_per_entry']:.2f}" for r in results)],
        ["checkpoint / purchase", *(f"{r['checkpoint_ratio_to_purchase']:.2f}x" for r in results)],
        ["checkpoint peak RSS, fresh process MiB",
         *(f"{r['fresh_process']['rss_peak_kib'] / 1024:.0f}" for r in results)],
        ["  of which before checkpoint_make MiB",
         *(f"{r['fresh_process']['rss_before_kib'] / 1024:.0f}" for r in results)],
        [f"receipts of {SAMPLE} values ms", *(ms(r["receipts_100_seconds"]) for r in results)],
        ["  chunks of 2,048 read", *(str(r["receipts_100_chunks_read"]) for r in results)],
        ["  ms per chunk read", *(f"{r['receipts_100_ms_per_chunk_read']:.2f}" for r in results)],
        ["receipts of one value, median ms", *(f"{1e3 * r['receipts_1_median_seconds']:.2f}" for r in results)],
        ["receipts of one value, p90 ms", *(f"{1e3 * r['receipts_1_p90_seconds']:.2f}" for r in results)],
        ["receipts of one value, max ms", *(f"{1e3 * r['receipts_1_max_seconds']:.2f}" for r in results)],
    ]
    ratio_keys = [None, "purchase_us_per_value", None, "checkpoint_us_per_entry", "checkpoint_ratio_to_purchase",
                  None, None, "receipts_100_seconds", "receipts_100_chunks_read", "receipts_100_ms_per_chunk_read",
                  "receipts_1_median_seconds", "receipts_1_p90_seconds", "receipts_1_max_seconds"]
    if len(results) > 1:
        for row, key in zip(rows, ratio_keys):
            row.append(f"x{big[key] / small[key]:.2f}" if key else "")
    header = ["best of the rounds"] + [_common.pow10(r["n"]) for r in results]
    if len(results) > 1:
        header.append(f"{_common.pow10(big['n'])} / {_common.pow10(small['n'])}")
    _common.print_table(header, rows, title=f"E6 receipts: a purchase of n values, the checkpoint covering its "
                                            f"block, receipts against it; PostgreSQL {pg_version.split()[1]}")
    phase_names = list(small["checkpoint_phases_best_round"])
    _common.print_table(
        ["checkpoint phase (best round)"] + [_common.pow10(r["n"]) for r in results]
        + [f"us/entry at {_common.pow10(big['n'])}"],
        [[p] + [f"{r['checkpoint_phases_best_round'][p]:.3f} s "
                f"({100 * r['checkpoint_phases_best_round'][p] / r['checkpoint_seconds']:.0f}%)" for r in results]
         + [f"{1e6 * big['checkpoint_phases_best_round'][p] / big['n']:.2f}"] for p in phase_names],
        title="Where the checkpoint's time goes (perf_counter probes around the functions checkpoint_make calls)")
    r_names = list(small["receipts_100_phases_probed_call"]["phases"])
    _common.print_table(
        [f"receipts of {SAMPLE} values, phase (probed call)"] + [_common.pow10(r["n"]) for r in results],
        [[p] + [f"{1e3 * r['receipts_100_phases_probed_call']['phases'][p]:.1f} ms" for r in results]
         for p in r_names],
        title="Where the receipts' time goes (one extra probed call per round, the fastest kept)")

    targets = {}
    if len(results) > 1:
        flat = big["receipts_1_median_seconds"] / small["receipts_1_median_seconds"]
        linear = big["checkpoint_us_per_entry"] / small["checkpoint_us_per_entry"]
        targets = {"receipts_1_growth": flat, "receipts_1_flat": flat <= FLAT_FACTOR,
                   "checkpoint_per_entry_growth": linear, "checkpoint_linear": linear <= LINEAR_FACTOR}
        print("Targets (docs/quality-targets.md#performance E6):")
        print(f"{'PASS' if targets['receipts_1_flat'] else 'FAIL':4}  receipts of one value do not grow with n   "
              f"{_common.pow10(small['n'])} -> {_common.pow10(big['n'])}: median x{flat:.2f} "
              f"({1e3 * small['receipts_1_median_seconds']:.2f} -> {1e3 * big['receipts_1_median_seconds']:.2f} ms; "
              f"pass if <= x{FLAT_FACTOR:g})")
        print(f"{'PASS' if targets['checkpoint_linear'] else 'FAIL':4}  checkpoint linear in n                   "
              f"{_common.pow10(small['n'])} -> {_common.pow10(big['n'])}: time per entry x{linear:.2f} "
              f"({small['checkpoint_us_per_entry']:.2f} -> {big['checkpoint_us_per_entry']:.2f} us; pass if <= "
              f"x{LINEAR_FACTOR:g})")
    for r in results:
        print(f"REF   n={_common.pow10(r['n'])}: the checkpoint of a purchase's block costs "
              f"{r['checkpoint_ratio_to_purchase']:.2f}x the purchase (paid by the checkpoint task, not the buyer)")
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "n_values": list(N_VALUES), "rounds": {str(k): v for k, v in ROUNDS.items()}, "sample": SAMPLE,
            "sample_seed": SEED, "bundle_repeat": BUNDLE_REPEAT, "postgresql": pg_version,
            "purchase": "benchmarks.e3_purchase set-up and _run_purchase: purchase_claim + purchase_execute of every "
                        "value at epsilon 0.35 (bridged), settlement held back; checked as E3 checks it",
            "checkpoint": "accounts.ledger.checkpoints.checkpoint_make() right after the purchase: one leaf, the "
                          "purchase's block of n entries, tree size 1",
            "receipts": "accounts.ledger.receipts.receipts_bundle(value_ids=...) of 100 random values (best of "
                        "bundle_repeat calls) and of each value alone; the checkpoint's log tree built once before",
            "verified_untimed": "every receipt of the 100 by accounts.ledger.merkle (entry in the entries root of "
                                "block_data, block leaf in the signed root), the signature, the entry's decoded "
                                "fields, a forged entry refused, single-value receipts equal to the bundle's",
            "before_timed_steps": "ANALYZE of the tables just written, CHECKPOINT",
            "reset_before_each_round": "e3_purchase._reset (chains, budgets; VACUUM ANALYZE, CHECKPOINT) and "
                                       "TRUNCATE " + LEDGER_TABLES + " RESTART IDENTITY (no trigger disabled: "
                                       "the append-only triggers are row-level UPDATE/DELETE triggers)",
            "fresh_process": "checkpoint rows truncated, checkpoint_make once more in a child process: VmHWM, "
                             "VmRSS before; same root as the rounds",
            "flat_factor": FLAT_FACTOR, "linear_factor": LINEAR_FACTOR,
        },
        "results": results,
        "targets": targets,
        "load_average_end": list(os.getloadavg()),
        "elapsed_seconds": elapsed,
    }
    path = _write(result, info)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--checkpoint-child"]:
        _checkpoint_child(sys.argv[2], sys.argv[3])
    else:
        main()
