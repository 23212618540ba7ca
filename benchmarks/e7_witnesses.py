"""E7: witnessed checkpoints and the tiled log (issue 29; docs/receipts.md#witnesses, docs/receipts.md#the-tiled-log).

Two measurements, each on a fresh PostgreSQL database ``ldpbench_e7`` (created, migrated, dropped) behind E4's
server (``benchmarks.e4_api.Server``: gunicorn ``--workers 4 --threads 4`` on a free port of 127.0.0.1, throttles
off, a subprocess in its own process group).

**(1) From a purchase's commit to a checkpoint cosigned by two witnesses.**  Everything real, on loopback: the
server; a real Celery worker process (``python -m benchmarks.e7_witnesses --worker``: ``celery worker`` of
``ldpmarket.celery`` with the production settings, ``--pool prefork --concurrency 2`` as docker-compose runs it,
prefetch 1, Redis broker ``E7_REDIS_URL`` / ``E7_REDIS_DB`` (default redis://127.0.0.1:6379/14) under a key prefix
and queue of this run's own); and two witnesses of the client package, each ``ldpmarket-client witness serve`` in its
own process (keys made by ``ldpmarket-client witness keygen``), named with their URLs in the ``LDP_WITNESS_POLICY``
file the worker reads (``quorum`` both).  Per case (``E7_CASES``, ``values:leaves before:purchases``; default
``1e3:0:10,1e3:1e4:10,1e3:1e5:10,1e5:0:5``): an attribute of that many values set up as in E3 (chains at 0.1 .. 1.0,
``e3_purchase._setup``), and, for a case with leaves before, that many synthetic block leaves already in the
checkpoint log (written by COPY, see (2)) with their full tiles stored, as a log grown by earlier purchases would
have them.  Then one untimed warm-up cycle and ``purchases`` timed cycles, each:

- chains and budgets put back as E3 does (``e3_purchase._reset``, untimed), a fresh buyer;
- the purchase of every value at epsilon 0.35 in this process through the services, ``purchase_claim`` +
  ``purchase_execute`` (whose transaction has committed when it returns; the owners' settlement it enqueues held
  back as in E3).  **t = 0 is the moment ``purchase_execute`` returns.**
- at once, the checkpoint **as beat makes it**: the task ``market.tasks.make_ledger_checkpoint`` is sent to the
  worker's queue (what beat sends every ``LDP_CHECKPOINT_INTERVAL_SECONDS``; the wait for beat's next tick, up to
  that interval, is NOT included).  The worker runs ``checkpoint_make`` (one new leaf: the purchase's block), whose
  commit enqueues ``market.tasks.submit_checkpoint`` per witness, then ``store_full_tiles``; each submission POSTs
  ``add-checkpoint`` to its witness and stores the verified cosignature.
- this process polls ``GET /log/checkpoint`` over HTTP (keep-alive, a request every ``E7_POLL`` = 5 ms after the
  previous answer) until the note has the new tree size and both witnesses' cosignature lines: **the latency is the
  end of that request**.  The note is then verified (untimed): the log's signature and both cosignatures with
  their keys (``ldpmarket_client.tlog.note.open_note``), the tree size one more than before, the root the
  database's, and the purchase checked as E3 checks it.

Where the time goes, from wall-clock probes (``time.time``: the same clock in every process) that the worker
process installs in its pool processes (``worker_process_init``; the service code is not touched): Celery's
``task_prerun`` / ``task_postrun`` of each task, and the time spent in ``checkpoint_make`` (within it ``block_tree``,
the block's entries read and hashed; ``log_leaf_hashes``, every leaf of the log read and hashed; ``merkle.root``
over them), ``store_full_tiles``, ``witness_submit`` (within it the HTTP round trip of ``add-checkpoint``, and
``log_leaf_hashes`` and ``merkle.consistency_proof`` for the consistency proof from the size the witness holds).
The checkpoint and each submission read the whole log, so the latency grows with the log: the cases with leaves
before measure that.  "Stored" is when ``witness_submit`` returned (its transaction committed just before), so "stored
-> seen by the poller" can be a few ms below 0.  ``LedgerCosignature.received_at`` is the time ``witness_submit``
started (its ``now``), not when the answer came: it is recorded in the results, but the probes are what the
breakdown uses.

**(2) Tile serving under E4's load.**  E4's set-up (one attribute of 1,000 values, chains at 0.1 .. 1.0, one buyer
per client with a token), and a checkpoint log of ``E7_LEAVES`` (default 10^5) leaves written by one COPY as
``tests/accounts/test_log_tiles.py`` writes them, but as 135-byte version-2 **block** leaves (what checkpoints append
today; synthetic block ids, entry counts of 1,000), with a checkpoint over them whose signed note the log key signs
and two cosignatures from two witnesses of the client package run in this process (``ldpmarket_client.witness
.Witness``), stored by the service's own ``witnesses._cosigned`` (which verifies them): ``/log/checkpoint`` serves
what a deployment with two witnesses serves.  First, with one client (sequential): the first request of
``E7_COLD`` full level-0 tiles never stored (computed from 256 leaf rows and stored) and of the full level-1 tile
0 with none of its 256 level-0 tiles stored (computed from 65,536 leaf rows), each followed at once by the same
request again (stored); then ``store_full_tiles`` (what the checkpoint task runs after each checkpoint) stores the
rest, and the rightmost partial tiles (computed on every request) are timed too.  Then, with E4's machinery (its
``Client``: threads of this process, keep-alive ``http.client``, every request with the buyer's token as in E4, which
the log's views do not read; at 1, 8 and 32 clients, ``E7_CONCURRENCY``), for
``E7_ROUNDS`` rounds, side by side in each round and level: ``GET /health/`` (E4's floor), E4's quote ``POST
/api/v1/quotes/`` (the reference: ``E7_QUOTES`` requests), ``GET /log/checkpoint``, random full level-0 tiles,
random full level-1 tiles (if the log has one), random full entry bundles (``Accept-Encoding: gzip, identity`` on
every log request, as ``TileReader`` sends; ``E7_REQUESTS`` requests each).  A request is an error unless it
answers 200 (with 8,192 bytes for a tile, a gzip body for a bundle).  Correctness (untimed): the client's
``TileReader`` rebuilds the signed root from the served tiles and checks entry bundles against it, sampled full
tiles equal the client package's ``tiles_from_leaves`` of the leaves, and the served checkpoint's two cosignatures
verify.

Results: ``benchmarks/results/e7_witnesses_<date>_<machine tag>.json`` (tag: ``E7_MACHINE_TAG``, default a word
of the CPU model), with the machine, its load averages at the start, the end and before each case and round.
Run: ``python -m benchmarks e7``.  Tiny: ``E7_CASES=1e2:0:2,1e2:1e3:2 E7_LEAVES=3000 E7_CONCURRENCY=1,4
E7_ROUNDS=1 E7_REQUESTS=50 E7_QUOTES=20 python -m benchmarks e7``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from . import _common
from . import _postgres as postgres

NAME = "e7_witnesses"
DB_NAME = "ldpbench_e7"
ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("ldpmarket-client")


def _cases(text: str) -> list[tuple[int, int, int]]:
    out = []
    for part in filter(None, text.split(",")):
        values, before, count = part.split(":")
        out.append((int(float(values)), int(float(before)), int(count)))
    return out


CASES = _cases(os.environ.get("E7_CASES", "1e3:0:10,1e3:1e4:10,1e3:1e5:10,1e5:0:5"))
POLL = float(os.environ.get("E7_POLL", "0.005"))
WAIT = float(os.environ.get("E7_WAIT_SECONDS", "120"))
CONCURRENCY_WORKER = int(os.environ.get("E7_WORKER_CONCURRENCY", "2"))
REDIS = (os.environ.get("E7_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/") + "/"
         + os.environ.get("E7_REDIS_DB", "14"))
LEAVES = int(float(os.environ.get("E7_LEAVES", "1e5")))
COLD = int(os.environ.get("E7_COLD", "20"))
CONCURRENCY = tuple(int(x) for x in os.environ.get("E7_CONCURRENCY", "1,8,32").split(","))
ROUNDS = int(os.environ.get("E7_ROUNDS", "3"))
REQUESTS = int(os.environ.get("E7_REQUESTS", "1000"))
QUOTES = int(os.environ.get("E7_QUOTES", "300"))
VALUES = 1000  # E4's attribute
SEED = 20261129
WARMUP = 2
LOG_HEADERS = {"Accept-Encoding": "gzip, identity"}  # what TileReader sends
WITNESS_NAMES = ("w1", "w2")

MAKE = "market.tasks.make_ledger_checkpoint"
SUBMIT = "market.tasks.submit_checkpoint"
OPTIONS_ENV, QUEUE_ENV, PROBE_ENV = "E7_BROKER_OPTIONS", "E7_QUEUE", "E7_PROBE_LOG"

# probe labels (the worker's pool processes)
P_MAKE = "checkpoint_make"
P_BLOCK = "checkpoint_make: block_tree (the block's entries read, rehashed, entry tree)"
P_LOGHASH = "checkpoint_make: log_leaf_hashes (every leaf of the log read and hashed)"
P_TILES = "store_full_tiles"
P_SUBMIT = "witness_submit"
P_PROOF = "witness_submit: log_leaf_hashes (for the consistency proof)"
P_HTTP = "witness_submit: HTTP POST add-checkpoint (round trip)"
P_CPROOF = "witness_submit: merkle.consistency_proof"
P_ROOT = "merkle.root"  # in checkpoint_make outside block_tree: the log's root over every leaf hash


# --------------------------------------------------------------------------- the worker process (its own entry)

def _worker_main(argv: list[str]) -> None:
    """``celery worker`` of ``ldpmarket.celery`` with this run's broker options and queue, and the probes."""
    from celery.signals import task_postrun, task_prerun, worker_process_init

    from ldpmarket.celery import app

    app.conf.broker_transport_options = {**(app.conf.broker_transport_options or {}),
                                         **json.loads(os.environ[OPTIONS_ENV])}
    app.conf.task_default_queue = os.environ[QUEUE_ENV]  # what the worker enqueues (submissions) comes back here
    path = os.environ[PROBE_ENV]

    def record(**fields) -> None:
        with open(path, "a", encoding="utf-8") as fh:  # one short O_APPEND write per line
            fh.write(json.dumps(fields) + "\n")

    def pre(task_id=None, task=None, args=None, **_):
        record(ev="prerun", task=task.name, id=task_id, args=list(args or []), t=time.time(), pid=os.getpid())

    def post(task_id=None, task=None, retval=None, state=None, **_):
        safe = retval if isinstance(retval, (int, str, type(None))) else repr(retval)
        record(ev="postrun", task=task.name, id=task_id, retval=safe, state=state, t=time.time(), pid=os.getpid())

    def wrap(module, name: str, label: str) -> None:
        original = getattr(module, name)

        def timed(*args, **kwargs):
            t0 = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                t1 = time.time()
                record(ev="probe", what=label, t0=t0, t1=t1, pid=os.getpid(),
                       kw={k: v for k, v in kwargs.items() if isinstance(v, (int, str))})

        setattr(module, name, timed)

    def install(**_):
        import requests

        import market.tasks as tasks
        from accounts.ledger import checkpoints, merkle, witnesses

        wrap(tasks, "checkpoint_make", P_MAKE)
        wrap(tasks, "store_full_tiles", P_TILES)
        wrap(tasks, "witness_submit", P_SUBMIT)
        wrap(checkpoints, "block_tree", P_BLOCK)
        wrap(checkpoints, "log_leaf_hashes", P_LOGHASH)
        wrap(witnesses, "log_leaf_hashes", P_PROOF)
        wrap(merkle, "consistency_proof", P_CPROOF)  # only witness_submit calls it in the worker
        wrap(merkle, "root", P_ROOT)  # attributed by the interval it falls in

        class TimedRequests:  # what accounts.ledger.witnesses uses of requests, the POST timed
            RequestException = requests.RequestException
            Response = requests.Response

            @staticmethod
            def post(url, *args, **kwargs):
                t0 = time.time()
                status = None
                try:
                    answer = requests.post(url, *args, **kwargs)
                    status = answer.status_code
                    return answer
                finally:
                    record(ev="probe", what=P_HTTP, t0=t0, t1=time.time(), pid=os.getpid(), url=url, status=status)

        witnesses.requests = TimedRequests

    task_prerun.connect(pre, weak=False)
    task_postrun.connect(post, weak=False)
    worker_process_init.connect(install, weak=False)
    app.worker_main(["worker", *argv])


class Worker:
    """The Celery worker (``python -m benchmarks.e7_witnesses --worker``) in its own process group."""

    def __init__(self, db_url: str, policy_path: Path, tmp: Path):
        from celery import Celery

        self.tag = f"ldpbench-e7-{uuid.uuid4().hex[:10]}"
        self.queue = self.tag
        self.node = f"{self.tag}@localhost"
        self.options = {"global_keyprefix": f"{self.tag}:", "visibility_timeout": 3600}
        self.probe_path = tmp / "probes.jsonl"
        self.probe_path.touch()
        self._read = 0
        self.log_path = tmp / "worker.log"
        self.app = Celery(self.tag, broker=REDIS, set_as_current=False)
        self.app.conf.broker_transport_options = self.options
        self.app.conf.broker_connection_retry_on_startup = True
        self.app.conf.task_serializer = "json"
        env = {k: v for k, v in os.environ.items()
               if k not in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CELERY_TASK_ALWAYS_EAGER")}
        env.update({"DJANGO_SETTINGS_MODULE": "ldpmarket.settings", "DJANGO_DEBUG": "0", "DATABASE_URL": db_url,
                    "REDIS_URL": REDIS, "LDP_WITNESS_POLICY": str(policy_path), "PYTHONPATH": str(ROOT),
                    "LOG_LEVEL": "INFO",  # the worker's log (kept on failure) says what each task did
                    OPTIONS_ENV: json.dumps(self.options), QUEUE_ENV: self.queue, PROBE_ENV: str(self.probe_path)})
        self.cmd = [sys.executable, "-m", "benchmarks.e7_witnesses", "--worker", "--pool=prefork",
                    f"--concurrency={CONCURRENCY_WORKER}", "-Q", self.queue, "-n", self.node, "--loglevel=INFO",
                    "--without-gossip", "--without-mingle", "--without-heartbeat", "--prefetch-multiplier=1"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
            # by ping alone: whether its "ready." line is logged depends on the logging settings
            if self.app.control.ping(destination=[self.node], timeout=1.0):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the worker did not become ready:\n{self.text()[-3000:]}")

    def send(self, task_name: str, *args) -> None:
        self.app.send_task(task_name, args=list(args), queue=self.queue, ignore_result=True)

    def records(self) -> list[dict]:
        """The probe records written since the previous call."""
        with open(self.probe_path, encoding="utf-8") as fh:
            fh.seek(self._read)
            data = fh.read()
        complete = data[:data.rfind("\n") + 1]
        self._read += len(complete.encode())
        return [json.loads(line) for line in complete.splitlines() if line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self._log.close()
        with contextlib.suppress(Exception):
            import redis

            r = redis.Redis.from_url(REDIS)
            for key in r.scan_iter(match=f"{self.tag}:*"):
                r.delete(key)
        self.app.close()


class WitnessProcess:
    """``ldpmarket-client witness serve`` on a free port, in its own process group."""

    def __init__(self, name: str, tmp: Path, log_vkey: str, env: dict):
        from . import e4_api as e4

        self.name, self.port = name, e4._free_port()
        key = tmp / f"{name}.key"
        done = subprocess.run([str(CLI), "witness", "keygen", "--name", f"{name}.e7.bench/ldpmarket", "--out",
                               str(key)], capture_output=True, text=True, env=env, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"witness keygen: {done.stdout}{done.stderr}")
        self.vkey = done.stdout.strip()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"{name}.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(CLI), "witness", "serve", "--key", str(key), "--db",
                                      str(tmp / f"{name}.sqlite3"), "--log", log_vkey, "--listen",
                                      f"127.0.0.1:{self.port}"], stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait_ready(self, timeout: float = 30) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"witness {self.name} exited: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.1)
        raise RuntimeError(f"witness {self.name} does not listen on {self.port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


# --------------------------------------------------------------------------- database

def _fresh_database(server: str) -> str:
    postgres.admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    postgres.admin(server, f"CREATE DATABASE {DB_NAME}")
    db_url = postgres.with_db(server, DB_NAME)
    postgres.setup_django(db_url, DB_NAME)
    return db_url


def _drop_database(server: str) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connections

    with contextlib.suppress(ImproperlyConfigured):
        connections.close_all()
    postgres.admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def synthetic_leaves(n: int):
    """``n`` version-2 block leaves appended to the checkpoint log by one COPY (synthetic block ids from 10^12, so
    no real block's; entry count 1,000, one chunk root) and a checkpoint over the whole log with its signed note;
    the checkpoint.  Checkpoints and leaves are append-only: the root is computed before they are written."""
    from django.db import connection

    from accounts.ledger import merkle, notes, signing
    from accounts.ledger.leaves import LEAF_VERSION, leaf_data, log_leaf_hashes
    from accounts.models import LedgerCheckpoint, LedgerCheckpointLeaf
    from ldpmarket import storage

    start = LedgerCheckpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True).first() or 0
    size = start + n
    created = datetime(2026, 11, 1, tzinfo=UTC)
    leaves = []
    for i in range(start, size):
        h = hashlib.sha256(b"e7 block %d" % i).digest()
        leaves.append(LedgerCheckpointLeaf(
            index=i, shard=1 + i % 7, blocks=1 + i // 7, head_hash=h.hex(), block_id=10**12 + i, entry_count=1000,
            block_created_at=created, entries_root=hashlib.sha256(h).hexdigest(), chunk_roots=hashlib.sha256(h * 2)
            .digest(), version=LEAF_VERSION))
    root = merkle.root(log_leaf_hashes() + [merkle.leaf_hash(leaf_data(leaf)) for leaf in leaves]).hex()
    now = datetime.now(UTC)
    checkpoint = LedgerCheckpoint.objects.create(
        created_at=now, tree_size=size, root_hash=root, key_id=signing.key_id(),
        signature=signing.sign(signing.statement(size, root, now)), note=notes.sign_checkpoint(size, root))
    for leaf in leaves:
        leaf.checkpoint = checkpoint
    fields = LedgerCheckpointLeaf._meta.concrete_fields
    storage.insert_rows(LedgerCheckpointLeaf._meta.db_table, [connection.ops.quote_name(f.column) for f in fields],
                        [tuple(getattr(leaf, f.attname) for f in fields) for leaf in leaves])
    with connection.cursor() as c:
        c.execute("ANALYZE accounts_ledgercheckpointleaf")
    return checkpoint


# --------------------------------------------------------------------------- (1) witnessed checkpoints

def _cosigners(payload: bytes, size: int, names: list[str]) -> bool:
    """Cheap check while polling: the note's tree size line and a signature line of each witness key name."""
    text = payload.decode("utf-8", "replace")
    lines = text.split("\n")
    if len(lines) < 3 or lines[1] != str(size):
        return False
    return all(any(line.startswith(f"\u2014 {name} ") for line in lines) for name in names)


def _verify_note(payload: bytes, log_vkey: str, witness_vkeys: dict[str, str], size: int, root_hex: str) -> None:
    from ldpmarket_client.tlog.checkpoint import parse_checkpoint
    from ldpmarket_client.tlog.note import open_note, parse_vkey

    log_key = parse_vkey(log_vkey)
    by_key = {parse_vkey(v): name for name, v in witness_vkeys.items()}
    note = open_note(payload, [log_key, *by_key])
    cp = parse_checkpoint(note.text)
    signed_by = {by_key.get(v, "log" if v == log_key else "?") for v, _, _ in note.verified}
    if cp.size != size or cp.root != bytes.fromhex(root_hex) or signed_by != {"log", *witness_vkeys}:
        raise RuntimeError(f"served checkpoint: size {cp.size} (wanted {size}), root {cp.root.hex()} (wanted "
                           f"{root_hex}), verified signatures of {sorted(signed_by)}")


def _parts(recs: list[dict], t_commit: float, t_sent: float, t_seen: float, names_by_url: dict[str, str]) -> dict:
    """One cycle's timeline from the worker's probe records (seconds after the purchase's commit)."""
    def one(pred, what):
        hits = [r for r in recs if pred(r)]
        if len(hits) != 1:
            raise RuntimeError(f"expected one {what} in the worker's records, found {len(hits)}: {hits}")
        return hits[0]

    def probes(label):
        return [r for r in recs if r["ev"] == "probe" and r["what"] == label]

    def inside(inner, outer):
        return inner["pid"] == outer["pid"] and outer["t0"] <= inner["t0"] and inner["t1"] <= outer["t1"]

    make_pre = one(lambda r: r["ev"] == "prerun" and r["task"] == MAKE, "make_ledger_checkpoint start")
    make_post = one(lambda r: r["ev"] == "postrun" and r["task"] == MAKE, "make_ledger_checkpoint end")
    make = one(lambda r: r["ev"] == "probe" and r["what"] == P_MAKE, "checkpoint_make")
    store = one(lambda r: r["ev"] == "probe" and r["what"] == P_TILES, "store_full_tiles")
    block = one(lambda r: r["ev"] == "probe" and r["what"] == P_BLOCK, "block_tree")
    loghash = one(lambda r: r["ev"] == "probe" and r["what"] == P_LOGHASH, "log_leaf_hashes in checkpoint_make")
    subs_pre = [r for r in recs if r["ev"] == "prerun" and r["task"] == SUBMIT]
    subs_post = [r for r in recs if r["ev"] == "postrun" and r["task"] == SUBMIT]
    submits, https, proofs = probes(P_SUBMIT), probes(P_HTTP), probes(P_PROOF)
    if len(subs_pre) != 2 or len(subs_post) != 2 or len(submits) != 2 or len(https) != 2:
        raise RuntimeError(f"expected two submissions, got {len(subs_pre)} started, {len(subs_post)} ended, "
                           f"{len(submits)} witness_submit, {len(https)} POSTs: {recs}")
    if sorted(r["retval"] for r in subs_post) != ["cosigned", "cosigned"] or make_post["retval"] is None:
        raise RuntimeError(f"submissions answered {[r['retval'] for r in subs_post]}, checkpoint "
                           f"{make_post['retval']}")

    def rel(t):
        return t - t_commit

    per_witness = {}
    for http in https:
        name = names_by_url[http["url"].rsplit("/add-checkpoint", 1)[0]]
        # the witness_submit call around this POST (same pool process, enclosing it)
        sub = next(s for s in submits if s["pid"] == http["pid"] and s["t0"] <= http["t0"] and http["t1"] <= s["t1"])
        pre = max((p for p in subs_pre if p["pid"] == sub["pid"] and p["t"] <= sub["t0"]), key=lambda p: p["t"])
        proof = [p for p in proofs if inside(p, sub)]
        cproof = [p for p in probes(P_CPROOF) if inside(p, sub)]
        per_witness[name] = {
            "task_started": rel(pre["t"]), "queued_after_checkpoint_commit": pre["t"] - make["t1"],
            "witness_submit_seconds": sub["t1"] - sub["t0"], "http_round_trip_seconds": http["t1"] - http["t0"],
            "http_status": http["status"],
            "proof_leaves_seconds": sum(p["t1"] - p["t0"] for p in proof),
            "consistency_proof_seconds": sum(p["t1"] - p["t0"] for p in cproof),
            "rest_seconds": (sub["t1"] - sub["t0"]) - (http["t1"] - http["t0"]) - sum(p["t1"] - p["t0"]
                                                                                        for p in proof + cproof),
            "cosignature_stored": rel(sub["t1"]),
        }
    last = max(w["cosignature_stored"] for w in per_witness.values())
    return {
        "total_seconds": rel(t_seen),
        "send_seconds": t_sent - t_commit,
        "checkpoint_task_started": rel(make_pre["t"]),
        "checkpoint_make_seconds": make["t1"] - make["t0"],
        "block_tree_seconds": block["t1"] - block["t0"],
        "log_leaf_hashes_seconds": loghash["t1"] - loghash["t0"],
        "log_root_seconds": sum(r["t1"] - r["t0"] for r in probes(P_ROOT) if inside(r, make) and not inside(r, block)),
        "checkpoint_committed": rel(make["t1"]),
        "store_full_tiles_seconds": store["t1"] - store["t0"],
        "checkpoint_task_end": rel(make_post["t"]),
        "witnesses": per_witness,
        "both_cosignatures_stored": last,
        "first_submission_started": min(w["task_started"] for w in per_witness.values()),
        "submissions_span_seconds": last - rel(make["t1"]),
        "seen_after_stored_seconds": rel(t_seen) - last,
    }


def _poll(client, size: int, names: list[str], deadline: float) -> tuple[float, bytes, int, list[float]]:
    """GET /log/checkpoint until it is the checkpoint of ``size`` with a cosignature line of each of ``names``;
    the end of that request, its body, the requests made and the gaps between request starts."""
    polls, starts = 0, []
    while True:
        t0 = time.time()
        status, payload = client.post("/log/checkpoint", None, LOG_HEADERS)
        t1 = time.time()
        polls += 1
        starts.append(t0)
        if status == 200 and _cosigners(payload, size, names):
            return t1, payload, polls, [b - a for a, b in zip(starts, starts[1:])]
        if t1 > deadline:
            raise RuntimeError(f"/log/checkpoint not cosigned at size {size} after {WAIT} s: HTTP {status} "
                               f"{payload[:400]!r}")
        time.sleep(POLL)


def witnessed_case(server: str, values: int, before: int, purchases: int, tmp: Path) -> dict:
    t_setup = time.perf_counter()
    db_url = _fresh_database(server)  # Django set up (first) on it
    from django.db import connections

    from accounts.ledger import signing, tiles
    from accounts.models import LedgerCheckpoint, LedgerCosignature, LedgerRelease
    from market.models import Attribute
    from market.purchases.execution import purchase_claim, purchase_execute

    from . import e3_purchase as e3
    from . import e4_api as e4

    label = f"{_common.pow10(values)} values, {before} leaves before"
    attribute_id = e3._setup(values)
    prior = {}
    if before:
        t0 = time.perf_counter()
        cp = synthetic_leaves(before)
        prior["leaves_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        prior["tiles_stored"] = tiles.store_full_tiles(cp.tree_size)
        prior["store_full_tiles_seconds"] = time.perf_counter() - t0
    log_vkey = signing.vkey()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPMARKET_")}
    env["LDPMARKET_CONFIG"] = str(tmp / "client-config.json")
    witnesses = {name: WitnessProcess(name, tmp, log_vkey, env) for name in WITNESS_NAMES}
    policy_path = tmp / "witnesses.policy"
    policy_path.write_text("".join(f"witness {w.name} {w.vkey} {w.url}\n" for w in witnesses.values())
                           + f"group both all {' '.join(WITNESS_NAMES)}\nquorum both\n")
    names = [f"{name}.e7.bench/ldpmarket" for name in WITNESS_NAMES]
    names_by_url = {w.url: w.name for w in witnesses.values()}
    connections.close_all()
    srv = worker = None
    cycles, warm = [], None
    try:
        for w in witnesses.values():
            w.wait_ready()
        srv = e4.Server(db_url, tmp / "gunicorn.log")
        worker = Worker(db_url, policy_path, tmp)
        srv.wait_ready()
        worker.wait_ready()
        client = e4.Client(srv.port)
        setup_seconds = time.perf_counter() - t_setup
        print(f"  {label}: set up in {setup_seconds:.0f} s (gunicorn pid {srv.proc.pid}, worker pid "
              f"{worker.proc.pid}, witnesses {', '.join(f'{w.name} :{w.port}' for w in witnesses.values())})"
              + (f"; {before} synthetic leaves by COPY in {prior['leaves_seconds']:.1f} s, {prior['tiles_stored']} "
                 f"full tiles stored in {prior['store_full_tiles_seconds']:.1f} s" if before else ""), flush=True)
        for k in range(purchases + 1):
            e3._reset()  # chains and budgets as after the set-up (vacuumed, checkpointed)
            size_before = LedgerCheckpoint.objects.order_by("-tree_size").values_list("tree_size",
                                                                                        flat=True).first() or 0
            buyer = e3._new_buyer(values)
            attribute = Attribute.objects.get(id=attribute_id)
            worker.records()  # what came before this cycle
            load = _common.load_text()
            with e3._HeldSettlements() as held:
                claimed, created = purchase_claim(buyer=buyer, attribute=attribute, epsilon=e3.EPSILON, cohort=None,
                                                  idempotency_key=f"e7-{buyer.id}")
                purchase = purchase_execute(purchase_id=claimed.id)
                t_commit = time.time()
            worker.send(MAKE)
            t_sent = time.time()
            t_seen, payload, polls, gaps = _poll(client, size_before + 1, names, t_commit + WAIT)
            # the worker's records of this cycle: the checkpoint task and both submissions ended
            deadline = time.monotonic() + 30
            recs = worker.records()
            while (sum(r["ev"] == "postrun" and r["task"] == SUBMIT for r in recs) < 2
                   or not any(r["ev"] == "postrun" and r["task"] == MAKE for r in recs)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker's records are incomplete: {recs}\n{worker.text()[-3000:]}")
                time.sleep(0.05)
                recs += worker.records()
            # correctness, untimed
            if not created or purchase.status != "completed" or held.held != [(attribute_id,)]:
                raise RuntimeError(f"purchase {purchase.id}: {purchase.status}, settlements {held.held}")
            e3._check(attribute_id, values, purchase.id)
            cp = LedgerCheckpoint.objects.order_by("-tree_size").first()
            blocks = set(LedgerRelease.objects.filter(purchase_id=purchase.id).values_list("block_id", flat=True))
            if cp.tree_size != size_before + 1 or len(blocks) != 1:
                raise RuntimeError(f"checkpoint of size {cp.tree_size} after {size_before}; the purchase's blocks "
                                   f"{blocks}")
            _verify_note(payload, log_vkey, {n_: w.vkey for n_, w in zip(names, witnesses.values())},
                         cp.tree_size, cp.root_hash)
            received = {c.witness.name: (c.received_at.timestamp() - t_commit)
                        for c in LedgerCosignature.objects.filter(checkpoint=cp).select_related("witness")}
            parts = _parts(recs, t_commit, t_sent, t_seen, names_by_url)
            parts.update({"tree_size": cp.tree_size, "polls": polls,
                          "poll_gap_median_seconds": statistics.median(gaps) if gaps else None,
                          "received_at_after_commit_seconds": received, "load_before": load,
                          "checkpoint_created_at_after_commit_seconds": cp.created_at.timestamp() - t_commit})
            if k == 0:
                warm = parts
                what = "warm-up (untimed)"
            else:
                cycles.append(parts)
                what = f"{k}/{purchases}"
            w1, w2 = (parts["witnesses"][n_] for n_ in WITNESS_NAMES)
            print(f"  {label} {what}: commit -> cosigned by both on /log/checkpoint {1e3 * parts['total_seconds']:.0f} "
                  f"ms (checkpoint_make {1e3 * parts['checkpoint_make_seconds']:.0f} ms, committed at "
                  f"{1e3 * parts['checkpoint_committed']:.0f}; POST round trips "
                  f"{1e3 * w1['http_round_trip_seconds']:.1f}"
                  f" / {1e3 * w2['http_round_trip_seconds']:.1f} ms; both stored at "
                  f"{1e3 * parts['both_cosignatures_stored']:.0f}, seen {1e3 * parts['seen_after_stored_seconds']:.0f} "
                  f"ms later, {polls} polls); load {load}", flush=True)
    finally:
        for thing in (worker, srv, *witnesses.values()):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.stop()
        _drop_database(server)
    return {"values": values, "leaves_before": before, "purchases": purchases, "prior_log": prior,
            "setup_seconds": setup_seconds, "warmup": warm, "cycles": cycles, "summary": _summary(cycles),
            "worker_command": " ".join(worker.cmd[1:]) if worker else None}


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "q1": q[0], "q3": q[2], "n": len(xs)}


PART_KEYS = [
    ("commit -> checkpoint task started (send, Redis, pool)", lambda c: c["checkpoint_task_started"]),
    ("checkpoint_make", lambda c: c["checkpoint_make_seconds"]),
    ("  of which block_tree", lambda c: c["block_tree_seconds"]),
    ("  of which log_leaf_hashes", lambda c: c["log_leaf_hashes_seconds"]),
    ("  of which the log's root (merkle.root)", lambda c: c["log_root_seconds"]),
    ("store_full_tiles (after the commit)", lambda c: c["store_full_tiles_seconds"]),
    ("checkpoint_make returned -> both cosignatures stored", lambda c: c["submissions_span_seconds"]),
    ("  submission queued after checkpoint_make returned (mean)",
     lambda c: statistics.mean(w["queued_after_checkpoint_commit"] for w in c["witnesses"].values())),
    ("  witness_submit (each, mean)",
     lambda c: statistics.mean(w["witness_submit_seconds"] for w in c["witnesses"].values())),
    ("    of which POST add-checkpoint round trip",
     lambda c: statistics.mean(w["http_round_trip_seconds"] for w in c["witnesses"].values())),
    ("    of which log_leaf_hashes (proof)",
     lambda c: statistics.mean(w["proof_leaves_seconds"] for w in c["witnesses"].values())),
    ("    of which merkle.consistency_proof",
     lambda c: statistics.mean(w["consistency_proof_seconds"] for w in c["witnesses"].values())),
    ("stored -> seen by the poller", lambda c: c["seen_after_stored_seconds"]),
    ("commit -> checkpoint_make returned (committed)", lambda c: c["checkpoint_committed"]),
    ("commit -> both stored", lambda c: c["both_cosignatures_stored"]),
    ("TOTAL commit -> seen cosigned on /log/checkpoint", lambda c: c["total_seconds"]),
]


def _summary(cycles: list[dict]) -> dict:
    return {label: _stats([f(c) for c in cycles]) for label, f in PART_KEYS}


# --------------------------------------------------------------------------- (2) tiles under E4's load

def _cosign_in_process(checkpoint) -> dict[str, str]:
    """Two witnesses of the client package (in this process, state in a temporary SQLite file each) cosign
    ``checkpoint``; the service's own ``witnesses._cosigned`` verifies and stores each answer; name -> vkey."""
    from django.utils import timezone

    from accounts.ledger import signing
    from accounts.ledger import witnesses as service
    from accounts.models import LedgerWitness
    from ldpmarket_client.tlog.note import COSIGNATURE_V1, Signer, parse_vkey
    from ldpmarket_client.witness import Witness

    out = {}
    with tempfile.TemporaryDirectory(prefix="e7-cosign-") as tmp:
        for name in WITNESS_NAMES:
            signer = Signer.generate(f"{name}.e7.bench/ldpmarket", COSIGNATURE_V1)
            vkey = signer.verifier.vkey
            answer = Witness(signer, [parse_vkey(signing.vkey())], Path(tmp) / f"{name}.sqlite3").add_checkpoint(
                service.add_checkpoint_body(0, checkpoint))
            row = LedgerWitness.objects.create(name=name, url=f"http://127.0.0.1:9/{name}", vkey=vkey)
            if service._cosigned(row, parse_vkey(vkey), checkpoint, answer, timezone.now()) != "cosigned":
                raise RuntimeError(f"the cosignature of {name} was not stored")
            out[signer.name] = vkey
    return out


def _phase(clients, make, total: int) -> dict:
    """``total`` requests from ``len(clients)`` threads at once (E4's ``_phase`` with any request)."""
    import numpy as np

    lock = threading.Lock()
    counter = iter(range(total))
    latencies, errors = [], []
    gate = threading.Barrier(len(clients) + 1)

    def work(client):
        gate.wait()
        while True:
            with lock:
                seq = next(counter, None)
            if seq is None:
                return
            path, body, headers, check = make(seq)
            t = time.perf_counter()
            try:
                status, payload = client.post(path, body, headers)
                err = check(status, payload)
            except Exception as exc:
                err = f"{type(exc).__name__}: {exc}"
            elapsed = time.perf_counter() - t
            with lock:
                (errors if err else latencies).append(err or elapsed)

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in clients]
    for th in threads:
        th.start()
    t0 = time.perf_counter()
    gate.wait()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return {"clients": len(clients), "requested": total, "ok": len(latencies), "errors": len(errors),
            "error_samples": sorted(set(errors))[:5], "wall_seconds": wall, "rps": total / wall,
            "p50_ms": float(np.percentile(lat, 50) * 1e3), "p99_ms": float(np.percentile(lat, 99) * 1e3),
            "max_ms": float(lat.max() * 1e3)}


def _status(expected: int, size: int | None = None, gz: bool = False):
    def check(status, payload):
        if status != expected:
            return f"HTTP {status}: {payload[:200]!r}"
        if size is not None and len(payload) != size:
            return f"{len(payload)} bytes, expected {size}"
        if gz and not payload.startswith(b"\x1f\x8b"):
            return "not gzip"
        return None

    return check


def _makers(attribute_id: int, size: int) -> dict:
    from accounts.ledger import tiles
    from ldpmarket_client.tlog.tiles import Tile

    from . import e4_api as e4

    full0, full1 = tiles.hashes_at(0, size) // 256, tiles.hashes_at(1, size) // 256
    rng = random.Random(SEED)
    picks0 = [rng.randrange(full0) for _ in range(max(REQUESTS, QUOTES) + 64 * WARMUP)]
    picks1 = [rng.randrange(full1) for _ in range(len(picks0))] if full1 else []
    picksb = [rng.randrange(full0) for _ in range(len(picks0))]
    ok, tile_ok, gz_ok = _status(200), _status(200, 8192), _status(200, gz=True)
    makers = {
        "health": lambda s: ("/health/", None, {}, ok),
        "quote": lambda s: ("/api/v1/quotes/", {"attribute": attribute_id, "epsilon": e4.EPSILONS[s % 8]}, {}, ok),
        "checkpoint": lambda s: ("/log/checkpoint", None, LOG_HEADERS, ok),
        "tile L0": lambda s: ("/log/" + Tile(0, picks0[s % len(picks0)], 256).path, None, LOG_HEADERS, tile_ok),
    }
    if full1:
        makers["tile L1"] = lambda s: ("/log/" + Tile(1, picks1[s % len(picks1)], 256).path, None, LOG_HEADERS,
                                       tile_ok)
    makers["entries"] = lambda s: ("/log/" + Tile(None, picksb[s % len(picksb)], 256).path, None, LOG_HEADERS, gz_ok)
    return makers


def _timed_get(client, path: str) -> float:
    t = time.perf_counter()
    status, payload = client.post(path, None, LOG_HEADERS)
    elapsed = time.perf_counter() - t
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status} {payload[:200]!r}")
    return elapsed


def _cold_and_stored(port: int, size: int) -> dict:
    """One client, one request at a time: never-stored full tiles, the same once stored, partial tiles."""
    from accounts.ledger import tiles
    from accounts.models import LedgerTile
    from ldpmarket_client.tlog.tiles import Tile

    from . import e4_api as e4

    client = e4.Client(port)
    full0, full1 = tiles.hashes_at(0, size) // 256, tiles.hashes_at(1, size) // 256
    rightmost = Tile(0, full0, tiles.hashes_at(0, size) % 256 or 1)
    for _ in range(5):  # the connection and a server thread warm, nothing stored (a partial tile is never stored)
        _timed_get(client, "/log/checkpoint")
        _timed_get(client, "/log/" + rightmost.path)
    if LedgerTile.objects.exists():
        raise RuntimeError("tiles are stored before the first request")
    # level-0 tiles outside the full level-1 tiles (so that level-1 tile 0 is computed from no stored tile)
    candidates = list(range(full1 * 256, full0)) if full0 - full1 * 256 >= COLD else list(range(full0))
    sample = sorted(random.Random(SEED + 1).sample(candidates, min(COLD, len(candidates))))
    out = {"level0_sample": sample, "level0_first_ms": [], "level0_stored_ms": []}
    for i in sample:  # each tile's first request, then at once the same tile again (stored): pairs side by side
        out["level0_first_ms"].append(1e3 * _timed_get(client, "/log/" + Tile(0, i, 256).path))
        out["level0_stored_ms"].append(1e3 * _timed_get(client, "/log/" + Tile(0, i, 256).path))
    out["level0_first_over_stored_median"] = statistics.median(
        a / b for a, b in zip(out["level0_first_ms"], out["level0_stored_ms"]))
    if full1:
        stored_below = LedgerTile.objects.filter(level=0, index__lt=256).count()
        out["level1_tile0_first_ms"] = 1e3 * _timed_get(client, "/log/" + Tile(1, 0, 256).path)
        out["level1_tile0_first_level0_stored_before"] = stored_below
        out["level1_tile0_stored_ms"] = [1e3 * _timed_get(client, "/log/" + Tile(1, 0, 256).path)
                                         for _ in range(COLD)]
    t0 = time.perf_counter()
    out["store_full_tiles_stored"] = tiles.store_full_tiles(size)
    out["store_full_tiles_seconds"] = time.perf_counter() - t0
    partial = {}
    level = 0
    while tiles.hashes_at(level, size):
        width = tiles.hashes_at(level, size) % 256
        if width:
            t = Tile(level, tiles.hashes_at(level, size) // 256, width)
            partial[f"L{level} {t.path} (width {width})"] = statistics.median(
                1e3 * _timed_get(client, "/log/" + t.path) for _ in range(COLD))
        level += 1
    out["partial_tiles_median_ms"] = partial
    client.close()
    return out


def _verify_served(port: int, size: int, root_hex: str, witness_vkeys: dict[str, str]) -> None:
    """Untimed: the client's TileReader rebuilds the signed root from the served tiles and checks entry bundles;
    sampled full tiles equal the client package's tiling of the leaves; the checkpoint's cosignatures verify."""
    import requests

    from accounts.ledger import signing, tiles
    from accounts.ledger.leaves import log_leaf_hashes
    from ldpmarket_client.tlog.tiles import Tile, TileReader, tiles_from_leaves

    session = requests.Session()
    reader = TileReader(f"http://127.0.0.1:{port}/log/", signing.origin(), [signing.vkey()], session=session)
    tree = reader.tree()
    if tree.size != size or tree.root != bytes.fromhex(root_hex):
        raise RuntimeError("the served tiles do not rebuild the signed root")
    rng = random.Random(SEED + 2)
    for _ in range(3):
        a = rng.randrange(max(1, size - 300))
        reader.entries(tree, a, min(size, a + 300))
    want = tiles_from_leaves(log_leaf_hashes())  # the client package's own tiling of the leaves
    for level in (0, 1):
        count = tiles.hashes_at(level, size) // 256
        for index in rng.sample(range(count), min(count, 10)):
            got = session.get(f"http://127.0.0.1:{port}/log/" + Tile(level, index, 256).path, timeout=30).content
            if got != want[level, index]:
                raise RuntimeError(f"served tile {level}/{index} differs from the pure tile")
    payload = session.get(f"http://127.0.0.1:{port}/log/checkpoint", timeout=30).content
    _verify_note(payload, signing.vkey(), witness_vkeys, size, root_hex)
    session.close()


def tiles_case(server: str, tmp: Path) -> dict:
    from decimal import Decimal

    t_setup = time.perf_counter()
    _fresh_database(server)  # Django set up (first) on it

    from django.contrib.auth.hashers import make_password
    from django.db import connections

    from accounts.models import MoneyAccount, MoneyEntry, User

    from . import e3_purchase as e3
    from . import e4_api as e4

    db_url = postgres.with_db(server, DB_NAME)
    attribute_id = e3._setup(VALUES)
    password = make_password(e4.BUYER_PASSWORD)
    for i in range(max(CONCURRENCY)):
        buyer = User.objects.create(username=f"e4-buyer-{i:02d}", role=User.Role.BUYER, password=password)
        account = MoneyAccount.objects.create(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT, balance=Decimal(1000))
        MoneyEntry.objects.create(account=account, amount=Decimal(1000), balance_after=Decimal(1000),
                                  memo="benchmark credit")
    t0 = time.perf_counter()
    cp = synthetic_leaves(LEAVES)
    leaves_seconds = time.perf_counter() - t0
    vkeys = _cosign_in_process(cp)
    postgres.checkpoint()
    connections.close_all()
    srv = None
    levels = []
    try:
        srv = e4.Server(db_url, tmp / "gunicorn-tiles.log")
        srv.wait_ready()
        print(f"  tiles: log of {LEAVES} block leaves by COPY in {leaves_seconds:.1f} s, two cosignatures; gunicorn "
              f"up (set-up {time.perf_counter() - t_setup:.0f} s)", flush=True)
        cold = _cold_and_stored(srv.port, cp.tree_size)
        level1 = (f"; level-1 tile 0 first {cold['level1_tile0_first_ms']:.0f} ms (no level-0 tile under it "
                  f"stored), stored {statistics.median(cold['level1_tile0_stored_ms']):.1f} ms"
                  if "level1_tile0_first_ms" in cold else "")
        print(f"  tiles, one client: level-0 full tile first request median "
              f"{statistics.median(cold['level0_first_ms']):.1f} ms, stored "
              f"{statistics.median(cold['level0_stored_ms']):.1f} ms{level1}; store_full_tiles of the rest "
              f"{cold['store_full_tiles_seconds']:.1f} s ({cold['store_full_tiles_stored']} tiles); partial tiles "
              f"{cold['partial_tiles_median_ms']}", flush=True)
        _verify_served(srv.port, cp.tree_size, cp.root_hash, vkeys)
        tokens = [e4._token(srv.port, f"e4-buyer-{i:02d}") for i in range(max(CONCURRENCY))]
        makers = _makers(attribute_id, cp.tree_size)
        for r in range(ROUNDS):
            for c in CONCURRENCY:
                clients = [e4.Client(srv.port, tokens[i]) for i in range(c)]

                def warm(client, i):
                    for kind, make in makers.items():
                        for k in range(WARMUP):
                            path, body, headers, _ = make(64 * k + i)
                            client.post(path, body, headers)

                ths = [threading.Thread(target=warm, args=(cl, i), daemon=True) for i, cl in enumerate(clients)]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
                load = _common.load_text()
                phases = {kind: _phase(clients, make, QUOTES if kind == "quote" else REQUESTS)
                          for kind, make in makers.items()}
                for cl in clients:
                    cl.close()
                levels.append({"round": r + 1, "clients": c, "load_before": load, "phases": phases})
                print(f"  tiles round {r + 1}/{ROUNDS}, {c:>2} clients (load {load}): "
                      + ", ".join(f"{k} {p['rps']:.0f}/s" + (f" ({p['errors']} errors)" if p["errors"] else "")
                                  for k, p in phases.items()), flush=True)
        alive = srv.proc.poll() is None
    finally:
        if srv is not None:
            srv.stop()
        _drop_database(server)
    return {"leaves": LEAVES, "tree_size": cp.tree_size, "leaves_copy_seconds": leaves_seconds,
            "cold_and_stored": cold, "levels": levels, "server_alive_at_end": alive,
            "server": "gunicorn ldpmarket.wsgi:application " + " ".join(srv.cmd[2:])}


def _tiles_summary(part: dict) -> dict:
    """Per number of clients and kind: median over the rounds of req/s, p50, p99, and of the ratio to the quote
    and to /health/ of the same round."""
    out = {}
    for c in CONCURRENCY:
        rounds = [lv for lv in part["levels"] if lv["clients"] == c]
        kinds = list(rounds[0]["phases"])
        out[str(c)] = {kind: {
            "rps_median": statistics.median(lv["phases"][kind]["rps"] for lv in rounds),
            "rps_rounds": [lv["phases"][kind]["rps"] for lv in rounds],
            "p50_ms_median": statistics.median(lv["phases"][kind]["p50_ms"] for lv in rounds),
            "p99_ms_median": statistics.median(lv["phases"][kind]["p99_ms"] for lv in rounds),
            "x_quote_median": statistics.median(lv["phases"][kind]["rps"] / lv["phases"]["quote"]["rps"]
                                                for lv in rounds),
            "x_health_median": statistics.median(lv["phases"][kind]["rps"] / lv["phases"]["health"]["rps"]
                                                 for lv in rounds),
            "errors": sum(lv["phases"][kind]["errors"] for lv in rounds),
        } for kind in kinds}
    return out


# --------------------------------------------------------------------------- main

def _machine_tag(info: dict) -> str:
    tag = os.environ.get("E7_MACHINE_TAG")
    if tag:
        return re.sub(r"[^a-z0-9-]+", "-", tag.lower())
    words = [w for w in re.findall(r"[a-z0-9]+", info["cpu_model"].lower())
             if w not in {"amd", "intel", "r", "tm", "cpu", "processor", "genuine", "core"}]
    return words[0] if words else "machine"


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    server = postgres.server_url("E7_POSTGRES_URL", "E3_POSTGRES_URL", "E2_POSTGRES_URL")
    print(f"E7 witnessed checkpoints and the tiled log: database {DB_NAME} on {urlsplit(server).hostname}, E4's "
          f"gunicorn; (1) cases (values, leaves before, purchases) {CASES}: purchase commit -> make_ledger_checkpoint "
          f"sent to a real worker (prefork x{CONCURRENCY_WORKER}, Redis) -> cosigned by two `ldpmarket-client witness "
          f"serve` on /log/checkpoint, polled every {1e3 * POLL:.0f} ms; (2) a log of {LEAVES} leaves: tiles, "
          f"bundles, checkpoint beside /health/ and a quote at {list(CONCURRENCY)} clients, {ROUNDS} rounds",
          flush=True)
    if not CLI.exists():
        raise RuntimeError(f"{CLI} not found: install the client package (pip install -e client)")
    tmp = Path(tempfile.mkdtemp(prefix="e7-witnesses-"))
    cases, tiles_part = [], None
    try:
        for values, before, purchases in CASES:
            case_tmp = tmp / f"case-{values}-{before}"
            case_tmp.mkdir()
            load = _common.load_text()
            result = witnessed_case(server, values, before, purchases, case_tmp)
            result["load_before"] = load
            result["load_after"] = _common.load_text()
            cases.append(result)
        if LEAVES:
            load = _common.load_text()
            tiles_part = tiles_case(server, tmp)
            tiles_part["load_before"] = load
            tiles_part["load_after"] = _common.load_text()
            tiles_part["summary"] = _tiles_summary(tiles_part)
    except BaseException:
        print(f"  (logs kept in {tmp})", flush=True)
        raise
    print(flush=True)

    def ms(s):
        return f"{1e3 * s:.1f}"

    for case in cases:
        s = case["summary"]
        _common.print_table(
            ["part (s after the purchase's commit or duration)", "median ms", "min", "q1", "q3", "max"],
            [[label, ms(st["median"]), ms(st["min"]), ms(st["q1"]), ms(st["q3"]), ms(st["max"])]
             for label, st in s.items() if st],
            title=f"E7 (1) purchase of {_common.pow10(case['values'])} values, log of {case['leaves_before']} leaves "
                  f"before: commit -> checkpoint cosigned by 2 witnesses on /log/checkpoint ({case['purchases']} "
                  f"purchases; load {case['load_before']} -> {case['load_after']})")
    if tiles_part:
        summary = tiles_part["summary"]
        rows = []
        for c, kinds in summary.items():
            for kind, r in kinds.items():
                rows.append([kind, c, f"{r['rps_median']:.0f}", f"{r['x_quote_median']:.2f}x",
                             f"{r['x_health_median']:.2f}x", f"{r['p50_ms_median']:.1f}", f"{r['p99_ms_median']:.1f}",
                             " ".join(f"{x:.0f}" for x in r["rps_rounds"]), r["errors"]])
        _common.print_table(["endpoint", "clients", "req/s", "/ quote", "/ health", "p50 ms", "p99 ms",
                             "req/s per round", "errors"], rows,
                            title=f"E7 (2) the tiled log ({tiles_part['tree_size']} leaves) under E4's load, medians "
                                  f"of {ROUNDS} rounds; ratios to E4's quote and to /health/ of the same round")
        cold = tiles_part["cold_and_stored"]
        crow = [["full level-0 tile, first request (computed, stored)",
                 f"{statistics.median(cold['level0_first_ms']):.2f}"],
                ["full level-0 tile, stored (the same tile right after)",
                 f"{statistics.median(cold['level0_stored_ms']):.2f}"],
                ["  first / stored, median of the pairs", f"{cold['level0_first_over_stored_median']:.1f}x"]]
        if "level1_tile0_first_ms" in cold:
            crow += [["full level-1 tile 0, first request (its 256 level-0 tiles too)",
                      f"{cold['level1_tile0_first_ms']:.1f}"],
                     ["full level-1 tile 0, stored", f"{statistics.median(cold['level1_tile0_stored_ms']):.2f}"]]
        crow += [[f"partial {k}", f"{v:.2f}"] for k, v in cold["partial_tiles_median_ms"].items()]
        _common.print_table(["one client, one request at a time", "median ms"], crow,
                            title="E7 (2) first request of a never-stored full tile vs stored")
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "database": f"PostgreSQL, database {DB_NAME} (fresh for each case and for the tiles)",
            "server": "benchmarks.e4_api.Server: gunicorn --workers 4 --threads 4 on 127.0.0.1, throttles off",
            "worker": f"python -m benchmarks.e7_witnesses --worker (celery worker of ldpmarket.celery, production "
                      f"settings, prefork x{CONCURRENCY_WORKER}, prefetch 1, acks_late) on Redis {REDIS}, a key prefix "
                      f"and queue of its own; probes in its pool processes (worker_process_init)",
            "witnesses": "two `ldpmarket-client witness serve` processes on 127.0.0.1 (keys by `witness keygen`), "
                         "named with their URLs in LDP_WITNESS_POLICY (quorum: both)",
            "checkpoint": "right after the purchase's commit this process sends market.tasks.make_ledger_checkpoint to "
                          "the worker's queue (what beat sends; beat's interval is not included)",
            "t0": "the moment purchase_execute (the purchase's transaction) returns in this process",
            "end": "the end of the GET /log/checkpoint whose note has the new size and both witnesses' cosignature "
                   "lines (verified after, untimed)",
            "poll_seconds": POLL, "cases": [list(c) for c in CASES],
            "tiles": {"leaves": LEAVES, "leaf_kind": "version-2 block leaves (135 bytes), synthetic, by COPY",
                      "concurrency": list(CONCURRENCY), "rounds": ROUNDS, "requests_per_phase": REQUESTS,
                      "quotes_per_phase": QUOTES, "warmup_per_client_and_kind": WARMUP, "cold_sample": COLD,
                      "log_request_headers": LOG_HEADERS,
                      "reference": "GET /health/ (E4's floor) and E4's POST /api/v1/quotes/ (1,000 values) in the "
                                   "same round and level"},
        },
        "witnessed": cases,
        "tiles": tiles_part,
        "load_average_end": list(os.getloadavg()),
        "elapsed_seconds": elapsed,
    }
    path = _common.RESULTS_DIR / f"{NAME}_{info['date'][:10]}_{_machine_tag(info)}.json"
    tmp_json = path.with_suffix(".json.tmp")
    tmp_json.write_text(json.dumps({"benchmark": NAME, **result}, indent=2) + "\n", encoding="utf-8")
    tmp_json.replace(path)
    if not os.environ.get("E7_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker_main(sys.argv[2:])
    else:
        main()
