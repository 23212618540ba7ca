"""The ledger becomes a set of hash chains, one per shard, with signed checkpoints (docs/budget-rules.md#the-ledger).

The blocks written so far form one chain: it becomes shard 0, unchanged (its hashes, and the anchors auditors
recorded, still verify); the singleton head (id 1) becomes shard 0's head with its block count.  New blocks go
to their attribute's shard.  ``UNIQUE (shard, prev_hash)`` makes a fork impossible; the checkpoint tables are
append-only on PostgreSQL, as the ledger is.
"""
import django.db.models.deletion
from django.db import migrations, models

CHECKPOINT_TABLES = ["accounts_ledgercheckpoint", "accounts_ledgercheckpointleaf"]


def legacy_chain_is_shard_zero(apps, schema_editor):
    LedgerHead = apps.get_model("accounts", "LedgerHead")
    LedgerBlock = apps.get_model("accounts", "LedgerBlock")
    LedgerHead.objects.filter(shard=1).update(shard=0, blocks=LedgerBlock.objects.count())


def shard_zero_is_the_singleton(apps, schema_editor):
    apps.get_model("accounts", "LedgerHead").objects.filter(shard=0).update(shard=1)


def append_only(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("".join(f"CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t} "
                                      f"FOR EACH ROW EXECUTE FUNCTION ldp_append_only();\n" for t in CHECKPOINT_TABLES))


def not_append_only(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("".join(f"DROP TRIGGER IF EXISTS {t}_append_only ON {t};\n" for t in CHECKPOINT_TABLES))


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0011_money_entry_names"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="ledgerhead", name="ledger_head_singleton"),
        migrations.RenameField(model_name="ledgerhead", old_name="id", new_name="shard"),
        migrations.AlterField(model_name="ledgerhead", name="shard",
                              field=models.PositiveIntegerField(primary_key=True, serialize=False)),
        migrations.AddField(model_name="ledgerhead", name="blocks",
                            field=models.PositiveIntegerField(default=0,
                                                              help_text="How many blocks the shard's chain holds.")),
        migrations.AddField(model_name="ledgerblock", name="shard", field=models.PositiveIntegerField(default=0)),
        migrations.RunPython(legacy_chain_is_shard_zero, shard_zero_is_the_singleton),
        migrations.AddIndex(model_name="ledgerblock",
                            index=models.Index(fields=["shard", "id"], name="ledger_block_shard_id")),
        migrations.AddConstraint(model_name="ledgerblock",
                                 constraint=models.UniqueConstraint(fields=("shard", "prev_hash"),
                                                                    name="ledger_block_no_fork")),
        migrations.CreateModel(
            name="LedgerCheckpoint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField()),
                ("tree_size", models.PositiveIntegerField()),
                ("root_hash", models.CharField(max_length=64)),
                ("key_id", models.CharField(help_text="SHA-256 of the raw Ed25519 public key that signed it.",
                                            max_length=64)),
                ("signature", models.CharField(help_text="Ed25519 signature (hex) of the signed statement.",
                                               max_length=128)),
            ],
            options={"constraints": [models.UniqueConstraint(fields=("tree_size",),
                                                             name="ledger_checkpoint_tree_size_unique")]},
        ),
        migrations.CreateModel(
            name="LedgerCheckpointLeaf",
            fields=[
                ("index", models.PositiveIntegerField(primary_key=True, serialize=False)),
                ("shard", models.PositiveIntegerField()),
                ("blocks", models.PositiveIntegerField()),
                ("head_hash", models.CharField(max_length=64)),
                ("checkpoint", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="leaves",
                                                 to="accounts.ledgercheckpoint")),
            ],
        ),
        migrations.RunPython(append_only, not_append_only),
    ]
