"""On PostgreSQL, the ledger tables refuse UPDATE and DELETE: append-only in the database itself.

(The audit still re-proves the hash chain, for tampering by whoever can drop
the trigger.)  SQLite, the embedded default, relies on the services and the audit.
"""
from django.db import migrations

TABLES = ["accounts_ledgerentry", "accounts_ledgerblock", "accounts_moneyentry"]

FORWARD = """
CREATE OR REPLACE FUNCTION ldp_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the %% table is append-only', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
""" + "".join(
    f"CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t} "
    f"FOR EACH ROW EXECUTE FUNCTION ldp_append_only();\n" for t in TABLES
)
BACKWARD = "".join(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t};\n" for t in TABLES) + \
    "DROP FUNCTION IF EXISTS ldp_append_only();"


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_initial")]
    operations = [migrations.RunPython(forward, backward)]
