"""E5: no global lock (docs/quality-targets.md#performance): two attributes' purchases at once by two workers.

Two categorical attributes (m = 5) of ``E5_N`` values each (default 10^5), each value with its own owner (the two
attributes share no owner), chains stored at 0.1 .. 1.0 (the ceiling).  Two buyers each claim a purchase of every
value of one attribute at epsilon 0.35 (every value bridged between 0.3 and 0.4, the new point stored), and a
real Celery worker (``--concurrency 2``, prefork, Redis broker) runs them through ``market.tasks.run_purchase``:

* **at once**: both tasks sent together; the time until both purchases are completed;
* **one after the other**: the first sent, awaited, then the second; the time until both are completed.

Rounds are interleaved (at once, then one after the other, ...), and before each timed run the chains and budgets
are reset to the same state (``market_chainpoint`` re-filled from a snapshot, the chain blocks' heads and revisions
put back, ``chain_loss`` back to 0, ``VACUUM ANALYZE``,
``CHECKPOINT``) and new buyers are made, so every run does the same work.  Target: the pair at once in <= 0.65x
the sequential time (2 cores).  Also printed: each task's own run time as the worker logged it, so a lock that
serialised the two shows as one task taking about twice as long as it does alone.  The owners' settlement that
each purchase enqueues goes to a queue the worker does not read (a settlement is not part of a purchase).

Uses a dedicated database ``ldpbench_e5`` (created, migrated and dropped) on the server of ``E5_POSTGRES_URL`` or
``DATABASE_URL`` (default postgresql://postgres@127.0.0.1:5432/) and Redis database ``E5_REDIS_DB`` (default 13)
of ``E5_REDIS_URL`` (default redis://127.0.0.1:6379).

Run: ``python -m benchmarks e5``; figures go to ``benchmarks/results/e5_parallel.json``.
Quicker: ``E5_N=2e4 E5_ROUNDS=2 python -m benchmarks e5``.
"""
from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

from . import _common
from ._postgres import (
    admin,
    chain_stats,
    funded_buyer,
    restore_chains,
    server_url,
    setup_django,
    snapshot_chains,
    with_db,
)

NAME = "e5_parallel"
DB_NAME = "ldpbench_e5"
N = int(float(os.environ.get("E5_N", "1e5")))
ROUNDS = int(os.environ.get("E5_ROUNDS", "5"))
REDIS = os.environ.get("E5_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/") + "/" + os.environ.get("E5_REDIS_DB",
                                                                                                      "13")
EPSILON = Decimal("0.35")
CEILING = Decimal("1.0")
LABELS = [f"c{i}" for i in range(5)]
TARGET = 0.65
FULL_CHAINS = "e5_chain_full"
CREDIT_PER_VALUE = Decimal("0.01")
POLL = 0.02
WAIT_LIMIT = float(os.environ.get("E5_WAIT_SECONDS", "900"))


# --------------------------------------------------------------------------- set-up (untimed)

def _attribute(title: str, n: int, seed: int) -> int:
    """An attribute of n values through the service (values, budgets at the ceiling, chains to it)."""
    import numpy as np
    from django.contrib.auth.hashers import make_password

    from accounts.models import User
    from market.models import Attribute, Dataset
    from market.purchases.pricing import DEFAULT_POLICY
    from market.values.services import values_create_many

    dataset = Dataset.objects.create(title=title)
    attribute = Attribute.objects.create(dataset=dataset, name="category", kind=Attribute.Kind.CATEGORICAL,
                                         labels=LABELS, grid_start=Decimal("0.1"), grid_step=Decimal("0.1"),
                                         grid_stop=Decimal("2"), price_policy=DEFAULT_POLICY)
    password = make_password(None)
    owners = User.objects.bulk_create([User(username=f"e5-{attribute.id}-owner-{i}", role=User.Role.OWNER,
                                            password=password) for i in range(n)], batch_size=5000)
    raws = list(np.array(LABELS, dtype=object)[np.random.default_rng(seed).integers(0, len(LABELS), n)])
    values_create_many(attribute=attribute, owners=owners, raws=raws, ceiling=CEILING)
    return attribute.id


def _setup(n: int) -> list[int]:
    from django.db import connection, transaction

    from accounts.models import MoneyAccount

    ids = [_attribute(f"E5 attribute {k}", n, seed=k) for k in (1, 2)]
    snapshot_chains(FULL_CHAINS)  # market_chainpoint rows and the blocks' heads (benchmarks._postgres)
    for attribute_id in ids:
        stats = chain_stats(attribute_id)
        head = int(CEILING * 1_000_000)
        if stats["values"] != n or stats["points"] != (10, 10) or stats["heads"] != (head, head):
            raise RuntimeError(f"chains after set-up: {stats}, expected {n} values with 10 points (0.1 .. 1.0)")
    with transaction.atomic(), connection.cursor() as c:
        c.execute("INSERT INTO accounts_moneyaccount (user_id, kind, balance) "
                  "SELECT id, %s, 0 FROM accounts_user WHERE role = 'owner' ON CONFLICT DO NOTHING",
                  [MoneyAccount.Kind.OWNER_EARNINGS])
    MoneyAccount.objects.get_or_create(user=None, kind=MoneyAccount.Kind.PLATFORM)
    return ids


_buyers = 0


def _claims(attribute_ids: list[int], n: int) -> list[int]:
    """A fresh funded buyer per attribute, each with a claimed purchase of every value at EPSILON."""
    from market.models import Attribute
    from market.purchases.execution import purchase_claim

    global _buyers
    out = []
    for attribute_id in attribute_ids:
        _buyers += 1
        buyer = funded_buyer(f"e5-buyer-{_buyers}-{time.monotonic_ns()}", CREDIT_PER_VALUE * n)
        purchase, _ = purchase_claim(buyer=buyer, attribute=Attribute.objects.get(id=attribute_id),
                                     epsilon=EPSILON, cohort=None, idempotency_key=f"e5-{buyer.id}")
        out.append(purchase.id)
    return out


# --------------------------------------------------------------------------- the worker and the runs

class Worker:
    """A real Celery worker (prefork, concurrency 2) on the benchmark's database and Redis broker."""

    def __init__(self, log: Path):
        # The owners' settlement each purchase enqueues on commit goes to a queue this worker does not read: E5
        # times purchases, and a settlement is not part of one (docs/money.md#settlement).
        env = {**os.environ, "CELERY_TASK_ALWAYS_EAGER": "0", "LDP_SETTLE_QUEUE": "e5-settlements-not-run"}
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ldpmarket.celery:app", "worker", "--concurrency", "2", "--pool",
             "prefork", "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat", "-n",
             f"e5-{os.getpid()}@localhost"], env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Celery worker exited with {self.proc.returncode}: see {log}")
            if "ready." in Path(log).read_text():
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Celery worker did not become ready: see {log}")

    def text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def _wait(purchase_ids: list[int]) -> float:
    from market.models import Purchase

    deadline = time.monotonic() + WAIT_LIMIT
    while time.monotonic() < deadline:
        rows = dict(Purchase.objects.filter(id__in=purchase_ids).values_list("id", "status"))
        if any(s == Purchase.Status.FAILED for s in rows.values()):
            errors = list(Purchase.objects.filter(id__in=purchase_ids).values_list("error", flat=True))
            raise RuntimeError(f"a purchase failed: {errors}")
        if all(rows.get(i) == Purchase.Status.COMPLETED for i in purchase_ids):
            return time.perf_counter()
        time.sleep(POLL)
    raise RuntimeError(f"purchases {purchase_ids} did not complete within {WAIT_LIMIT} s")


def _send(purchase_id: int) -> None:
    from market.tasks import run_purchase

    run_purchase.delay(purchase_id)


_SUCCEEDED = re.compile(r"run_purchase\[[0-9a-f-]+\] succeeded in ([0-9.e-]+)s")


def _durations(worker: "Worker", seen: int) -> tuple[list[float], int]:
    """The run times the worker logged for the purchases finished since the ``seen`` first ones (each task's own
    time, from the worker's start of it to its end, commit included)."""
    found = [float(x) for x in _SUCCEEDED.findall(worker.text())]
    return found[seen:], len(found)


def _check(purchase_ids: list[int], n: int) -> None:
    from market.models import Purchase

    for p in Purchase.objects.filter(id__in=purchase_ids):
        if p.included != n or p.new_points != n:
            raise RuntimeError(f"purchase {p.id} included {p.included} and bridged {p.new_points}, expected {n}")


def _at_once(attribute_ids: list[int], n: int) -> float:
    ids = _claims(attribute_ids, n)
    start = time.perf_counter()
    for pid in ids:
        _send(pid)
    end = _wait(ids)
    _check(ids, n)
    return end - start


def _one_after_the_other(attribute_ids: list[int], n: int) -> float:
    ids = _claims(attribute_ids, n)
    start = time.perf_counter()
    for pid in ids:
        _send(pid)
        _wait([pid])
    end = time.perf_counter()
    _check(ids, n)
    return end - start


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    server = server_url("E5_POSTGRES_URL")
    db_url = with_db(server, DB_NAME)
    print(f"E5 no global lock on PostgreSQL (database {DB_NAME} on {urlsplit(server).hostname}), Redis {REDIS}: two "
          f"attributes of {_common.pow10(N)} values, two buyers, one purchase each at epsilon {EPSILON} (every value "
          f"bridged), run by one Celery worker with 2 processes: both at once vs one after the other; rounds "
          f"interleaved, judged by the median of {ROUNDS} rounds", flush=True)
    admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    admin(server, f"CREATE DATABASE {DB_NAME}")
    os.environ["REDIS_URL"] = REDIS
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"
    worker = None
    try:
        setup_django(db_url, DB_NAME)
        import redis

        redis.Redis.from_url(REDIS).flushdb()
        attribute_ids = _setup(N)
        print(f"  set up: two attributes, {2 * N:,} values with chains to {CEILING} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        worker = Worker(Path(os.environ.get("E5_WORKER_LOG", "/tmp/e5_worker.log")))
        both, seq, details, seen = [], [], [], 0
        for r in range(ROUNDS):
            restore_chains(FULL_CHAINS)
            t_both = _at_once(attribute_ids, N)
            time.sleep(0.5)  # the worker logs a task's end just after its commit
            d_both, seen = _durations(worker, seen)
            restore_chains(FULL_CHAINS)
            t_seq = _one_after_the_other(attribute_ids, N)
            time.sleep(0.5)
            d_seq, seen = _durations(worker, seen)
            both.append(t_both)
            seq.append(t_seq)
            details.append({"at_once_seconds": t_both, "at_once_each": d_both, "sequential_seconds": t_seq,
                            "sequential_each": d_seq})
            each_both, each_seq = (", ".join(f"{d:.2f}" for d in each) for each in (d_both, d_seq))
            print(f"  round {r + 1}/{ROUNDS} (load {_common.load_text()}): at once {t_both:.2f} s "
                  f"(each {each_both} s), one after the other {t_seq:.2f} s (each {each_seq} s): "
                  f"{t_both / t_seq:.2f}x", flush=True)
    finally:
        if worker is not None:
            worker.stop()
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001 - Django may not be set up
            pass
        admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    best_both, best_seq = min(both), min(seq)
    ratios = [b / s for b, s in zip(both, seq)]
    ratio = statistics.median(ratios)  # judged by the median round (each round's two runs side by side)
    print()
    _common.print_table(
        ["n per attribute", "at once s (best)", "one after the other s (best)", "median ratio", "target", "pass"],
        [[_common.pow10(N), f"{best_both:.2f}", f"{best_seq:.2f}", f"{ratio:.2f}x", f"<= {TARGET}x",
          "PASS" if ratio <= TARGET else "FAIL"]],
        title="E5: two purchases of different attributes by two worker processes at once vs one after the other "
              "(the median round's ratio)")
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"\n{verdict}  two attributes at once <= {TARGET}x sequential   median {ratio:.2f}x (rounds "
          f"{', '.join(f'{x:.2f}' for x in ratios)})")
    data = {"machine": info, "n_per_attribute": N, "rounds": ROUNDS, "epsilon": str(EPSILON),
            "at_once_best_seconds": best_both, "sequential_best_seconds": best_seq, "ratio": ratio,
            "ratio_each_round": ratios, "ratio_best_of_each_side": best_both / best_seq,
            "target": TARGET, "pass": ratio <= TARGET, "rounds_detail": details}
    path = _common.write_results(NAME, data)
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)")
    return data
