"""E2: chain extension in the database (docs/quality-targets.md#performance).

Value-steps extended per second by the Celery task ``market.tasks.extend_chains`` (run synchronously with
``apply``; on PostgreSQL its reads take the binary COPY path of ``market.chains.pgcopy``) for n = 10^5, 10^6 and 10^7
values of one categorical attribute (m = 5), every chain grown by the same number of grid steps (ceilings raised
0.1 -> 1.0: 9 steps), so a run does n * 9 value-steps.  The chains are stored in blocks of
``settings.LDP_CHAIN_BLOCK`` slots, one sealed ``ChainPoint`` row per block and epsilon
(docs/architecture.md#chains-in-blocks).

Beside it, in the same rounds (interleaved; judged by the median round's ratio): the compute floor, the same work
done in memory
-- from numpy arrays already in memory (the sealed inputs and each block's sealed head point row, as they are
stored, loaded untimed before the timing), in batches of ``settings.LDP_EXTENSION_BATCH`` values (whole blocks,
the task's batches: ``market.chains.extension._batches`` as the task reads ahead, starting at a quarter of that and
growing): ``sealing.open_inputs`` on the batch's sealed inputs, ``sealing.open_points`` on each
of its blocks' head rows, and ``market.chains.grow`` over the 9 steps; nothing else (no database, no sealing of
the new points).  Target: the task >= 25% of the floor's rate at every n.

Memory, "bounded": after the timed rounds of each n the chains are restored once more and the task runs ONCE
more, untimed, in a fresh child process (``python -m benchmarks.e2_extension --task-child``: Django set up on the
same database, no migration, ``extend_chains.apply``), which reports its own peak resident set size (``VmHWM`` of
``/proc/self/status``, read just before it exits) and its ``VmRSS`` after the Django set-up, before the task --
so the figure holds neither the set-up's nor the floor's arrays of this benchmark process, and the task's own
share (peak minus that baseline) is visible.  Target: that fresh-process peak <= 1 GiB at the largest n.
``chains_extend`` streams the blocks a batch at a time, so it should not grow with n beyond the list of block
ids.  The in-process high-water mark of the timed runs (reset through ``/proc/self/clear_refs`` just before each
run) is kept in the results as information only: at 10^7 this process already holds ~1 GiB of its own.

Also printed, as information: where the task's time goes (probes around the functions ``_extend_batch`` calls:
the chain lock, the first batch's own read of its values (in the task's thread: nothing runs before it to hide it),
the wait for the values read ahead (``market.chains.extension._read_ahead``: a thread reads batch k + 1 while batch k
grows; that thread's reads are listed beside, as they overlap the rest), the blocks' bitmaps, opening the inputs,
opening the head points, growing, selecting the new points, sealing and writing them; the rest -- transactions,
the block id list, the task -- as 'other').

Set-up (not timed) writes the rows with ``COPY`` instead of ``market.values.services.values_create_many``, which seals
each raw value with its own Fernet token (too slow for 10^7): the mechanism inputs and the first chain points
(one row per block at 0.1, ``sealing.seal_points``) are sealed for real, but one Fernet token (sealed for no
benchmark row, so it opens for none) is reused as every value's ``raw_sealed``, the budgets are written with
their ceilings already raised to 1.0 and no ledger entries are written -- acceptable for this benchmark's
set-up only (extension reads neither).  Before each round the chains are put back to their first point
(``benchmarks._postgres.restore_chains``).

Uses a dedicated PostgreSQL database ``ldpbench`` (created, migrated and dropped at the end) on the server of
``E2_POSTGRES_URL`` or ``DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/``).

Run: ``python -m benchmarks e2``; figures go to ``benchmarks/results/e2_extension.json``.
Quicker: ``E2_N=1e5,1e6 E2_ROUNDS=2 python -m benchmarks e2``.
"""
from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import numpy as np

from . import _common
from ._postgres import admin as _admin
from ._postgres import chain_stats, restore_chains, server_url, setup_django, snapshot_chains
from ._postgres import with_db as _with_db

NAME = "e2_extension"
N_VALUES = tuple(int(float(x)) for x in os.environ.get("E2_N", "1e5,1e6,1e7").split(","))  # E2_N: a quicker run
#: Rounds; each runs the in-memory floor then the task, and the target is judged by the median round's ratio
#: (E2_ROUNDS overrides).
ROUNDS = {n: int(os.environ.get("E2_ROUNDS", 5)) for n in N_VALUES}
#: The floor's work is repeated until it has lasted at least this long, and its time per repetition taken: at 10^5
#: one pass lasts 0.11-0.16 s, too short for the noise of a shared machine to average out.
FLOOR_MIN_SECONDS = 1.0
M = 5
GRID = ("0.1", "0.1", "10")  # start, step, stop
CEILING_START, CEILING_RAISED = "0.1", "1.0"
STEPS = 9  # grid points added per chain: 0.2 .. 1.0
LENGTH = STEPS + 1
TARGET = 0.25  # the task's rate >= this fraction of the in-memory floor's
RSS_LIMIT_KIB = 1024 * 1024  # peak RSS of the task run at the largest n: <= 1 GiB
DB_NAME = "ldpbench"
SEED = 20240126  # set-up data only (true categories, first outputs); every timed draw uses the secure default source
CHUNK_BLOCKS = 512  # set-up and floor loads work on this many blocks at a time (bounded memory at 10^7)

CHILD_MARK = "E2-TASK-CHILD "  # prefix of the JSON line the fresh-process task run prints
INITIAL = "e2_chain_initial"  # snapshot of the chains at their first point (benchmarks._postgres.snapshot_chains)


# --------------------------------------------------------------------------- set-up

def _binary_copy(cursor, table_and_columns: str, columns) -> None:
    from market.chains import pgcopy

    pgcopy.copy_in(cursor, table_and_columns, [pgcopy.binary_rows(columns)])


def _make_values(n: int) -> int:
    """n owners, values, budgets (ceiling 1.0), chain blocks and one sealed point row per block at 0.1, by COPY;
    a snapshot of those chains (``INITIAL``); the attribute id."""
    from django.conf import settings
    from django.db import connection, transaction

    from market.chains import grow as chains
    from market.chains import store as chainstore
    from market.models import Attribute, Dataset
    from market.values import inputs as domain
    from market.values import sealing

    with connection.cursor() as c:
        c.execute("TRUNCATE market_chainpoint, market_chainblock, accounts_budgetaccount, market_value, "
                  "market_attribute, market_dataset, accounts_user RESTART IDENTITY CASCADE")
        c.execute(f"DROP TABLE IF EXISTS {INITIAL}_points, {INITIAL}_blocks")
    dataset = Dataset.objects.create(title=f"E2 benchmark {n}")
    attribute = Attribute.objects.create(dataset=dataset, name="category", kind=Attribute.Kind.CATEGORICAL,
                                         labels=[f"c{i}" for i in range(M)], grid_start=GRID[0],
                                         grid_step=GRID[1], grid_stop=GRID[2])
    capacity = int(settings.LDP_CHAIN_BLOCK)
    n_blocks = -(-n // capacity)
    grid = chains.Grid.of(attribute)
    pbytes = domain.payload_bytes(attribute)
    gen = np.random.default_rng(SEED)
    # ONE Fernet token (sealed for owner 0, so it opens for none of these rows) reused as every raw_sealed:
    # set-up only, for a realistic row size; extension never reads raw values.
    token = sealing.seal_raw("benchmark raw value", owner_id=0, attribute_id=attribute.id)
    with transaction.atomic(), connection.cursor() as c:
        c.execute("CREATE TEMP TABLE e2_stage (id bigint, sealed bytea) ON COMMIT DROP")
        c.execute("CREATE TEMP TABLE e2_blocks (id bigint, size bigint, heads bytea, present bytea, sealed bytea) "
                  "ON COMMIT DROP")
        for b0 in range(0, n_blocks, CHUNK_BLOCKS):  # a chunk of whole blocks at a time
            b1 = min(b0 + CHUNK_BLOCKS, n_blocks)
            lo, hi = b0 * capacity, min(b1 * capacity, n)
            k = hi - lo
            ids = np.arange(lo + 1, hi + 1, dtype=np.int64)  # value i belongs to owner i
            inputs = gen.integers(0, M, size=(k, 1))
            payload = np.zeros((k, pbytes), dtype=np.uint8)
            payload[:, :2] = inputs.astype("<i2").view(np.uint8).reshape(k, 2)
            assert np.array_equal(domain.from_payload(attribute, payload), inputs)
            sealed = np.frombuffer(b"".join(sealing.seal_inputs(ids, np.full(k, attribute.id), payload)),
                                   dtype=np.uint8).reshape(k, -1)
            _binary_copy(c.cursor, "e2_stage (id, sealed)", [ids, sealed])
            first = chains.generate(inputs, np.array([grid.start]), M, None, attribute.draw_divisor)[:, 0, :]
            rows = {"id": [], "size": [], "heads": [], "present": [], "sealed": []}
            for b in range(b0, b1):  # block b (id b + 1) holds values b * capacity + 1 ..
                size = min(capacity, n - b * capacity)
                out = np.full((capacity, attribute.width), -1, dtype=chains.OUT)
                out[:size] = first[b * capacity - lo:b * capacity - lo + size]
                present = chainstore.bitmap(np.arange(capacity) < size)
                heads = np.where(np.arange(capacity) < size, grid.start, 0).astype(chainstore.HEAD)
                rows["id"].append(b + 1)
                rows["size"].append(size)
                rows["heads"].append(np.frombuffer(heads.tobytes(), dtype=np.uint8))
                rows["present"].append(np.frombuffer(present, dtype=np.uint8))
                rows["sealed"].append(np.frombuffer(sealing.seal_points(
                    out, attribute_id=attribute.id, block_id=b + 1, epsilon=grid.start, present=present),
                    dtype=np.uint8))
            _binary_copy(c.cursor, "e2_blocks (id, size, heads, present, sealed)",
                         [np.array(rows["id"], dtype=np.int64), np.array(rows["size"], dtype=np.int64),
                          np.stack(rows["heads"]), np.stack(rows["present"]), np.stack(rows["sealed"])])
            del ids, inputs, payload, sealed, first, rows
        c.execute("INSERT INTO market_chainblock (id, attribute_id, index, capacity, size, heads, revision) "
                  "SELECT id, %s, id - 1, %s, size, heads, 0 FROM e2_blocks ORDER BY id", [attribute.id, capacity])
        c.execute("INSERT INTO market_chainpoint (block_id, attribute_id, epsilon, present, sealed, revision, "
                  "value_key_id) SELECT id, %s, %s, present, sealed, 0, %s FROM e2_blocks ORDER BY id",
                  [attribute.id, grid.start, sealing.newest_key_id()])
        c.execute("INSERT INTO accounts_user (id, password, is_superuser, username, first_name, last_name, "
                  "email, is_staff, is_active, date_joined, role, organisation) "
                  "SELECT id, '!', false, 'e2-owner-' || id, '', '', '', false, true, now(), 'owner', '' "
                  "FROM e2_stage")
        c.execute("INSERT INTO market_value (id, owner_id, attribute_id, raw_sealed, input_sealed, cohort, "
                  "created_at, block_id, slot, value_key_id) SELECT id, id, %s, %s, sealed, 0, now(), "
                  "(id - 1) / %s + 1, (id - 1) %% %s, %s FROM e2_stage",
                  [attribute.id, token, capacity, capacity, sealing.newest_key_id()])
        # Every ceiling already raised (as a schedule or the portal would) from 0.1 to 1.0: 9 grid steps to extend.
        c.execute("INSERT INTO accounts_budgetaccount (value_id, attribute_id, ceiling, chain_loss, oneshot_loss, "
                  "paused, schedule_shape, updated_at) SELECT id, %s, %s, 0, 0, false, '', now() FROM e2_stage",
                  [attribute.id, CEILING_RAISED])
        for table in ("accounts_user", "market_value", "market_chainblock"):
            c.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE accounts_user, market_value, accounts_budgetaccount, market_chainblock, "
                  "market_chainpoint")
    snapshot_chains(INITIAL)
    return attribute.id


def _reset_chains() -> None:
    """Every chain back to its first point (the snapshot ``INITIAL``, vacuumed): each round starts alike."""
    restore_chains(INITIAL, budgets=False)


# --------------------------------------------------------------------------- the floor: the same work in memory

def _load_floor(attribute_id: int) -> dict:
    """What the floor works from, as stored (untimed): per value (in block, slot order) owner, block, slot,
    ceiling and sealed input; per block its head point row (epsilon, bitmap, sealed outputs)."""
    from django.db import connection

    from accounts.epsilon import MICRO
    from market.chains import pgcopy
    from market.models import Attribute, ChainBlock
    from market.values import inputs as domain
    from market.values import sealing

    attribute = Attribute.objects.get(id=attribute_id)
    sealed_bytes = sealing.blocks_for(domain.payload_bytes(attribute)) * 16
    layout = [("owner_id", ">i8"), ("block_id", ">i8"), ("slot", ">i8"), ("ceiling", ">i8"),
              ("sealed", ("u1", (sealed_bytes,)))]
    block_ids = np.array(sorted(ChainBlock.objects.filter(attribute_id=attribute_id).values_list("id", flat=True)),
                         dtype=np.int64)
    parts = []
    with connection.cursor() as c:
        for k in range(0, block_ids.size, CHUNK_BLOCKS):
            chunk = block_ids[k:k + CHUNK_BLOCKS]
            rows = pgcopy.parse_rows(pgcopy.copy_out(
                c.cursor,
                f"SELECT v.owner_id, v.block_id, v.slot::bigint, round(b.ceiling * {MICRO})::bigint, v.input_sealed "
                f"FROM market_value v JOIN accounts_budgetaccount b ON b.value_id = v.id "
                f"WHERE v.attribute_id = %(a)s AND v.block_id BETWEEN %(lo)s AND %(hi)s "
                f"AND v.input_sealed IS NOT NULL ORDER BY v.block_id, v.slot",
                {"a": attribute_id, "lo": int(chunk[0]), "hi": int(chunk[-1])}), layout)
            parts.append({name: (np.ascontiguousarray(rows[name]) if name == "sealed" else rows[name].astype(np.int64))
                          for name in rows.dtype.names})
            del rows
        c.execute("SELECT DISTINCT ON (block_id) block_id, epsilon, present, sealed FROM market_chainpoint "
                  "WHERE attribute_id = %s ORDER BY block_id, epsilon DESC", [attribute_id])
        heads = c.fetchall()
    data = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    del parts
    if [r[0] for r in heads] != block_ids.tolist():
        raise RuntimeError("a block has no point row")
    data["block_ids"] = block_ids
    data["head_eps"] = np.array([r[1] for r in heads], dtype=np.int64)
    data["head_present"] = np.stack([np.frombuffer(bytes(r[2]), dtype=np.uint8) for r in heads])
    data["head_sealed"] = np.stack([np.frombuffer(bytes(r[3]), dtype=np.uint8) for r in heads])
    # values of block j: offsets[j] .. offsets[j + 1] (the rows are in block order)
    data["offsets"] = np.searchsorted(data["block_id"], np.append(block_ids, block_ids[-1] + 1))
    data["head"] = np.repeat(data["head_eps"], np.diff(data["offsets"]))  # each value's head: its block's
    return data


def _time_floor(attribute_id: int, n: int, data: dict) -> float:
    """The task's compute alone, timed over at least ``FLOOR_MIN_SECONDS`` (whole passes repeated): seconds per
    pass."""
    passes, total = 0, 0.0
    while total < FLOOR_MIN_SECONDS or passes == 0:
        total += _time_floor_once(attribute_id, n, data)
        passes += 1
    return total / passes


def _time_floor_once(attribute_id: int, n: int, data: dict) -> float:
    """The task's compute alone, timed: per batch of whole blocks (the task's batches), open the sealed inputs,
    open each block's head point row, grow over the steps; nothing else."""
    from market.chains import grow as chains
    from market.models import Attribute
    from market.values import inputs as domain
    from market.values import sealing

    attribute = Attribute.objects.get(id=attribute_id)
    grid = chains.Grid.of(attribute)
    pbytes, width, m, divisor = (domain.payload_bytes(attribute), attribute.width, attribute.domain_size,
                                 attribute.draw_divisor)
    sealed, owner, slot, ceiling, head = data["sealed"], data["owner_id"], data["slot"], data["ceiling"], data["head"]
    block_ids, head_eps, head_present, head_sealed = (data["block_ids"], data["head_eps"], data["head_present"],
                                                      data["head_sealed"])
    offsets = data["offsets"]
    batches = _task_batches(block_ids.size)  # (first block, end) of each of the task's batches
    steps = 0
    gc.collect()
    start = time.perf_counter()
    for k, k1 in batches:
        lo, hi = int(offsets[k]), int(offsets[k1])
        payload = sealing.open_inputs(sealed[lo:hi], owner[lo:hi], np.full(hi - lo, attribute.id), pbytes)
        inputs = domain.from_payload(attribute, payload)
        last = np.empty((hi - lo, width), dtype=np.int64)
        for j in range(k, k1):
            out = sealing.open_points(head_sealed[j], attribute_id=attribute.id, block_id=int(block_ids[j]),
                                      epsilon=int(head_eps[j]), present=head_present[j], width=width)
            a, b = int(offsets[j]), int(offsets[j + 1])
            last[a - lo:b - lo] = out[slot[a:b]]
        growth = chains.grow(inputs, head[lo:hi], last, grid.last_point_upto(ceiling[lo:hi]), grid, m, None, divisor)
        steps += int(growth.count.sum())
    seconds = time.perf_counter() - start
    if steps != n * STEPS:
        raise RuntimeError(f"the floor grew {steps} value-steps, expected {n * STEPS}")
    return seconds


def _task_batches(blocks: int) -> list[tuple[int, int]]:
    """The task's batches of ``blocks`` blocks (``market.chains.extension._batches``, reading ahead as it does on
    PostgreSQL), as ``(first block, end)`` positions."""
    from django.conf import settings

    from market.chains import extension

    per_batch = max(1, int(settings.LDP_EXTENSION_BATCH) // max(1, int(settings.LDP_CHAIN_BLOCK)))
    out, start = [], 0
    for batch in extension._batches(list(range(blocks)), per_batch, blocks > per_batch):
        if batch:
            out.append((start, start + len(batch)))
            start += len(batch)
    return out


# --------------------------------------------------------------------------- the task, timed, in phases

class _Breakdown:
    """Seconds spent in each function ``_extend_batch`` calls (wraps module attributes; negligible overhead).
    ``nested`` labels run inside another probed function and are not part of the sum of phases."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.nested: set[str] = set()
        self._undo = []

    def wrap(self, module, name: str, label: str, *, nested: bool = False, other_threads: str | None = None) -> None:
        """Time calls of ``module.name`` under ``label``; with ``other_threads``, the calls made by another thread
        than the task's (the read-ahead thread's) go under that label instead, as a nested one: they overlap the
        task's phases."""
        original = getattr(module, name)
        main = threading.main_thread()

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                key = label if other_threads is None or threading.current_thread() is main else other_threads
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

        setattr(module, name, timed)
        self._undo.append((module, name, original))
        if nested:
            self.nested.add(label)
        if other_threads is not None:
            self.nested.add(other_threads)

    def restore(self) -> None:
        for module, name, original in reversed(self._undo):
            setattr(module, name, original)
        self._undo.clear()


def _rss_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


OTHER = "other (block id list, transactions, task)"


def _run_task(attribute_id: int, n: int) -> dict:
    """Extend every chain through the Celery task (synchronously); time, peak RSS and phase breakdown."""
    from market.chains import extension, pgcopy
    from market.chains import grow as chains
    from market.chains import store as chainstore
    from market.tasks import extend_chains
    from market.values import sealing

    br = _Breakdown()
    br.wrap(chainstore, "lock", "chain lock")
    # The values are read ahead by another thread while the batch before grows (market.chains.extension._read_ahead):
    # the task waits only for what the reading did not hide.  The reading itself overlaps the other phases, so
    # it is listed beside them, not in their sum.
    br.wrap(extension, "_ready", "wait for the values read ahead")
    # The first batch reads its own values, in the task's thread (nothing runs before it to hide the read): a phase
    # of the task.  The next batches' reads run in the read-ahead thread, beside the other phases.
    br.wrap(pgcopy, "extension_rows", "read values (first batch, in the task's thread)",
            other_threads="  read values (COPY out, in the read-ahead thread)")
    br.wrap(chainstore, "read", "read blocks + bitmaps")
    br.wrap(sealing, "open_inputs", "open sealed inputs")
    br.wrap(chainstore, "points_at", "open head points (points_at)")
    br.wrap(chains, "grow", "grow (relax)")
    br.wrap(extension, "_new_points", "select the new points")
    br.wrap(chainstore, "store", "seal + write points (store)")
    br.wrap(sealing, "seal_points", "  of which seal_points", nested=True)
    gc.collect()
    rss_before = _rss_kib("VmRSS")
    peak_ok = _reset_peak_rss()
    try:
        start = time.perf_counter()
        extended = extend_chains.apply(args=[attribute_id]).get()
        seconds = time.perf_counter() - start
    finally:
        br.restore()
    if extended != n:
        raise RuntimeError(f"the task extended {extended} values, expected {n}")
    peak = _rss_kib("VmHWM") if peak_ok else None
    phases = {k: v for k, v in br.seconds.items() if k not in br.nested}
    phases[OTHER] = seconds - sum(phases.values())
    phases.update({k: v for k, v in br.seconds.items() if k in br.nested})
    return {"seconds": seconds, "rss_before_kib": rss_before, "rss_peak_kib": peak,
            "rss_growth_kib": None if peak is None else peak - rss_before, "phases": phases}


def _task_child(db_url: str, name: str, attribute_id: int) -> None:
    """In a fresh process (``python -m benchmarks.e2_extension --task-child DB_URL NAME ATTRIBUTE_ID``): Django on
    the benchmark's database (no migration), the task run once through ``apply``; prints one JSON line (after
    ``CHILD_MARK``): values extended, seconds, VmRSS before the task and this process's VmHWM at its end."""
    setup_django(db_url, name, migrate=False)
    from django.db import connection

    from market.tasks import extend_chains

    connection.ensure_connection()
    gc.collect()
    rss_before = _rss_kib("VmRSS")
    start = time.perf_counter()
    extended = extend_chains.apply(args=[attribute_id]).get()
    seconds = time.perf_counter() - start
    connection.close()
    print(CHILD_MARK + json.dumps({"extended": extended, "seconds": seconds, "rss_before_kib": rss_before,
                                   "rss_end_kib": _rss_kib("VmRSS"), "rss_peak_kib": _rss_kib("VmHWM")}),
          flush=True)


def _run_task_fresh_process(attribute_id: int, n: int) -> dict:
    """The task once more (untimed, chains restored first) in a fresh child process: its own peak RSS."""
    from django.db import connection

    _reset_chains()
    settings_dict = connection.settings_dict
    connection.close()  # the child's task takes the chain locks; this process holds nothing open meanwhile
    db_url = os.environ["DATABASE_URL"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.e2_extension", "--task-child", db_url,
                           settings_dict["NAME"], str(attribute_id)],
                          cwd=root, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(CHILD_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the fresh-process task run failed (exit {proc.returncode}):\n{proc.stdout}\n"
                           f"{proc.stderr}")
    child = json.loads(lines[-1][len(CHILD_MARK):])
    if child["extended"] != n:
        raise RuntimeError(f"the fresh-process task extended {child['extended']} values, expected {n}")
    child["task_share_kib"] = child["rss_peak_kib"] - child["rss_before_kib"]
    return child


def _check_chains(attribute_id: int, n: int, sample: int = 50) -> dict:
    """After a run: every chain has 10 points up to 1.0 (bitmaps, heads), and a sample opens as expected."""
    from market.chains import store as chainstore
    from market.models import Attribute, Value

    stats = chain_stats(attribute_id)
    want = np.arange(1, LENGTH + 1, dtype=np.int64) * 100_000
    if stats["values"] != n or stats["points"] != (LENGTH, LENGTH) or stats["heads"] != (want[-1], want[-1]):
        raise RuntimeError(f"chains after the task: {stats}")
    attribute = Attribute.objects.get(id=attribute_id)
    for block_id, slot in Value.objects.filter(attribute_id=attribute_id).order_by("?")[:sample].values_list(
            "block_id", "slot"):
        eps, out = chainstore.chain_of(attribute, block_id, slot)
        assert np.array_equal(eps, want) and out.min() >= 0 and out.max() < M, (eps, out)
    return stats


# --------------------------------------------------------------------------- main

def measure(n: int, rounds: int) -> dict:
    from django.conf import settings
    from django.db import connection

    t0 = time.perf_counter()
    attribute_id = _make_values(n)
    print(f"  set up n={_common.pow10(n)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    task_runs, floor_runs = [], []
    for r in range(rounds):
        _reset_chains()
        data = _load_floor(attribute_id)
        floor_runs.append(_time_floor(attribute_id, n, data))
        del data  # freed before the task: its peak RSS is the task's own
        run = _run_task(attribute_id, n)
        task_runs.append(run)
        print(f"  n={_common.pow10(n)} round {r + 1}/{rounds} (load {_common.load_text()}): in memory "
              f"{n * STEPS / floor_runs[-1]:,.0f} value-steps/s ({floor_runs[-1]:.2f} s per pass), ratio "
              f"{100 * floor_runs[-1] / run['seconds']:.1f}%, task {n * STEPS / run['seconds']:,.0f} value-steps/s "
              f"({run['seconds']:.2f} s), in-process peak RSS {(run['rss_peak_kib'] or 0) / 1024:.0f} MiB",
              flush=True)
    fresh = _run_task_fresh_process(attribute_id, n)
    print(f"  n={_common.pow10(n)} fresh process (untimed): peak RSS {fresh['rss_peak_kib'] / 1024:.0f} MiB, "
          f"{fresh['rss_before_kib'] / 1024:.0f} MiB after Django set-up before the task "
          f"(task's share +{fresh['task_share_kib'] / 1024:.0f} MiB), {fresh['seconds']:.2f} s", flush=True)
    stats = _check_chains(attribute_id, n)  # the chains the fresh-process run extended
    with connection.cursor() as c:
        c.execute("SELECT count(*), avg(pg_column_size(t.*))::float, pg_total_relation_size('market_chainpoint') "
                  "FROM market_chainpoint t")
        point_rows, point_row_bytes, point_table_bytes = c.fetchone()
    best = min(task_runs, key=lambda run: run["seconds"])
    task_best, floor_best = best["seconds"], min(floor_runs)
    ratios = [floor / run["seconds"] for floor, run in zip(floor_runs, task_runs)]
    capacity = int(settings.LDP_CHAIN_BLOCK)
    per_batch = max(1, int(settings.LDP_EXTENSION_BATCH) // capacity)
    # The task's batches (market.chains.extension._batches): reading ahead, they start at a quarter and grow.
    batches = _task_batches(stats["blocks"])
    return {
        "n": n, "rounds": rounds, "batch_size": settings.LDP_EXTENSION_BATCH, "block_size": capacity,
        "blocks": stats["blocks"], "blocks_per_batch": per_batch, "first_batch_blocks": batches[0][1],
        "batches": len(batches), "batch_blocks": [k1 - k for k, k1 in batches],
        "steps_per_value": STEPS, "value_steps": n * STEPS,
        "task_seconds": task_best, "task_value_steps_per_second": n * STEPS / task_best,
        "task_values_per_second": n / task_best,
        "floor_seconds": floor_best, "floor_value_steps_per_second": n * STEPS / floor_best,
        # judged by the median round's ratio (each round's floor and task side by side); the best of each side
        # is kept for information
        "ratio_to_floor": statistics.median(ratios), "pass": statistics.median(ratios) >= TARGET,
        "ratio_each_round": ratios, "ratio_best_of_each_side": floor_best / task_best,
        "task_seconds_all_rounds": [run["seconds"] for run in task_runs], "floor_seconds_all_rounds": floor_runs,
        "phases_best_round": best["phases"],
        # the memory target: the task run once more in a fresh child process (untimed)
        "fresh_rss_peak_kib": fresh["rss_peak_kib"], "fresh_rss_before_task_kib": fresh["rss_before_kib"],
        "fresh_task_share_kib": fresh["task_share_kib"], "fresh_rss_end_kib": fresh["rss_end_kib"],
        "fresh_seconds": fresh["seconds"], "fresh_extended": fresh["extended"],
        # information only: the timed runs in this benchmark process (which holds its own set-up and floor data)
        "rss_peak_kib": max((run["rss_peak_kib"] or 0) for run in task_runs) or None,
        "rss_before_kib": best["rss_before_kib"],
        "rss_peak_growth_kib": (None if any(run["rss_growth_kib"] is None for run in task_runs)
                                else max(run["rss_growth_kib"] for run in task_runs)),
        "chain_point_rows": point_rows, "chain_point_row_bytes": point_row_bytes,
        "chain_point_table_bytes": point_table_bytes,
    }


def _batches_text(r: dict) -> str:
    """The task's batches, e.g. ``4: 8, 12, 18, 11 blocks`` (``..., then 32`` when there are many)."""
    sizes = r.get("batch_blocks") or [r["first_batch_blocks"]]
    shown = ", ".join(str(b) for b in sizes[:5])
    more = f", ... (then {r['blocks_per_batch']})" if len(sizes) > 5 else ""
    return f"{r['batches']}: {shown}{more} blocks"


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    server = server_url("E2_POSTGRES_URL")
    db_url = _with_db(server, DB_NAME)
    print(f"E2 chain extension on PostgreSQL (database {DB_NAME} on {urlsplit(server).hostname}): "
          f"Celery task extend_chains (apply, synchronous), {STEPS} grid steps per value "
          f"({CEILING_START} -> {CEILING_RAISED}), m={M}; beside it the same work in memory (open the sealed "
          f"inputs and head points, grow); median of {ROUNDS[N_VALUES[0]]}/{ROUNDS[N_VALUES[-1]]} rounds, "
          f"interleaved", flush=True)
    _admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    _admin(server, f"CREATE DATABASE {DB_NAME}")
    try:
        setup_django(db_url, DB_NAME)
        from django.db import connection

        with connection.cursor() as c:
            c.execute("SELECT version()")
            pg_version = c.fetchone()[0]
        results = [measure(n, ROUNDS[n]) for n in N_VALUES]
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # pragma: no cover - Django never set up
            pass
        _admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    print(flush=True)

    def mib(kib):
        return "?" if kib is None else f"{kib / 1024:.0f}"

    _common.print_table(
        ["n", "task batches", "task value-steps/s", "task s", "in memory value-steps/s", "in memory s", "of in memory",
         f">= {TARGET:.0%}", "task peak RSS MiB (fresh process)", "of which before task MiB", "task's share MiB"],
        [[_common.pow10(r["n"]), _batches_text(r),
          _common.si(r["task_value_steps_per_second"], "/s"), f"{r['task_seconds']:.2f}",
          _common.si(r["floor_value_steps_per_second"], "/s"), f"{r['floor_seconds']:.2f}",
          f"{100 * r['ratio_to_floor']:.1f}%", "PASS" if r["pass"] else "FAIL", mib(r["fresh_rss_peak_kib"]),
          mib(r["fresh_rss_before_task_kib"]), f"+{mib(r['fresh_task_share_kib'])}"] for r in results],
        title=f"E2 chain extension: value-steps per second (n values x {STEPS} steps) of the task vs the same work "
              f"in memory (the floor), the median round's ratio; peak RSS of the task run once more in a fresh "
              f"process (untimed); PostgreSQL {pg_version.split()[1]}")
    phase_names = list(results[0]["phases_best_round"])
    _common.print_table(
        ["phase (best round)"] + [_common.pow10(r["n"]) for r in results],
        [[p] + [f"{r['phases_best_round'].get(p, 0.0):.2f} s "
                f"({100 * r['phases_best_round'].get(p, 0.0) / r['task_seconds']:.0f}%)" for r in results]
         for p in phase_names],
        title="Where the task's time goes (summed over batches; 'of which' lines are inside the line above)")
    big = results[-1]
    bounded = big["fresh_rss_peak_kib"] is not None and big["fresh_rss_peak_kib"] <= RSS_LIMIT_KIB
    print("Targets (docs/quality-targets.md#performance E2):")
    def rounds_text(r):
        return ", ".join(f"{100 * x:.1f}" for x in r["ratio_each_round"])

    for r in results:
        verdict = "PASS" if r["pass"] else "FAIL"
        print(f"{verdict:4}  extension >= {TARGET:.0%} of in memory   n={_common.pow10(r['n'])}: "
              f"median {100 * r['ratio_to_floor']:.1f}% (rounds {rounds_text(r)}%; best "
              f"{r['task_value_steps_per_second']:,.0f} vs {r['floor_value_steps_per_second']:,.0f} value-steps/s)")
    print(f"{'PASS' if bounded else 'FAIL':4}  memory bounded                 n={_common.pow10(big['n'])}: peak RSS of "
          f"the task run in a fresh process {mib(big['fresh_rss_peak_kib'])} MiB (pass if <= "
          f"{RSS_LIMIT_KIB // 1024} MiB; {mib(big['fresh_rss_before_task_kib'])} MiB of it after Django set-up, "
          f"before the task: the task's share +{mib(big['fresh_task_share_kib'])} MiB)")
    if len(results) > 1:
        print("info  fresh-process peak RSS by n: " + ", ".join(
            f"{_common.pow10(r['n'])}: {mib(r['fresh_rss_peak_kib'])} MiB (+{mib(r['fresh_task_share_kib'])} "
            f"over {mib(r['fresh_rss_before_task_kib'])})" for r in results))
    print("info  in-process peak RSS of the timed runs (this benchmark process, holding its own set-up and floor "
          "data; not the target): " + ", ".join(
              f"{_common.pow10(r['n'])}: {mib(r['rss_peak_kib'])} MiB (before {mib(r['rss_before_kib'])}, "
              f"+{mib(r['rss_peak_growth_kib'])})" for r in results))
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "n_values": list(N_VALUES), "rounds": {str(k): v for k, v in ROUNDS.items()}, "m": M,
            "grid": {"start": GRID[0], "step": GRID[1], "stop": GRID[2]},
            "ceiling": {"start": CEILING_START, "raised_to": CEILING_RAISED}, "steps_per_value": STEPS,
            "target_ratio": TARGET, "rss_limit_kib": RSS_LIMIT_KIB, "postgresql": pg_version,
            "task": "market.tasks.extend_chains.apply(args=[attribute_id]) (synchronous, secure default rng)",
            "floor": "in memory, from the stored sealed inputs and head point rows loaded beforehand (untimed), "
                     "per batch of the task's blocks (market.chains.extension._batches): sealing.open_inputs, "
                     "sealing.open_points per block, "
                     "chains.grow over the steps (secure default rng); nothing else",
            "setup": "rows written by COPY; inputs sealed with market.values.sealing.seal_inputs, first points (0.1) "
                     "with sealing.seal_points, one row per block; ONE Fernet token (sealed for owner 0: opens for no "
                     "row) as every raw_sealed; ceilings written already raised to 1.0; no ledger entries "
                     "(benchmark set-up only); chains restored from a snapshot before each round",
            "memory": "fresh_*: the task run once more (untimed, chains restored) in a fresh child process "
                      "(python -m benchmarks.e2_extension --task-child; Django set up on the same database, no "
                      "migration): its VmHWM read by itself before exiting (the target), its VmRSS after Django "
                      "set-up before the task, the difference (the task's share); rss_*: information only, VmHWM "
                      "of this benchmark process during the timed runs (reset via /proc/self/clear_refs just "
                      "before each; the floor's arrays freed before) and its growth over VmRSS before",
        },
        "results": results,
        "memory_bounded": bounded,
        "elapsed_seconds": elapsed,
    }
    path = _common.write_results(NAME, result)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--task-child"]:
        _task_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
