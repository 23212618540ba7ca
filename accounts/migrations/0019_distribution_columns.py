"""The budgets' attribute and the budget events' shard: their distribution columns
(docs/architecture.md#scaling-out).

Each is added, filled (a budget's from its value, an event's from its block), then required.  On PostgreSQL:
statement-level triggers (one set-based check per INSERT or COPY, over the rows it inserted) refuse a budget whose
attribute is not its value's and an event whose shard is not its block's; a row-level trigger refuses changing a
budget's value or attribute (the events are append-only already).  Filling the events' shard briefly lifts their
append-only trigger, inside this migration's transaction.
"""
from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

#: The per-value view over the events (migration 0013): SQLite rebuilds a table to make a column required, which a
#: view over it does not survive, so there it is dropped and made again around the events' new column.
COMPACT = import_module("accounts.migrations.0013_compact_ledger")


def drop_view_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        COMPACT.drop_view(apps, schema_editor)


def create_view_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        COMPACT.create_view(apps, schema_editor)

FORWARD = """
CREATE OR REPLACE FUNCTION ldp_budget_attribute_check() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted i JOIN market_value v ON v.id = i.value_id
               WHERE v.attribute_id <> i.attribute_id) THEN
        RAISE EXCEPTION 'accounts_budgetaccount.attribute_id must be its value''s attribute'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER accounts_budgetaccount_attribute AFTER INSERT ON accounts_budgetaccount
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION ldp_budget_attribute_check();
CREATE TRIGGER accounts_budgetaccount_keep_attribute BEFORE UPDATE OF attribute_id, value_id ON accounts_budgetaccount
    FOR EACH ROW WHEN (NEW.attribute_id IS DISTINCT FROM OLD.attribute_id OR NEW.value_id <> OLD.value_id)
    EXECUTE FUNCTION ldp_keep_distribution();
CREATE OR REPLACE FUNCTION ldp_event_shard_check() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted i JOIN accounts_ledgerblock b ON b.id = i.block_id WHERE b.shard <> i.shard) THEN
        RAISE EXCEPTION 'accounts_ledgerevent.shard must be its block''s shard'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER accounts_ledgerevent_shard AFTER INSERT ON accounts_ledgerevent
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION ldp_event_shard_check();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS accounts_ledgerevent_shard ON accounts_ledgerevent;
DROP FUNCTION IF EXISTS ldp_event_shard_check();
DROP TRIGGER IF EXISTS accounts_budgetaccount_keep_attribute ON accounts_budgetaccount;
DROP TRIGGER IF EXISTS accounts_budgetaccount_attribute ON accounts_budgetaccount;
DROP FUNCTION IF EXISTS ldp_budget_attribute_check();
"""
FILL_BUDGETS = ("UPDATE accounts_budgetaccount SET attribute_id = "
                "(SELECT attribute_id FROM market_value WHERE market_value.id = accounts_budgetaccount.value_id)")
FILL_EVENTS = ("UPDATE accounts_ledgerevent SET shard = "
               "(SELECT shard FROM accounts_ledgerblock WHERE accounts_ledgerblock.id = accounts_ledgerevent.block_id)")


def fill_events(apps, schema_editor):
    pg = schema_editor.connection.vendor == "postgresql"
    if pg:
        schema_editor.execute("ALTER TABLE accounts_ledgerevent DISABLE TRIGGER USER")
    schema_editor.execute(FILL_EVENTS)
    if pg:  # deferred checks the update queued fire now: ALTER TABLE refuses a table with pending trigger events
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        schema_editor.execute("ALTER TABLE accounts_ledgerevent ENABLE TRIGGER USER")
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


def triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("accounts", "0018_ledger_tiles"), ("market", "0016_purchasechunk_attribute")]
    operations = [
        migrations.AddField(
            model_name="budgetaccount", name="attribute",
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="+", to="market.attribute")),
        migrations.RunSQL(FILL_BUDGETS, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="budgetaccount", name="attribute",
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+",
                                    to="market.attribute")),
        migrations.RunPython(drop_view_sqlite, create_view_sqlite),
        migrations.AddField(model_name="ledgerevent", name="shard", field=models.PositiveIntegerField(null=True)),
        migrations.RunPython(fill_events, migrations.RunPython.noop),
        migrations.AlterField(model_name="ledgerevent", name="shard", field=models.PositiveIntegerField()),
        migrations.RunPython(create_view_sqlite, drop_view_sqlite),
        migrations.RunPython(triggers, drop_triggers),
    ]
