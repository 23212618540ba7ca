"""E2: chain extension in the database (docs/quality-targets.md#performance).

Values extended per second by the Celery task ``market.tasks.extend_chains``
(run synchronously with ``apply``; on PostgreSQL it takes the fast path of
``market.pgcopy``) for n = 10^5 and 10^6 values of one categorical attribute
(m = 5), every chain grown by the same number of grid steps (0.1 -> 1.0:
9 steps).  Beside it, in the same rounds: the limit, a raw binary ``COPY`` of n
rows of the same columns and byte sizes as the extended chains (value id,
80-byte epsilons, 20-byte outputs, length, head, 2-byte last output,
timestamp) into a plain table without indexes or constraints, timed with its
commit.  Target: extension >= 30% of the COPY rate, and memory flat in n.

Also printed, as reference bounds (not targets): in the same rounds, one
``UPDATE`` writing a new version of each of the n rows just copied (what any
design that rewrites a chain row in place must at least pay), and the same
COPY into a table with ``UNIQUE (value_id, head)`` (what an append-only chain
store must at least pay when a unique key keeps two writers from extending a
chain from the same head).  Both are writes alone: nothing is read, locked,
decrypted or computed.  And the read of the state growth needs (one binary
COPY out of value, owner, sealed input, head, last outputs and ceiling for all
n values, joined as the task joins them, no lock), so that read + the task's
own open and grow phases + the cheaper of the two writes bounds any design
that keeps this state in these tables and grows it with this code.

Memory, "flat in n (batches)": in one extra untimed run per n with
``tracemalloc`` on, each batch's working memory (the peak inside
``services._extend_batch`` above the level on entry, Python and numpy
allocations); it must not grow with n (<= 1.5x from 10^5 to 10^6).  Also shown,
for the whole task: the peak resident set size (kernel high-water mark reset
through ``/proc/self/clear_refs`` just before the run, minus the resident size
before it) and the tracemalloc peak (``chains_extend`` streams the ids from one
server-side cursor, a batch at a time, so neither should grow with n beyond
what the process keeps between runs).

Set-up (not timed) writes the rows with ``COPY`` instead of
``market.services.values_create_many``, which seals each raw value with its own
Fernet token (too slow for 10^6): the mechanism inputs are sealed for real
(``market.sealing.seal_inputs``, what extension opens), but one Fernet token
(sealed for no benchmark row, so it opens for none) is reused as every value's
``raw_sealed`` and no ledger entries are written -- acceptable for this
benchmark's set-up only (extension reads neither).

Uses a dedicated PostgreSQL database ``ldpbench`` (created, migrated and
dropped at the end) on the server of ``E2_POSTGRES_URL`` or ``DATABASE_URL``
(default ``postgresql://postgres@127.0.0.1:5432/``).

Run: ``python -m benchmarks e2``; figures go to ``benchmarks/results/e2_extension.json``.
"""
from __future__ import annotations

import os
import struct
import time
import tracemalloc
from urllib.parse import urlsplit

import numpy as np

from . import _common
from ._postgres import admin as _admin
from ._postgres import checkpoint as _checkpoint
from ._postgres import server_url, setup_django
from ._postgres import with_db as _with_db

NAME = "e2_extension"
N_VALUES = tuple(int(float(x)) for x in os.environ.get("E2_N", "1e5,1e6").split(","))  # E2_N: a quicker run
#: Best of this many rounds; each round runs the COPY then the task (E2_ROUNDS overrides).
ROUNDS = {n: int(os.environ.get("E2_ROUNDS", 3)) for n in N_VALUES}
M = 5
GRID = ("0.1", "0.1", "10")  # start, step, stop
CEILING_START, CEILING_RAISED = "0.1", "1.0"
STEPS = 9  # grid points added per chain: 0.2 .. 1.0
LENGTH = STEPS + 1
TARGET = 0.30
FLAT_FACTOR = 1.5  # "flat": per-batch memory grows by at most this factor when n grows 10x
DB_NAME = "ldpbench"
SEED = 20240126  # set-up data only (true categories); every timed draw uses the secure default source

LIMIT_TABLE = "e2_copy_limit"
INITIAL_TABLE = "e2_chain_initial"
PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01 in Unix microseconds


# --------------------------------------------------------------------------- database and Django

# --------------------------------------------------------------------------- set-up

def _binary_copy(cursor, table_and_columns: str, columns) -> None:
    from market import pgcopy

    pgcopy.copy_in(cursor, table_and_columns, [pgcopy.binary_rows(columns)])


def _make_values(n: int) -> int:
    """n owners, values, budgets (ceiling 0.1) and one-step chains at 0.1, by COPY; the attribute id."""
    from django.db import connection, transaction

    from market import chains, domain, sealing
    from market.models import Attribute, Dataset

    with connection.cursor() as c:
        c.execute("TRUNCATE market_chain, accounts_budgetaccount, market_value, market_attribute, "
                  "market_dataset, accounts_user RESTART IDENTITY CASCADE")
        c.execute(f"DROP TABLE IF EXISTS {INITIAL_TABLE}")
    dataset = Dataset.objects.create(title=f"E2 benchmark {n}")
    attribute = Attribute.objects.create(dataset=dataset, name="category", kind=Attribute.Kind.CATEGORICAL,
                                         labels=[f"c{i}" for i in range(M)], grid_start=GRID[0],
                                         grid_step=GRID[1], grid_stop=GRID[2])
    gen = np.random.default_rng(SEED)
    ids = np.arange(1, n + 1, dtype=np.int64)  # value i belongs to owner i
    categories = gen.integers(0, M, size=n)
    inputs = categories.reshape(n, 1)
    payload = inputs.astype("<i2").view(np.uint8).reshape(n, 2)
    assert np.array_equal(domain.from_payload(attribute, payload), inputs)
    sealed = np.frombuffer(b"".join(sealing.seal_inputs(ids, np.full(n, attribute.id), payload)),
                           dtype=np.uint8).reshape(n, -1)
    grid = chains.Grid.of(attribute)
    first = chains.generate(inputs, np.array([grid.start]), M)[:, 0, :].astype(chains.OUT)  # (n, 1)
    # ONE Fernet token (sealed for owner 0, so it opens for none of these rows) reused as every raw_sealed:
    # set-up only, for a realistic row size; extension never reads raw values.
    token = sealing.seal_raw("benchmark raw value", owner_id=0, attribute_id=attribute.id)
    with transaction.atomic(), connection.cursor() as c:
        c.execute("CREATE TEMP TABLE e2_stage (id bigint, sealed bytea, first_output bytea) ON COMMIT DROP")
        _binary_copy(c.cursor, "e2_stage", [ids, sealed, first])
        c.execute("INSERT INTO accounts_user (id, password, is_superuser, username, first_name, last_name, "
                  "email, is_staff, is_active, date_joined, role, organisation) "
                  "SELECT id, '!', false, 'e2-owner-' || id, '', '', '', false, true, now(), 'owner', '' "
                  "FROM e2_stage")
        c.execute("INSERT INTO market_value (id, owner_id, attribute_id, raw_sealed, input_sealed, cohort, "
                  "created_at) SELECT id, id, %s, %s, sealed, 0, now() FROM e2_stage", [attribute.id, token])
        c.execute("INSERT INTO accounts_budgetaccount (value_id, ceiling, chain_loss, oneshot_loss, paused, "
                  "schedule_shape, updated_at) SELECT id, %s, 0, 0, false, '', now() FROM e2_stage",
                  [CEILING_START])
        c.execute(f"CREATE TABLE {INITIAL_TABLE} AS SELECT id AS value_id, %s::bytea AS epsilons, "
                  f"first_output AS outputs, 1 AS length, %s::numeric(12, 6) AS head, "
                  f"first_output AS head_output, now() AS updated_at FROM e2_stage",
                  [np.array([grid.start], dtype=chains.EPS).tobytes(), CEILING_START])
        for table in ("accounts_user", "market_value"):
            c.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                      f"(SELECT max(id) FROM {table}))")
        # Raise every ceiling at once (as a schedule or the portal would): 9 grid steps to extend.
        c.execute("UPDATE accounts_budgetaccount SET ceiling = %s", [CEILING_RAISED])
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE accounts_user, market_value, accounts_budgetaccount")
    return attribute.id


def _reset_chains() -> None:
    """Every chain back to its single first step (a fresh table, vacuumed): each round starts alike."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as c:
        c.execute("TRUNCATE market_chain")
        columns = "value_id, epsilons, outputs, length, head, head_output, updated_at"
        c.execute(f"INSERT INTO market_chain ({columns}) "
                  f"SELECT {columns} FROM {INITIAL_TABLE} ORDER BY value_id")
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE market_chain")
    _checkpoint()


# --------------------------------------------------------------------------- the limit: raw COPY

def _limit_rows(n: int) -> bytes:
    """Binary COPY body of n rows shaped like the extended chains (built once, not timed)."""
    from market import chains, pgcopy

    gen = np.random.default_rng(SEED + 1)
    eps = np.broadcast_to(np.arange(1, LENGTH + 1, dtype=chains.EPS) * 100_000, (n, LENGTH))
    outs = gen.integers(0, M, size=(n, LENGTH)).astype(chains.OUT)
    # numeric 1.000000 in binary: ndigits 1, weight 0, sign +, dscale 6, digit 1
    head = np.frombuffer(struct.pack(">hhhhh", 1, 0, 0, 6, 1), dtype=np.uint8)
    now_us = int(time.time() * 1_000_000) - PG_EPOCH_US
    body = pgcopy.binary_rows([
        np.arange(1, n + 1, dtype=np.int64), eps, outs, np.full(n, LENGTH, dtype=np.int32),
        np.broadcast_to(head, (n, head.size)), outs[:, -1:], np.full(n, now_us, dtype=np.int64)])
    return body


def _time_copy(body: bytes, table: str = LIMIT_TABLE) -> float:
    """The binary COPY of ``body`` into ``table`` (emptied first), timed with its commit."""
    from django.db import connection, transaction

    from market import pgcopy

    with connection.cursor() as c:
        c.execute(f"TRUNCATE {table}")
    _checkpoint()
    start = time.perf_counter()
    with transaction.atomic(), connection.cursor() as c:
        pgcopy.copy_in(c.cursor, f"{table} (value_id, epsilons, outputs, length, head, head_output, updated_at)",
                       [body])
    return time.perf_counter() - start


# --------------------------------------------------------------------------- reference bounds (not targets)

UNIQUE_TABLE = "e2_copy_unique"


def _time_copy_unique(body: bytes) -> float:
    """The same COPY into a table with UNIQUE (value_id, head): the write of an append-only chain store whose
    key stops two writers from extending one chain from the same head (the bound of such a design)."""
    return _time_copy(body, UNIQUE_TABLE)


def _time_update(n: int) -> float:
    """One UPDATE writing a new version of each of the n rows the limit just copied (no index, no join): the
    write of any design that rewrites a chain row in place (the bound of such a design)."""
    from django.db import connection, transaction

    _checkpoint()
    start = time.perf_counter()
    with transaction.atomic(), connection.cursor() as c:
        c.execute(f"UPDATE {LIMIT_TABLE} SET length = length + 1, updated_at = now()")
        rows = c.rowcount
    if rows != n:
        raise RuntimeError(f"the reference UPDATE wrote {rows} rows, expected {n}")
    return time.perf_counter() - start


def _time_read(attribute_id: int, n: int) -> float:
    """One binary COPY out of the fields growth needs (value, owner, sealed input, head, last outputs, ceiling)
    for the n values, joined as the task joins them but not locked, parsed as the task parses them: the read of
    any design keeping this state in these tables (the bound of reading it)."""
    from django.db import connection

    from accounts.epsilon import MICRO
    from market import chains, domain, pgcopy, sealing
    from market.models import Attribute

    attribute = Attribute.objects.get(id=attribute_id)
    layout = [("value_id", ">i8"), ("owner_id", ">i8"),
              ("sealed", ("u1", (sealing.blocks_for(domain.payload_bytes(attribute)) * 16,))), ("head", ">i8"),
              ("head_output", (chains.OUT, (attribute.width,))), ("ceiling", ">i8")]
    _checkpoint()
    start = time.perf_counter()
    with connection.cursor() as c:
        rows = pgcopy.parse_rows(pgcopy.copy_out(
            c.cursor,
            f"SELECT c.value_id, v.owner_id, v.input_sealed, (c.head * {MICRO})::bigint, c.head_output, "
            f"(b.ceiling * {MICRO})::bigint FROM market_chain c JOIN market_value v ON v.id = c.value_id "
            f"JOIN accounts_budgetaccount b ON b.value_id = c.value_id WHERE v.attribute_id = %(a)s "
            f"ORDER BY c.value_id", {"a": attribute_id}), layout)
    seconds = time.perf_counter() - start
    if rows.size != n:
        raise RuntimeError(f"the reference read returned {rows.size} rows, expected {n}")
    return seconds


# --------------------------------------------------------------------------- the task, timed, in phases

class _Breakdown:
    """Seconds spent in each phase of the fast path (wraps module functions; negligible overhead)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._undo = []

    def wrap(self, module, name: str, label: str) -> None:
        original = getattr(module, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - start

        setattr(module, name, timed)
        self._undo.append((module, name, original))

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


def _run_task(attribute_id: int, n: int, *, trace: bool = False) -> dict:
    """Extend every chain through the Celery task (synchronously); time, memory and phase breakdown."""
    import gc

    from market import chains, pgcopy, sealing, services
    from market.tasks import extend_chains

    br = _Breakdown()
    br.wrap(pgcopy, "read_batch", "lock + COPY out")
    br.wrap(sealing, "open_inputs", "open sealed inputs")
    br.wrap(chains, "grow", "grow (relax)")
    br.wrap(pgcopy, "write_growth", "COPY in + UPDATE")
    batch_peaks: list[int] = []
    if trace:  # working memory of each batch: tracemalloc's peak inside it above its level on entry
        original_batch = services._extend_batch

        def traced_batch(*args, **kwargs):
            entry = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            try:
                return original_batch(*args, **kwargs)
            finally:
                batch_peaks.append(tracemalloc.get_traced_memory()[1] - entry)

        services._extend_batch = traced_batch
    gc.collect()
    rss_before = _rss_kib("VmRSS")
    peak_ok = _reset_peak_rss()
    if trace:
        tracemalloc.start()
    try:
        start = time.perf_counter()
        extended = extend_chains.apply(args=[attribute_id]).get()
        seconds = time.perf_counter() - start
    finally:
        traced_peak = tracemalloc.get_traced_memory()[1] if trace else None
        if trace:
            tracemalloc.stop()
            services._extend_batch = original_batch
        br.restore()
    if extended != n:
        raise RuntimeError(f"the task extended {extended} values, expected {n}")
    peak = _rss_kib("VmHWM") if peak_ok else None
    phases = dict(br.seconds)
    phases["other (id list, transactions, task)"] = seconds - sum(br.seconds.values())
    return {"seconds": seconds, "rss_before_kib": rss_before, "rss_peak_kib": peak,
            "rss_growth_kib": None if peak is None else peak - rss_before,
            "tracemalloc_peak_bytes": traced_peak, "batch_peak_bytes": max(batch_peaks, default=None),
            "phases": phases}


def _check_chains(attribute_id: int, sample: int = 2000) -> None:
    """Spot-check the stored chains after a run: lengths, heads, epsilons and outputs decode as expected."""
    from decimal import Decimal

    from market import chains
    from market.models import Chain

    stats = Chain.objects.filter(value__attribute_id=attribute_id)
    assert set(stats.values_list("length", flat=True).distinct()) == {LENGTH}
    assert set(stats.values_list("head", flat=True).distinct()) == {Decimal(CEILING_RAISED)}
    want = np.arange(1, LENGTH + 1, dtype=np.int64) * 100_000
    for eps_blob, out_blob, head_output in stats.order_by("?")[:sample].values_list("epsilons", "outputs",
                                                                                     "head_output"):
        eps, out = chains.decode(eps_blob, out_blob, 1)
        assert np.array_equal(eps, want) and out.min() >= 0 and out.max() < M
        assert bytes(head_output) == out[-1].astype(chains.OUT).tobytes()


# --------------------------------------------------------------------------- main

def measure(n: int, rounds: int) -> dict:
    from django.conf import settings
    from django.db import connection

    t0 = time.perf_counter()
    attribute_id = _make_values(n)
    body = _limit_rows(n)
    with connection.cursor() as c:
        c.execute(f"DROP TABLE IF EXISTS {LIMIT_TABLE}")
        c.execute(f"CREATE TABLE {LIMIT_TABLE} (value_id bigint, epsilons bytea, outputs bytea, "
                  f"length integer, head numeric(12, 6), head_output bytea, updated_at timestamptz)")
        c.execute(f"DROP TABLE IF EXISTS {UNIQUE_TABLE}")
        c.execute(f"CREATE TABLE {UNIQUE_TABLE} (LIKE {LIMIT_TABLE}, UNIQUE (value_id, head))")
    print(f"  set up n={_common.pow10(n)} ({time.perf_counter() - t0:.0f} s)", flush=True)

    copy_best, task_best, task_runs = float("inf"), float("inf"), []
    update_best = unique_best = read_best = float("inf")
    for r in range(rounds):
        _reset_chains()
        copy_best = min(copy_best, _time_copy(body))
        update_best = min(update_best, _time_update(n))
        unique_best = min(unique_best, _time_copy_unique(body))
        read_best = min(read_best, _time_read(attribute_id, n))
        run = _run_task(attribute_id, n)
        task_runs.append(run)
        task_best = min(task_best, run["seconds"])
        print(f"  n={_common.pow10(n)} round {r + 1}/{rounds}: COPY {n / copy_best:,.0f} rows/s best, "
              f"task {n / run['seconds']:,.0f} values/s ({run['seconds']:.2f} s)", flush=True)
    _check_chains(attribute_id)
    with connection.cursor() as c:
        c.execute("SELECT avg(pg_column_size(t.*))::float, pg_total_relation_size('market_chain') "
                  "FROM market_chain t")
        chain_row_bytes, chain_table_bytes = c.fetchone()
        c.execute(f"SELECT avg(pg_column_size(t.*))::float FROM {LIMIT_TABLE} t")
        limit_row_bytes = c.fetchone()[0]
    # Memory of the task alone with tracemalloc on (untimed: tracing slows Python allocations).
    _reset_chains()
    traced = _run_task(attribute_id, n, trace=True)
    best = min(task_runs, key=lambda run: run["seconds"])
    del body
    return {
        "n": n, "rounds": rounds, "batch_size": settings.LDP_EXTENSION_BATCH,
        "batches": -(-n // settings.LDP_EXTENSION_BATCH), "steps_per_value": STEPS,
        "copy_seconds": copy_best, "copy_rows_per_second": n / copy_best,
        "task_seconds": task_best, "task_values_per_second": n / task_best,
        "task_outputs_per_second": n * STEPS / task_best,
        "ratio_to_copy": copy_best / task_best, "pass": copy_best / task_best >= TARGET,
        "reference_update_seconds": update_best, "reference_update_ratio_to_copy": copy_best / update_best,
        "reference_unique_copy_seconds": unique_best,
        "reference_unique_copy_ratio_to_copy": copy_best / unique_best,
        "reference_read_seconds": read_best,
        # read the state + grow it as the task does + the cheaper fork-safe write, each timed alone
        "reference_design_bound_ratio_to_copy": copy_best / (
            read_best + best["phases"]["open sealed inputs"] + best["phases"]["grow (relax)"]
            + min(update_best, unique_best)),
        "task_seconds_all_rounds": [run["seconds"] for run in task_runs],
        "phases_best_round": best["phases"],
        "rss_peak_growth_kib": max((run["rss_growth_kib"] or 0) for run in task_runs),
        "rss_peak_kib": max((run["rss_peak_kib"] or 0) for run in task_runs),
        "tracemalloc_peak_bytes": traced["tracemalloc_peak_bytes"],
        "batch_peak_bytes": traced["batch_peak_bytes"],
        "chain_row_bytes": chain_row_bytes, "limit_row_bytes": limit_row_bytes,
        "chain_table_bytes": chain_table_bytes,
    }


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    server = server_url("E2_POSTGRES_URL")
    db_url = _with_db(server, DB_NAME)
    print(f"E2 chain extension on PostgreSQL (database {DB_NAME} on {urlsplit(server).hostname}): "
          f"Celery task extend_chains (apply, synchronous), {STEPS} grid steps per value "
          f"({CEILING_START} -> {CEILING_RAISED}), m={M}; beside it a raw binary COPY of as many rows "
          f"of the same byte size; best of {ROUNDS[N_VALUES[0]]}/{ROUNDS[N_VALUES[-1]]} rounds, interleaved",
          flush=True)
    _admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    _admin(server, f"CREATE DATABASE {DB_NAME}")
    try:
        setup_django(db_url, DB_NAME)
        from django.db import connection

        with connection.cursor() as c:
            c.execute("SELECT version()")
            pg_version = c.fetchone()[0]
            c.execute("SELECT reloptions FROM pg_class WHERE relname = 'market_chain'")
            chain_reloptions = c.fetchone()[0]
        results = [measure(n, ROUNDS[n]) for n in N_VALUES]
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # pragma: no cover - Django never set up
            pass
        _admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    print(flush=True)

    rows = []
    for r in results:
        rows.append([_common.pow10(r["n"]), f"{r['batches']} x {r['batch_size']:,}",
                     _common.si(r["task_values_per_second"], "/s"), f"{r['task_seconds']:.2f}",
                     _common.si(r["copy_rows_per_second"], "/s"), f"{r['copy_seconds']:.2f}",
                     f"{100 * r['ratio_to_copy']:.1f}%", "PASS" if r["pass"] else "FAIL",
                     f"{r['rss_peak_growth_kib'] / 1024:.0f}", f"{r['tracemalloc_peak_bytes'] / 2**20:.0f}",
                     f"{r['batch_peak_bytes'] / 2**20:.1f}"])
    _common.print_table(
        ["n", "batches", "task values/s", "task s", "raw COPY rows/s", "COPY s", "of COPY", ">= 30%",
         "task peak RSS +MiB", "task tracemalloc MiB", "per-batch MiB"], rows,
        title=f"E2 chain extension: values extended per second ({STEPS} steps each) vs raw COPY of the same "
              f"rows (the limit), best of the rounds; PostgreSQL {pg_version.split()[1]}")
    _common.print_table(
        ["n", "raw COPY s", "UPDATE of the same rows s", "its rate of COPY's", "COPY with UNIQUE (value_id, head) s",
         "its rate of COPY's", "read of the state s", "read + open + grow + cheaper write: rate of COPY's"],
        [[_common.pow10(r["n"]), f"{r['copy_seconds']:.2f}", f"{r['reference_update_seconds']:.2f}",
          f"{100 * r['reference_update_ratio_to_copy']:.0f}%", f"{r['reference_unique_copy_seconds']:.2f}",
          f"{100 * r['reference_unique_copy_ratio_to_copy']:.0f}%", f"{r['reference_read_seconds']:.2f}",
          f"{100 * r['reference_design_bound_ratio_to_copy']:.0f}%"] for r in results],
        title="Reference bounds (same rows, same run, each part alone): rewriting each chain row in place; "
              "appending it under a fork-proof unique key; reading the state growth needs (one COPY out, no "
              "lock); and their sum with the task's own open + grow phases")
    phase_names = list(results[0]["phases_best_round"])
    _common.print_table(
        ["phase (best round)"] + [_common.pow10(r["n"]) for r in results],
        [[p] + [f"{r['phases_best_round'].get(p, 0.0):.2f} s "
                f"({100 * r['phases_best_round'].get(p, 0.0) / r['task_seconds']:.0f}%)" for r in results]
         for p in phase_names],
        title="Where the task's time goes (fast path, summed over batches; 'other' includes chains_extend's "
              "server-side cursor streaming the ids)")
    small, big = results[0], results[-1]
    factor = big["n"] / small["n"]
    growth = big["rss_peak_growth_kib"] / max(small["rss_peak_growth_kib"], 1)
    traced_growth = big["tracemalloc_peak_bytes"] / max(small["tracemalloc_peak_bytes"], 1)
    batch_growth = big["batch_peak_bytes"] / max(small["batch_peak_bytes"], 1)
    flat = batch_growth <= FLAT_FACTOR
    print("Targets (docs/quality-targets.md#performance E2):")
    for r in results:
        verdict = "PASS" if r["pass"] else "FAIL"
        print(f"{verdict:4}  extension >= {TARGET:.0%} of raw COPY   n={_common.pow10(r['n'])}: "
              f"{100 * r['ratio_to_copy']:.1f}% ({r['task_values_per_second']:,.0f} values/s vs "
              f"{r['copy_rows_per_second']:,.0f} rows/s; rows {r['chain_row_bytes']:.0f} B vs "
              f"{r['limit_row_bytes']:.0f} B)")
    for r in results:
        print(f"REF   n={_common.pow10(r['n'])}: reading the state, opening and growing it as the task does and "
              f"writing it fork-safely, each timed alone, add up to {100 * r['reference_design_bound_ratio_to_copy']:.0f}% "
              f"of the COPY rate (a reference, not a target)")
    if len(results) > 1:
        print(f"{'PASS' if flat else 'FAIL':4}  memory flat in n (batches)     {_common.pow10(small['n'])} -> "
              f"{_common.pow10(big['n'])} (x{factor:.0f}): per-batch working memory x{batch_growth:.2f} "
              f"({small['batch_peak_bytes'] / 2**20:.1f} -> {big['batch_peak_bytes'] / 2**20:.1f} MiB; "
              f"pass if <= x{FLAT_FACTOR:g})")
        rss = [r["rss_peak_growth_kib"] / 1024 for r in (small, big)]
        traced = [r["tracemalloc_peak_bytes"] / 2**20 for r in (small, big)]
        print(f"info  whole task: peak RSS growth x{growth:.2f} ({rss[0]:.0f} -> {rss[1]:.0f} MiB), "
              f"tracemalloc peak x{traced_growth:.2f} ({traced[0]:.0f} -> {traced[1]:.0f} MiB)")
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "n_values": list(N_VALUES), "rounds": {str(k): v for k, v in ROUNDS.items()}, "m": M,
            "grid": {"start": GRID[0], "step": GRID[1], "stop": GRID[2]},
            "ceiling": {"start": CEILING_START, "raised_to": CEILING_RAISED}, "steps_per_value": STEPS,
            "target_ratio": TARGET, "postgresql": pg_version, "market_chain_reloptions": chain_reloptions,
            "task": "market.tasks.extend_chains.apply(args=[attribute_id]) (synchronous, secure default rng)",
            "limit": f"binary COPY of n rows (value_id, {LENGTH * 8}-byte epsilons, {LENGTH * 2}-byte "
                     f"outputs, length, numeric head, 2-byte head_output, timestamptz) into a plain logged "
                     f"table without indexes, timed with its commit",
            "setup": "rows written by COPY; inputs sealed with market.sealing.seal_inputs; ONE Fernet token "
                     "(sealed for owner 0: opens for no row) as every raw_sealed, and no ledger entries "
                     "(benchmark set-up only)",
            "memory": "per batch: tracemalloc peak inside services._extend_batch above its entry level "
                      "(extra untimed run); whole task: VmHWM (reset via /proc/self/clear_refs) minus VmRSS "
                      "before, and the tracemalloc peak",
        },
        "results": results,
        "memory_growth_factor": {"per_batch": batch_growth, "rss_peak": growth,
                                 "tracemalloc_peak": traced_growth},
        "memory_flat": flat,
        "elapsed_seconds": elapsed,
    }
    path = _common.write_results(NAME, result)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    main()
