"""Every sealed row records the id of the value key that sealed it (docs/security.md#rotating-the-value-key): the
``value_key_id`` of ``Value`` (its raw value and input, sealed together), ``ChainPoint`` and ``PurchaseChunk``.

The rows already stored were sealed by the one ``LDP_VALUE_KEY`` there was, so they get that key's id.  With a ring of
several keys the migration could only guess which one sealed them: it refuses to fill rows then (migrate with the one
key first, then rotate).  One ``UPDATE`` per table: on a large database this migration rewrites the three tables
once.
"""
from django.conf import settings
from django.db import migrations, models

import ldpmarket.keys

TABLES = ("market_value", "market_chainpoint", "market_purchasechunk")


def fill(apps, schema_editor):
    key_id = ldpmarket.keys.value_key_id(settings.LDP_VALUE_KEYS[0])
    with schema_editor.connection.cursor() as cur:
        for table in TABLES:
            cur.execute(f"SELECT 1 FROM {table} LIMIT 1")
            if cur.fetchone() is not None and len(settings.LDP_VALUE_KEYS) > 1:
                raise RuntimeError("market 0017: LDP_VALUE_KEYS holds several keys, so which one sealed the rows "
                                   "already stored is not known: migrate with the one LDP_VALUE_KEY that sealed them, then "
                                   "rotate (docs/security.md#rotating-the-value-key).")
    for table in TABLES:
        schema_editor.execute(f"UPDATE {table} SET value_key_id = %s", [key_id])


class Migration(migrations.Migration):

    dependencies = [("market", "0016_purchasechunk_attribute"), ("accounts", "0019_distribution_columns")]

    operations = [
        *[migrations.AddField(model_name=model, name="value_key_id", field=models.IntegerField(null=True,
                                                                                               editable=False))
          for model in ("value", "chainpoint", "purchasechunk")],
        migrations.RunPython(fill, migrations.RunPython.noop),
        *[migrations.AlterField(model_name=model, name="value_key_id", field=models.IntegerField(
            default=ldpmarket.keys.newest_value_key_id, editable=False))
          for model in ("value", "chainpoint", "purchasechunk")],
    ]
