"""The restore drill (docs/operations.md#restore-drill), run for real: a ledger built through the services, dumped with
``pg_dump -Fc``, restored with ``pg_restore`` into a fresh database, and ``manage.py verify_restore`` run on it in a
subprocess with the test settings' keys.

A faithful restore passes; a restore older than a kept (witness-cosigned) checkpoint fails and says which leaves it
lacks; a restore whose last blocks are missing fails naming the shard and the blocks; a kept checkpoint signed by
another key, a fork of the kept checkpoint, and a forged key history inside the restored database each fail.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from django.db import connection

from accounts.ledger import notes, signing
from accounts.ledger.checkpoints import checkpoint_make
from accounts.models import LedgerBlock, LedgerCheckpoint
from ldpmarket_client.tlog.note import COSIGNATURE_V1, ED25519, Signer, parse_note, sign_note
from market.purchases.pricing import DEFAULT_POLICY
from tests.audit.conftest import buy
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
OLDER = "the restore is older than the kept checkpoint"


@pytest.fixture(autouse=True)
def _tools():
    if shutil.which("pg_dump") is None or shutil.which("pg_restore") is None:
        pytest.skip("pg_dump and pg_restore are not installed")


def _server() -> dict:
    s = connection.settings_dict
    return {"host": s.get("HOST") or "127.0.0.1", "port": str(s.get("PORT") or 5432),
            "user": s.get("USER") or "postgres", "password": s.get("PASSWORD") or ""}


def _pg_env() -> dict:
    return {**os.environ, "PGPASSWORD": _server()["password"]}


def _connect(dbname: str):
    import psycopg  # noqa: PLC0415 -- PostgreSQL only, like the tests that use it

    s = _server()
    return psycopg.connect(host=s["host"], port=s["port"], user=s["user"], password=s["password"] or None,
                           dbname=dbname, autocommit=True)


def pg_dump(path: Path) -> Path:
    """``pg_dump -Fc`` of the test database (committed: the tests run with a transactional database)."""
    s = _server()
    subprocess.run(["pg_dump", "-Fc", "--no-owner", "-h", s["host"], "-p", s["port"], "-U", s["user"], "-f", str(path),
                    connection.settings_dict["NAME"]], env=_pg_env(), check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture
def restore(request):
    """``restore(dump)``: a fresh database of a unique name, ``pg_restore``d from ``dump``; dropped at the end."""

    def make(dump: Path) -> str:
        name = f"ldp_restore_{uuid.uuid4().hex[:12]}"
        with _connect("postgres") as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        request.addfinalizer(lambda: _drop(name))
        s = _server()
        out = subprocess.run(["pg_restore", "--no-owner", "--exit-on-error", "-h", s["host"], "-p", s["port"],
                              "-U", s["user"], "-d", name, str(dump)], env=_pg_env(), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        return name

    return make


def _drop(name: str) -> None:
    with _connect("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def verify(dbname: str, *args: str) -> subprocess.CompletedProcess:
    """``manage.py verify_restore`` in a subprocess on database ``dbname``, with this process's settings and keys."""
    s = _server()
    auth = s["user"] + (f":{s['password']}" if s["password"] else "")
    env = {**os.environ, "DATABASE_URL": f"postgres://{auth}@{s['host']}:{s['port']}/{dbname}",
           "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "ldpmarket.settings_test")}
    return subprocess.run([sys.executable, "manage.py", "verify_restore", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def said(out: subprocess.CompletedProcess) -> str:
    return out.stdout + out.stderr


def build_ledger(purchases: int = 1):
    """An attribute's values contributed, ``purchases`` purchases made and a checkpoint signed, through the
    services."""
    rng = np.random.default_rng(30)
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    contribute(attribute, ["red", "green", "blue"] * 6, prefix=f"rs{attribute.id}", ceiling="3", rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "100")
    for k in range(purchases):
        buy(buyer, attribute, str(Decimal("0.5") * (k + 1)), rng)
    checkpoint_make()
    return attribute, buyer, rng


WITNESS = Signer.generate("witness.test/w1", COSIGNATURE_V1)


def witnessed(note: bytes, timestamp: int) -> bytes:
    """``note`` as a witness serves it (GET <prefix>/<origin hash>/checkpoint): with its cosignature appended."""
    return note + WITNESS.signature_line(parse_note(note).text, timestamp).encode()


def write(path: Path, data: bytes | str) -> str:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def test_a_faithful_restore_passes_and_one_older_than_the_kept_checkpoint_fails(restore, tmp_path):
    attribute, buyer, rng = build_ledger()
    first = LedgerCheckpoint.objects.order_by("-tree_size").first()
    now = int(time.time())
    kept_then = write(tmp_path / "witness-then.txt", witnessed(notes.served_note(), now))
    policy = write(tmp_path / "policy.txt", f"log {signing.vkey()}\nwitness w1 {WITNESS.verifier.vkey}\nquorum w1\n")
    dump_old = pg_dump(tmp_path / "old.dump")
    buy(buyer, attribute, "1.5", rng)  # blocks written after the first dump ...
    dump_unsigned = pg_dump(tmp_path / "unsigned.dump")  # ... dumped before any checkpoint covers them ...
    checkpoint_make()  # ... then checkpointed
    middle = LedgerCheckpoint.objects.order_by("-tree_size").first()
    kept_middle = write(tmp_path / "witness-middle.txt", witnessed(notes.served_note(), now + 1))
    buy(buyer, attribute, "2", rng)  # and more, never dumped
    checkpoint_make()
    later = LedgerCheckpoint.objects.order_by("-tree_size").first()
    assert first.tree_size < middle.tree_size < later.tree_size
    kept_now = write(tmp_path / "witness-now.txt", witnessed(notes.served_note(), now + 2))

    old = restore(dump_old)
    out = verify(old, "--checkpoint", kept_then, "--policy", policy)
    assert out.returncode == 0, said(out)[-6000:]
    assert "RESTORE: PASS" in out.stdout and "[PASS] Restore" in out.stdout
    assert "given with --policy" in out.stdout

    out = verify(old, "--checkpoint", kept_now, "--policy", policy)
    assert out.returncode == 1, said(out)[-6000:]
    assert "RESTORE: FAIL" in out.stdout and f"{OLDER} {kept_now} (tree size {later.tree_size}" in out.stdout
    assert f"it lacks leaves {first.tree_size}..{later.tree_size - 1}" in out.stdout
    assert "and it holds no block beyond them" in out.stdout
    cosigned = datetime.fromtimestamp(now + 2, timezone.utc).isoformat()
    assert f"cosigned by w1 at {cosigned}" in out.stdout  # when the kept checkpoint was cosigned
    assert OLDER in out.stderr  # the exit message names it too
    # without the witness's cosignature the policy's quorum is not met, whatever the log says
    bare = write(tmp_path / "bare.txt", notes.served_note())
    out = verify(old, "--checkpoint", bare, "--policy", policy)
    assert out.returncode == 1 and "the quorum is w1" in out.stdout, said(out)[-6000:]

    # A dump taken between blocks' writes and their checkpoint holds the blocks: leafed as the next checkpoint
    # leafs them, the restored log gives the root of the kept checkpoint that covers them.  The blocks written
    # after the dump are not there: a checkpoint covering them is newer than the restore.
    unsigned = restore(dump_unsigned)
    out = verify(unsigned, "--checkpoint", kept_middle, "--checkpoint", kept_then, "--policy", policy)
    assert out.returncode == 0, said(out)[-6000:]
    assert f"note: {kept_middle}: the restored database holds its leaf" in out.stdout
    assert "which no checkpoint it holds covers yet; with them the restored log gives the kept root" in out.stdout
    out = verify(unsigned, "--checkpoint", kept_now, "--log-key", signing.vkey())
    assert out.returncode == 1, said(out)[-6000:]
    assert f"it lacks leaves {first.tree_size}..{later.tree_size - 1}" in out.stdout
    assert (f"at least {later.tree_size - middle.tree_size} block(s) the kept checkpoint covers are not in the "
            f"restore") in out.stdout
    assert "given with --log-key" in out.stdout


def _tamper(dbname: str, *statements: tuple[str, list]) -> None:
    """Write to a restored database's append-only tables as someone holding the database would: with its triggers
    and foreign keys off (``session_replication_role = replica``)."""
    with _connect(dbname) as conn:
        conn.execute("SET session_replication_role = replica")
        for statement, params in statements:
            conn.execute(statement, params)


def test_a_restore_missing_its_last_blocks_fails_naming_them(restore, tmp_path):
    attribute, buyer, rng = build_ledger(purchases=3)
    dbname = restore(pg_dump(tmp_path / "ledger.dump"))
    out = verify(dbname)  # the faithful restore first: trusted, by default, with this process's signing keys
    assert out.returncode == 0, said(out)[-6000:]
    assert "this process's signing keys" in out.stdout

    blocks = list(LedgerBlock.objects.filter(shard=attribute.id).order_by("id").values_list("id", flat=True))
    lost, kept_last = blocks[-2:], blocks[-3]
    _tamper(dbname,
            ("DELETE FROM accounts_ledgerrelease WHERE block_id = ANY(%s)", [lost]),
            ("DELETE FROM accounts_ledgerevent WHERE block_id = ANY(%s)", [lost]),
            ("DELETE FROM accounts_ledgerblock WHERE id = ANY(%s)", [lost]),
            ("UPDATE accounts_ledgerhead SET last_block_id = %s, blocks = blocks - 2 WHERE shard = %s",
             [kept_last, attribute.id]))
    out = verify(dbname)
    assert out.returncode == 1, said(out)[-6000:]
    n = len(blocks)
    assert (f"shard {attribute.id}: blocks {lost[0]}, {lost[1]} (heights {n - 1}..{n} of its chain") in out.stdout
    assert f"the restored chain holds {n - 2} block(s)" in out.stdout
    assert f"the chain now holds {n - 2}: its tail was lost" in out.stdout  # the audit's own check agrees
    assert "RESTORE: FAIL" in out.stdout and "restore verification FAILED" in out.stderr


def test_kept_checkpoints_of_another_key_or_a_fork_and_a_forged_key_history_fail(restore, tmp_path):
    build_ledger(purchases=2)
    latest = LedgerCheckpoint.objects.order_by("-tree_size").first()
    size, root = latest.tree_size, latest.root_hash
    dbname = restore(pg_dump(tmp_path / "ledger.dump"))
    real = signing.vkey()

    # the JSON `ldpmarket-client ledger checkpoint` keeps, checked against the real key: passes
    item = {"tree_size": size, "root_hash": root, "created_at": latest.created_at.isoformat(),
            "note": notes.served_note().decode()}
    genuine = write(tmp_path / "checkpoint.json", json.dumps(item))
    out = verify(dbname, "--checkpoint", genuine, "--log-key", real)
    assert out.returncode == 0, said(out)[-6000:]
    assert f"made {latest.created_at.isoformat()}" in out.stdout

    # the same size and root under the log's origin, signed by another key
    other = Signer.generate(signing.origin(), ED25519)
    forged = write(tmp_path / "forged.txt", sign_note(notes.checkpoint_text(size, root), [other]))
    out = verify(dbname, "--checkpoint", forged, "--log-key", real)
    assert out.returncode == 1, said(out)[-6000:]
    assert f"FAIL  the kept checkpoint {forged} is signed by a trusted log key" in out.stdout
    assert "does not verify with a trusted log key" in out.stdout
    assert f"PASS  the restored log contains the kept checkpoint {forged}" in out.stdout  # only its key is wrong

    # the real key, the same size, another root: a fork (or an altered restore)
    fork = write(tmp_path / "fork.txt", sign_note(notes.checkpoint_text(size, "ab" * 32), signing.note_signers()))
    out = verify(dbname, "--checkpoint", fork, "--log-key", real)
    assert out.returncode == 1, said(out)[-6000:]
    assert f"PASS  the kept checkpoint {fork} is signed by a trusted log key" in out.stdout
    assert "two signed roots of one size are a fork" in out.stdout

    # A restore carrying a forged key history: the attacker's key added to it, the latest checkpoint's note signed
    # by that key only.  The budget audit trusts the database's history and passes; the restore check, anchored
    # outside the database, does not.
    vkey = other.verifier.vkey
    _tamper(dbname,
            ("INSERT INTO accounts_ledgerlogkey (vkey, public_key, key_id, first_size, last_size, added_at) "
             "VALUES (%s, %s, %s, %s, %s, now())",
             [vkey, other.verifier.public.hex(), hashlib.sha256(other.verifier.public).hexdigest(),
              size, size]),
            ("UPDATE accounts_ledgercheckpoint SET note = %s WHERE id = %s",
             [sign_note(notes.checkpoint_text(size, root), [other]).decode(), latest.id]))
    for anchors in (["--log-key", real], []):
        out = verify(dbname, "--json", *anchors)
        assert out.returncode == 1, said(out)[-6000:]
        report = json.loads(out.stdout)
        assert report["audit"]["ok"], report["audit"]  # the database vouches for itself ...
        failed = [c for c in report["checks"] if c["status"] == "FAIL"]
        assert [c["name"] for c in failed] == [  # ... the trust anchor does not
            "the latest checkpoint the restored database holds is signed by a trusted log key and its root "
            "recomputes from the restored log's leaves"], failed
        assert "does not verify with a trusted log key" in failed[0]["examples"][0], failed


def test_unreadable_inputs_exit_2(tmp_path):
    dbname = connection.settings_dict["NAME"]  # the inputs are read before the database
    for args, words in [(["--checkpoint", str(tmp_path / "missing.txt")], "cannot read the checkpoint"),
                        (["--checkpoint", write(tmp_path / "junk.txt", "not a note\n")], "is not a signed checkpoint"),
                        (["--policy", write(tmp_path / "policy.txt", "log nonsense\n")], "cannot be read"),
                        (["--log-key", "nonsense"], "is not a verifier key")]:
        out = verify(dbname, *args)
        assert out.returncode == 2 and words in out.stderr, (args, said(out)[-3000:])
