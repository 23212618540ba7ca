"""Witnesses end to end (issue 29): docs/receipts.md#witnesses, docs/client.md#running-a-witness,
docs/receipts.md#the-monitor.

Everything real, on loopback: the service (pytest-django's ``live_server``), a real Celery worker (``tests.workerproc``:
the production settings, the test PostgreSQL database, a Redis namespace of the test's own) that runs the
submissions the service enqueues when a checkpoint commits, two witnesses of the client package
(``ldpmarket-client witness serve``) and the monitor serving as a third witness (``ldpmarket-client monitor serve``,
with an auditor's token made as a deployment makes one), each its own process, named with its URL in the
``LDP_WITNESS_POLICY`` file of both the test process and the worker.  The ledger grows through the services
(values contributed, purchases, budget events); checkpoints are made by ``checkpoint_make`` as the command and beat
make them.  What is checked is what a verifier sees over HTTP: ``/log/checkpoint`` with its cosignatures, opened
with the policy ``GET /api/v1/ledger/policy/`` publishes; and what the service records (``LedgerWitness``), the
witnesses keep (``witness refused``) and the audit says.

* every checkpoint gets all three cosignatures and meets the quorum; the time from a purchase's commit to a
  checkpoint cosigned on loopback is printed (not asserted);
* a witness stopped mid-run: the next checkpoint has the other two, the stopped one is recorded for a retry, the
  quorum is not met; restarted on its own state, the retry catches it up with a consistency proof;
* a witness whose size the service lost (reset to 0) answers 409 with its size, and the service resends from it;
* a witness that holds a larger tree than the log (fed one signed with the log's key) answers 409 with a size the
  log cannot reach: recorded, and the audit fails;
* a fork (another root signed at a size a witness cosigned) is refused with 422, kept by the witness, recorded, and
  the audit fails;
* an entry edited after its checkpoint: the monitor refuses the next checkpoint (422) naming the block and the
  entry, while the plain witnesses, which only check consistency, cosign it.
"""
from __future__ import annotations

import base64
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import requests
from django.contrib.auth import get_user_model
from django.utils import timezone
from knox.models import AuthToken

from accounts.ledger import merkle, notes, witnesses
from accounts.ledger.checkpoints import checkpoint_make
from accounts.ledger.leaves import log_leaf_hashes
from accounts.models import LedgerCheckpoint, LedgerCosignature, LedgerEntry, LedgerWitness
from accounts.roles import grant_role
from accounts.services import budget_set_ceiling, budget_set_paused
from audit.budget_audit import audit_budgets
from ldpmarket_client.tlog.checkpoint import parse_checkpoint
from ldpmarket_client.tlog.note import open_note, parse_vkey
from ldpmarket_client.tlog.policy import QuorumNotMet, parse_policy
from market.purchases.pricing import DEFAULT_POLICY
from tests.audit.conftest import buy, sql, tampering
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund
from tests.workerproc import Broker, wait_until

pytestmark = [
    pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL (CI runs these)"),
]

CLI = Path(sys.executable).with_name("ldpmarket-client")
NAMES = ("w1", "w2", "mon")
#: Seconds a failed submission waits before the retry may be made (the worker's and this process's setting).
RETRY_BASE = 0.5
#: How long the test waits for the worker's submissions at most.
WAIT = 30
#: The audit's check of the witnesses' answers (audit/witnessing.py).
REFUSAL_CHECK = "no witness refused the log's checkpoints"
#: What each ``submit_checkpoint`` task returned, as the worker logs it.
SUBMITTED = re.compile(r"Task market\.tasks\.submit_checkpoint\[[0-9a-f-]+\] succeeded in [0-9.e-]+s: '(\w+)'")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def cli(*argv: str, env: dict | None = None) -> str:
    """Run ``ldpmarket-client`` to completion; its standard output."""
    done = subprocess.run([str(CLI), *argv], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class Server:
    """One ``ldpmarket-client ... serve`` process on a port of its own, in a process group of its own; its output
    (the witness logs each refusal on stderr) goes to a file.  It can be stopped (SIGTERM) and started again with
    the same arguments, so on the same state file and port."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, env: dict):
        self.name, self.argv, self.port, self.log_path, self.env = name, argv, port, log, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([str(CLI), *self.argv], stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 30) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.text()}")
            return listening(self.port)

        wait_until(ready, timeout, message=lambda: f"{self.name} does not listen on {self.port}:\n{self.text()}")

    def stop(self, *, wait: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if wait:
            wait_until(lambda: not listening(self.port), 10, message=lambda: f"{self.name} still listens")

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Deployment:
    url: str
    log_vkey: str
    vkeys: dict[str, str]
    policy_path: Path
    servers: dict[str, Server]
    dbs: dict[str, Path]
    broker: Broker
    worker: object
    buyer: object
    attribute: object
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(29))
    epsilon: float = 0.2

    def witness(self, name: str) -> LedgerWitness:
        return LedgerWitness.objects.get(name=name)

    def served(self) -> bytes:
        answer = requests.get(f"{self.url}/log/checkpoint", timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.content

    def published_text(self) -> str:
        answer = requests.get(f"{self.url}/api/v1/ledger/policy/", timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.text

    def published_policy(self):
        return parse_policy(self.published_text())

    def cosigners(self, data: bytes) -> tuple[int, set[str]]:
        """The served note's tree size and the witnesses whose cosignatures verify on it."""
        by_key = {parse_vkey(v): name for name, v in self.vkeys.items()}
        note = open_note(data, [parse_vkey(self.log_vkey), *by_key])
        return parse_checkpoint(note.text).size, {by_key[v] for v, _, _ in note.verified if v in by_key}

    def wait_cosigned(self, size: int, names, timeout: float = WAIT) -> bytes:
        """Poll ``/log/checkpoint`` until it is the checkpoint of ``size`` cosigned by (at least) ``names``."""
        seen = {}

        def done():
            data = self.served()
            seen["last"] = self.cosigners(data)
            return data if seen["last"][0] == size and set(names) <= seen["last"][1] else None

        return wait_until(done, timeout, interval=0.02, message=lambda: f"served {seen.get('last')}, wanted size "
                                                                        f"{size} cosigned by {sorted(names)}; "
                                                                        f"{self.witness_states()}\n"
                                                                        f"{self.worker.log()}")

    def wait_witness(self, name: str, predicate, timeout: float = WAIT) -> LedgerWitness:
        def done():
            row = self.witness(name)
            return row if predicate(row) else None

        return wait_until(done, timeout, interval=0.02, message=lambda: f"{self.witness_states()}\n{self.worker.log()}")

    def witness_states(self) -> list[tuple]:
        return list(LedgerWitness.objects.order_by("name").values_list("name", "size", "last_status", "failures",
                                                                        "last_error"))

    def purchase(self):
        """A purchase through the services (an upgrade of the previous one each time)."""
        self.epsilon = round(self.epsilon + 0.1, 2)
        return buy(self.buyer, self.attribute, str(self.epsilon), self.rng)

    def refused(self, name: str) -> list[dict]:
        db = self.dbs[name] if name != "mon" else Path(f"{self.dbs[name]}.witness")
        return json.loads(cli("witness", "refused", "--db", str(db)))

    def violations(self) -> list[tuple[int, str]]:
        """The monitor's recorded violations (its SQLite state)."""
        with closing(sqlite3.connect(f"file:{self.dbs['mon']}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT size, what FROM violations ORDER BY id").fetchall()

    def wait_submissions(self) -> list[str]:
        """Once the worker has run the submission task of every witness for every checkpoint (three each), what
        each returned, in order (from the worker's log)."""
        expected = len(NAMES) * LedgerCheckpoint.objects.count()

        def done():
            results = SUBMITTED.findall(self.worker.text())
            return results if len(results) >= expected else None

        results = wait_until(done, WAIT, interval=0.02, message=lambda: self.worker.log())
        assert len(results) == expected, results
        return results

    def witness_size(self, name: str) -> int:
        """The size a plain witness's own state says it cosigned last."""
        with closing(sqlite3.connect(f"file:{self.dbs[name]}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT size FROM checkpoints").fetchone()[0]


def checkpoint() -> LedgerCheckpoint:
    made = notes.latest_checkpoint()
    new = checkpoint_make()
    assert new is not None and new.appended and (made is None or new.tree_size > made.tree_size)
    return new


def refusal_check(report):
    [check] = [c for c in report.checks if c.name.startswith(REFUSAL_CHECK)]
    return check


@pytest.fixture
def deployment(live_server, transactional_db, tmp_path, settings, monkeypatch):
    # the market: one attribute of 9 values (ceiling 2), a funded buyer
    rng = np.random.default_rng(29)
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    contribute(attribute, ["red", "green", "blue"] * 3, ceiling="2", rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "100")
    # an auditor made as a deployment makes one, and a token of theirs for the monitor
    auditor = get_user_model().objects.create_user(username=f"aud-{uuid.uuid4().hex[:8]}", password="x-pw-12345")
    grant_role(auditor, "auditor")
    _, token = AuthToken.objects.create(user=auditor)

    key = requests.get(f"{live_server.url}/api/v1/ledger/public-key/", timeout=10).json()
    log_vkey = key["vkey"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPMARKET_")}
    env["LDPMARKET_CONFIG"] = str(tmp_path / "client-config.json")
    vkeys, ports, dbs, servers = {}, {}, {}, {}
    for name in NAMES:
        vkeys[name] = cli("witness", "keygen", "--name", f"{name}.witness.test/ldpmarket", "--out",
                          str(tmp_path / f"{name}.key"), env=env).strip()
        ports[name] = free_port()
        dbs[name] = tmp_path / f"{name}.sqlite3"
    policy = "".join(f"witness {n} {vkeys[n]} http://127.0.0.1:{ports[n]}\n" for n in NAMES)
    policy += "group all-three all w1 w2 mon\nquorum all-three\n"
    policy_path = tmp_path / "witnesses.policy"
    policy_path.write_text(policy)
    settings.LDP_WITNESS_POLICY = str(policy_path)
    settings.LDP_WITNESS_RETRY_BASE_SECONDS = RETRY_BASE
    settings.LDP_WITNESS_TIMEOUT_SECONDS = 5.0

    for name in ("w1", "w2"):
        servers[name] = Server(name, ["witness", "serve", "--key", str(tmp_path / f"{name}.key"), "--db",
                                      str(dbs[name]), "--log", log_vkey, "--listen", f"127.0.0.1:{ports[name]}"],
                               ports[name], tmp_path / f"{name}.log", env)
    servers["mon"] = Server("mon", ["--url", live_server.url, "monitor", "serve", "--key", str(tmp_path / "mon.key"),
                                    "--db", str(dbs["mon"]), "--log", log_vkey, "--listen",
                                    f"127.0.0.1:{ports['mon']}"],
                            ports["mon"], tmp_path / "mon.log", {**env, "LDPMARKET_TOKEN": token})
    broker = Broker(tmp_path)
    try:
        for server in servers.values():
            server.start()
        broker.route_project_tasks(monkeypatch)
        worker = broker.start(LDP_WITNESS_POLICY=str(policy_path), LDP_WITNESS_RETRY_BASE_SECONDS=RETRY_BASE,
                              LDP_WITNESS_TIMEOUT_SECONDS=5)
        for server in servers.values():
            server.wait_ready()
        yield Deployment(live_server.url, log_vkey, vkeys, policy_path, servers, dbs, broker, worker, buyer,
                         attribute, rng)
    finally:
        for server in servers.values():
            server.stop(wait=False)
        broker.close()
        # the database flush after the test needs the worker's sessions gone
        wait_until(lambda: not any(w.sessions() for w in broker.workers), 30, interval=0.1)


def test_checkpoints_are_cosigned_a_stopped_witness_catches_up_and_a_lost_size_is_resent(deployment, monkeypatch):
    dep = deployment
    named = {name: member.url for name, member in dep.published_policy().witnesses.items()}
    assert named == {name: f"http://127.0.0.1:{server.port}" for name, server in dep.servers.items()}

    # 1-2. Purchases, each followed by a checkpoint: /log/checkpoint gets the three cosignatures (the worker's
    # submissions), and the published policy accepts it.  Timed from the purchase's commit.
    to_checkpoint, to_two, to_all = [], [], []
    for _ in range(3):
        dep.purchase()  # committed when it returns
        start = time.perf_counter()
        made = checkpoint()
        to_checkpoint.append(time.perf_counter() - start)
        dep.wait_cosigned(made.tree_size, {"w1", "w2"})
        to_two.append(time.perf_counter() - start)
        data = dep.wait_cosigned(made.tree_size, NAMES)
        to_all.append(time.perf_counter() - start)
        policy = dep.published_policy()
        cp, _, witnessed = policy.verify_checkpoint(data)
        assert (cp.size, witnessed) == (made.tree_size, sorted(NAMES))
        assert cp.root == bytes.fromhex(made.root_hash)
    print(f"\npurchase commit -> checkpoint committed (s): {[round(t, 3) for t in to_checkpoint]}; "
          f"-> cosigned by w1+w2 on /log/checkpoint: {[round(t, 3) for t in to_two]}, median "
          f"{statistics.median(to_two):.3f}; by all three (monitor included): {[round(t, 3) for t in to_all]}, "
          f"median {statistics.median(to_all):.3f}")
    assert dep.wait_submissions() == ["cosigned"] * 9
    assert {w.name: w.size for w in LedgerWitness.objects.all()} == dict.fromkeys(NAMES, made.tree_size)
    assert LedgerCosignature.objects.filter(checkpoint=made).count() == 3
    assert refusal_check(audit_budgets()).ok

    # A late submission (one that read the previous checkpoint before this one was cosigned) is no evidence of
    # anything: every witness, the monitor included, answers 409 with the size it holds, and keeps nothing.
    first, late = LedgerCheckpoint.objects.order_by("tree_size")[:2]
    body = witnesses.add_checkpoint_body(first.tree_size, late)
    for name, server in dep.servers.items():
        answer = requests.post(f"http://127.0.0.1:{server.port}/add-checkpoint", data=body, timeout=10)
        assert (name, answer.status_code, answer.text) == (name, 409, f"{made.tree_size}\n")
        assert dep.refused(name) == []
    assert dep.violations() == []

    # 3. w2 stops mid-run: the next two checkpoints get w1's and the monitor's cosignatures; w2 is recorded with
    # no answer, for a retry; the quorum (all three) is not met, 2 of 3 would be.
    before = made.tree_size
    dep.servers["w2"].stop()
    missed = []
    for k in range(2):
        dep.purchase()
        missed.append(checkpoint())
        data = dep.wait_cosigned(missed[-1].tree_size, {"w1", "mon"})
        results = dep.wait_submissions()
        w2 = dep.witness("w2")
        assert (w2.last_status, w2.size) == (None, before) and "no answer" in w2.last_error
        assert w2.next_attempt_at > w2.last_attempt_at
        if k == 0:
            assert results[-3:] == ["cosigned", "cosigned", "failed"] and w2.failures == 1
        else:  # failed again, or still waiting for its retry time
            assert results[-3:-1] == ["cosigned", "cosigned"] and results[-1] in ("failed", "waiting")
            assert w2.failures == 1 + (results[-1] == "failed")
    assert dep.cosigners(data) == (missed[-1].tree_size, {"w1", "mon"})
    policy = dep.published_policy()
    with pytest.raises(QuorumNotMet, match="cosigned by 2 of 3 witnesses"):
        policy.verify_checkpoint(data)
    published = dep.published_text()
    assert "\ngroup all-three 3 w1 w2 mon\nquorum all-three\n" in published
    two_of_three = parse_policy(published.replace("group all-three 3", "group all-three 2"))
    assert two_of_three.verify_checkpoint(data)[2] == ["mon", "w1"]
    # restarted on the same state: it still holds the older size, so the retry must send a consistency proof
    mark = len(dep.servers["w2"].text())
    dep.servers["w2"].start().wait_ready()
    assert dep.witness_size("w2") == before < missed[0].tree_size < missed[1].tree_size
    wait_until(lambda: timezone.now() >= dep.witness("w2").next_attempt_at, 10)
    dep.broker.send("market.tasks.submit_due_checkpoints")
    data = dep.wait_cosigned(missed[-1].tree_size, NAMES)
    assert dep.published_policy().verify_checkpoint(data)[2] == sorted(NAMES)
    w2 = dep.witness("w2")
    assert (w2.last_status, w2.failures, w2.next_attempt_at, w2.size) == (200, 0, None, missed[-1].tree_size)
    assert dep.witness_size("w2") == missed[-1].tree_size
    assert "refused" not in dep.servers["w2"].text()[mark:]  # caught up at the first try: the proof verified
    # A submission task that read the checkpoint w2 missed (and w2's size then) before the next was made: w2
    # answers 409 with the newer size it holds; the service records that size and nothing else.
    with monkeypatch.context() as patch:
        patch.setattr(witnesses, "latest_checkpoint", lambda: missed[0])
        LedgerWitness.objects.filter(pk=w2.pk).update(size=before)
        assert witnesses.witness_submit(witness_id=w2.pk) == "superseded"
    w2 = dep.witness("w2")
    assert (w2.last_status, w2.failures, w2.next_attempt_at, w2.size) == (200, 0, None, missed[-1].tree_size)
    assert f"refused (409) a checkpoint signed by ldpmarket.test/log: old size {before} is not the latest cosigned " \
           f"size {missed[-1].tree_size} (old size {before}, size {missed[0].tree_size}" in dep.servers["w2"].text()

    # 4a. The service lost w1's size (0): w1 answers 409 with its size, the service resends from it (with the
    # proof), and w1 cosigns.
    LedgerWitness.objects.filter(name="w1").update(size=0)
    budget_set_ceiling(value_id=LedgerEntry.objects.order_by("id").first().value_id, ceiling="1.9")
    held = missed[-1].tree_size
    made = checkpoint()
    dep.wait_cosigned(made.tree_size, NAMES)
    w1 = dep.witness("w1")
    assert (w1.size, w1.last_status, w1.failures) == (made.tree_size, 200, 0)
    assert f"refused (409) a checkpoint signed by ldpmarket.test/log: old size 0 is not the latest cosigned size " \
           f"{held} (old size 0, size {made.tree_size}" in dep.servers["w1"].text()
    assert dep.refused("w1") == []  # a 409 for a stale size is no evidence of anything
    assert refusal_check(audit_budgets()).ok


def test_a_witness_holding_a_larger_tree_and_a_fork_are_recorded_and_fail_the_audit(deployment):
    dep = deployment
    dep.purchase()
    first = checkpoint()
    dep.wait_cosigned(first.tree_size, NAMES)
    report = audit_budgets()
    assert report.ok, report.as_text()

    # 4b. w2 is fed, directly, a checkpoint signed with the log's key for a larger tree that extends the log's
    # (so w2 cosigns it): from then on it holds a size the log's checkpoints have not reached.
    leaves = log_leaf_hashes(first.tree_size)
    big = first.tree_size + 50
    leaves += [merkle.leaf_hash(f"not in the log {i}".encode()) for i in range(big - first.tree_size)]
    note = notes.sign_checkpoint(big, merkle.root(leaves).hex())
    proof = merkle.consistency_proof(first.tree_size, leaves)
    body = (f"old {first.tree_size}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + note)
    answer = requests.post(f"http://127.0.0.1:{dep.servers['w2'].port}/add-checkpoint", data=body.encode(), timeout=10)
    assert answer.status_code == 200, answer.text
    assert dep.witness_size("w2") == big
    dep.purchase()
    second = checkpoint()
    assert second.tree_size < big
    dep.wait_cosigned(second.tree_size, {"w1", "mon"})
    w2 = dep.wait_witness("w2", lambda w: w.last_status == 409)
    assert w2.size == big and w2.failures == 1
    assert f"the witness holds tree size {big}, larger than the log's latest checkpoint ({second.tree_size})" \
        in w2.last_error
    report = audit_budgets()
    assert [c.name for c in report.failed] == [refusal_check(report).name], report.as_text()
    assert [e for e in refusal_check(report).examples if e.startswith("witness w2 ")]

    # 5. A fork: the operator re-signs the latest checkpoint with another root at the size w1 cosigned, and it is
    # submitted to w1 again (its cosignature of the true root dropped).  w1 refuses it (422), keeps it as evidence
    # beside the checkpoint it cosigned; the service records the 422, and the audit names it.
    assert dep.witness("w1").size == second.tree_size
    forged = "ab" * 32
    with tampering():
        changed = sql("UPDATE accounts_ledgercheckpoint SET root_hash = %s, note = %s WHERE id = %s",
                      [forged, notes.sign_checkpoint(second.tree_size, forged), second.id])
    assert changed == 1
    LedgerCosignature.objects.filter(checkpoint=second, witness__name="w1").delete()
    dep.broker.send("market.tasks.submit_checkpoint", dep.witness("w1").id)
    w1 = dep.wait_witness("w1", lambda w: w.last_status is not None and w.last_status != 200)
    assert w1.last_status == 422 and "another root (a fork)" in w1.last_error, w1.last_error
    assert w1.size == second.tree_size and w1.failures == 1
    assert not LedgerCosignature.objects.filter(checkpoint=second, witness=w1).exists()
    [kept] = dep.refused("w1")
    assert (kept["status"], kept["old_size"], kept["size"]) == (422, second.tree_size, second.tree_size)
    assert kept["root"] == base64.b64encode(bytes.fromhex(forged)).decode()
    assert f"\n{base64.b64encode(bytes.fromhex(second.root_hash)).decode()}\n" not in kept["note"]
    latest = parse_checkpoint(kept["latest_note"].encode().split(b"\n\n")[0] + b"\n")
    assert (latest.size, latest.root) == (second.tree_size, bytes.fromhex(second.root_hash))
    assert "refused (422)" in dep.servers["w1"].text()
    report = audit_budgets()
    examples = refusal_check(report).examples
    assert not refusal_check(report).ok
    assert [e for e in examples if e.startswith("witness w1 ") and "answered 422" in e], examples
    assert [e for e in examples if e.startswith("witness w2 ") and "answered 409" in e], examples


def test_an_entry_edited_after_its_checkpoint_is_refused_by_the_monitor_only(deployment):
    dep = deployment
    dep.purchase()
    first = checkpoint()
    dep.wait_cosigned(first.tree_size, NAMES)

    # The monitor is down while the next checkpoint is made (the two witnesses cosign it) ...
    dep.servers["mon"].stop()
    value_id = LedgerEntry.objects.filter(kind="chain_release").order_by("id").first().value_id
    budget_set_paused(value_id=value_id, paused=True)
    pause = LedgerEntry.objects.filter(value_id=value_id, kind="pause").get()
    assert pause.chain_loss_after > 0
    second = checkpoint()
    dep.wait_cosigned(second.tree_size, {"w1", "w2"})
    dep.wait_witness("mon", lambda w: w.failures == 1)
    # ... and then the operator erases the value's loss from the pause it recorded (as if nothing had been sold).
    block, position = divmod(pause.id, 2 ** 24)
    with tampering():
        changed = sql("UPDATE accounts_ledgerevent SET chain_loss_before = 0, chain_loss_after = 0 "
                      "WHERE block_id = %s AND position = %s", [block, position])
    assert changed == 1
    dep.servers["mon"].start().wait_ready()
    wait_until(lambda: timezone.now() >= dep.witness("mon").next_attempt_at, 10)
    budget_set_paused(value_id=value_id, paused=False)
    third = checkpoint()
    # the plain witnesses cosign (the log only grew); the monitor, which checks the blocks it has not seen, refuses
    data = dep.wait_cosigned(third.tree_size, {"w1", "w2"})
    mon = dep.wait_witness("mon", lambda w: w.last_status == 422)
    assert dep.cosigners(data) == (third.tree_size, {"w1", "w2"})
    where = f"block {block} (leaf "
    rule = f"entry {pause.id} (value {value_id}, pause): a gap in the value's history"
    assert where in mon.last_error and rule in mon.last_error, mon.last_error
    assert mon.size == first.tree_size
    with pytest.raises(QuorumNotMet):
        dep.published_policy().verify_checkpoint(data)
    [kept] = dep.refused("mon")
    assert kept["status"] == 422 and kept["size"] == third.tree_size and rule in kept["reason"]
    violations = dep.violations()
    assert violations and all(size == third.tree_size and rule in what for size, what in violations)
    with closing(sqlite3.connect(f"file:{dep.dbs['mon']}?mode=ro", uri=True)) as conn:
        checked = conn.execute("SELECT size FROM monitored").fetchone()[0]
    assert checked == first.tree_size  # it did not advance past the bad block
    assert "refused (422)" in dep.servers["mon"].text()
    assert dep.refused("w1") == dep.refused("w2") == []
    report = audit_budgets()
    assert [e for e in refusal_check(report).examples if e.startswith("witness mon ") and "answered 422" in e]
