"""`make run`'s embedded default (README, "Two commands"): SQLite.  The suite runs on PostgreSQL, so this checks
in a subprocess that every migration applies to a fresh SQLite file and that a checkpoint and the audit run there
(a migration rebuilding a table that the ledger's view reads once failed on SQLite: accounts 0015)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def manage(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(DJANGO_DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_every_migration_applies_to_a_fresh_sqlite_database(tmp_path):
    migrated = manage(tmp_path, "migrate", "--noinput", "-v0")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    checkpoint = manage(tmp_path, "ledger_checkpoint")
    assert checkpoint.returncode == 0 and "The ledger is empty" in checkpoint.stdout, checkpoint.stderr[-3000:]
    audit = manage(tmp_path, "audit_budgets")
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
