"""The purchase chunks' attribute: their distribution column (docs/architecture.md#scaling-out).

Added, filled from each chunk's purchase, then required.  On PostgreSQL a statement-level trigger (one set-based
check per INSERT or COPY, over the rows it inserted) refuses a chunk whose attribute is not its purchase's; the
chunks are never updated by the service, and a row-level trigger refuses changing either column.
"""
import django.db.models.deletion
from django.db import migrations, models

FORWARD = """
CREATE OR REPLACE FUNCTION ldp_chunk_attribute_check() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted i JOIN market_purchase p ON p.id = i.purchase_id
               WHERE p.attribute_id <> i.attribute_id) THEN
        RAISE EXCEPTION 'market_purchasechunk.attribute_id must be its purchase''s attribute'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER market_purchasechunk_attribute AFTER INSERT ON market_purchasechunk
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION ldp_chunk_attribute_check();
CREATE OR REPLACE FUNCTION ldp_keep_distribution() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the distribution column of %% cannot change', TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER market_purchasechunk_keep_attribute BEFORE UPDATE OF attribute_id, purchase_id ON market_purchasechunk
    FOR EACH ROW WHEN (NEW.attribute_id IS DISTINCT FROM OLD.attribute_id OR NEW.purchase_id <> OLD.purchase_id)
    EXECUTE FUNCTION ldp_keep_distribution();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS market_purchasechunk_keep_attribute ON market_purchasechunk;
DROP TRIGGER IF EXISTS market_purchasechunk_attribute ON market_purchasechunk;
DROP FUNCTION IF EXISTS ldp_chunk_attribute_check();
"""
FILL = ("UPDATE market_purchasechunk SET attribute_id = "
        "(SELECT attribute_id FROM market_purchase WHERE market_purchase.id = market_purchasechunk.purchase_id)")


def triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("market", "0015_owner_custody")]
    operations = [
        migrations.AddField(
            model_name="purchasechunk", name="attribute",
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="+", to="market.attribute")),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="purchasechunk", name="attribute",
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+",
                                    to="market.attribute")),
        migrations.RunPython(triggers, drop_triggers),
    ]
