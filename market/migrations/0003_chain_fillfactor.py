"""On PostgreSQL, chain pages are filled to 50% only, so that chain extension can update rows in place (HOT).

Chain rows grow with every extension (``epsilons || new``, ``outputs || new``),
and each ``UPDATE`` writes a new version of the row.  When that version fits
on the same page the update is HOT: no index entry, and one WAL record instead
of three (lock, update, index insert) -- measured, it makes the extension's
``UPDATE`` about a third cheaper (benchmarks/e2_extension.py).  The setting
applies to pages written from now on (existing rows move as they are rewritten).
SQLite, the embedded default, has no such setting.
"""
from django.db import migrations

FILLFACTOR = 50


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE market_chain SET (fillfactor = {FILLFACTOR})", params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE market_chain RESET (fillfactor)", params=None)


class Migration(migrations.Migration):
    dependencies = [("market", "0002_purchase_purchasechunk_holding_and_more")]
    operations = [migrations.RunPython(forward, backward, elidable=False)]
