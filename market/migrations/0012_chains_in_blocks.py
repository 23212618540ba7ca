"""Chains in blocks (docs/architecture.md#chains-in-blocks): every stored per-value chain becomes its slot in
its attribute's chain blocks, sealed at rest, and the per-value chain table is dropped.

Values get slots in value-id order, ``LDP_CHAIN_BLOCK`` per block.  A block's row at epsilon e holds the outputs
of its slots with a point at e (the others marked absent), sealed with ``market.values.sealing.seal_points``; its heads
are the chains' last epsilons.  The reverse rebuilds the per-value chains from the blocks.  ``manage.py audit``
checks the chains against the ledger before and after (tests/market/test_chain_migration.py).
"""
from decimal import Decimal

import django.db.models.deletion
import django.db.models.expressions
import django.db.models.functions.text
import django.db.models.lookups
from django.conf import settings
from django.db import migrations, models


def chains_to_blocks(apps, schema_editor):
    import numpy as np

    from market.values import sealing

    Attribute = apps.get_model("market", "Attribute")
    Chain = apps.get_model("market", "Chain")
    ChainBlock = apps.get_model("market", "ChainBlock")
    ChainPoint = apps.get_model("market", "ChainPoint")
    Value = apps.get_model("market", "Value")
    capacity = int(settings.LDP_CHAIN_BLOCK)
    for attribute_id in Attribute.objects.filter(mechanism="gradual_rr").order_by("id").values_list("id", flat=True):
        ids = list(Chain.objects.filter(value__attribute_id=attribute_id).order_by("value_id")
                   .values_list("value_id", flat=True))
        for index, start in enumerate(range(0, len(ids), capacity)):
            part = ids[start:start + capacity]
            block = ChainBlock.objects.create(attribute_id=attribute_id, index=index, capacity=capacity,
                                              size=len(part), heads=bytes(8 * capacity))
            rows = {v: (e, o, h) for v, e, o, h in Chain.objects.filter(value_id__in=part).values_list(
                "value_id", "epsilons", "outputs", "head_output")}
            width = len(bytes(rows[part[0]][2])) // 2
            eps = [np.frombuffer(bytes(rows[v][0]), dtype="<i8") for v in part]
            outs = [np.frombuffer(bytes(rows[v][1]), dtype="<i2").reshape(-1, width) for v in part]
            heads = np.zeros(capacity, dtype="<i8")
            heads[:len(part)] = [int(e[-1]) for e in eps]
            slot = np.concatenate([np.full(e.size, k) for k, e in enumerate(eps)])
            all_eps, all_out = np.concatenate(eps), np.concatenate(outs)
            points = []
            for e in np.unique(all_eps).tolist():
                at = all_eps == e
                present = np.zeros(capacity, dtype=bool)
                present[slot[at]] = True
                out = np.full((capacity, width), -1, dtype=np.int16)
                out[slot[at]] = all_out[at]
                bits = np.packbits(present, bitorder="little").tobytes()
                points.append(ChainPoint(block_id=block.id, attribute_id=attribute_id, epsilon=e, present=bits,
                                         sealed=sealing.seal_points(out, attribute_id=attribute_id, block_id=block.id,
                                                                    epsilon=e, present=bits)))
            ChainPoint.objects.bulk_create(points, batch_size=200)
            ChainBlock.objects.filter(id=block.id).update(heads=heads.tobytes())
            values = list(Value.objects.filter(id__in=part))
            for v in values:
                v.block_id, v.slot = block.id, part.index(v.id)
            Value.objects.bulk_update(values, ["block", "slot"], batch_size=2000)
    _check_now(schema_editor)


def blocks_to_chains(apps, schema_editor):
    import numpy as np

    from market.values import sealing

    Chain = apps.get_model("market", "Chain")
    ChainPoint = apps.get_model("market", "ChainPoint")
    Value = apps.get_model("market", "Value")
    for block_id in sorted(set(Value.objects.filter(block__isnull=False).values_list("block_id", flat=True))):
        points = list(ChainPoint.objects.filter(block_id=block_id).order_by("epsilon").values_list(
            "attribute_id", "epsilon", "present", "sealed"))
        values = list(Value.objects.filter(block_id=block_id).values_list("id", "slot"))
        capacity = len(bytes(points[0][2])) * 8
        present = np.array([np.unpackbits(np.frombuffer(bytes(p[2]), dtype=np.uint8), bitorder="little",
                                          count=capacity) for p in points], dtype=bool)
        opened = [sealing.open_points(p[3], attribute_id=p[0], block_id=block_id, epsilon=p[1], present=p[2],
                                      width=1).reshape(capacity, -1) for p in points]
        eps = np.array([p[1] for p in points], dtype="<i8")
        chains = []
        for value_id, slot in values:
            rows = np.flatnonzero(present[:, slot])
            out = np.stack([opened[r][slot] for r in rows]).astype("<i2")
            chains.append(Chain(value_id=value_id, epsilons=eps[rows].tobytes(), outputs=out.tobytes(),
                                length=rows.size, head=Decimal(int(eps[rows[-1]])) / 1_000_000,
                                head_output=out[-1].tobytes()))
        Chain.objects.bulk_create(chains, batch_size=2000)
    Value.objects.update(block=None, slot=None)
    ChainPoint.objects.all().delete()
    apps.get_model("market", "ChainBlock").objects.all().delete()
    _check_now(schema_editor)


def _check_now(schema_editor):
    """Run the deferred checks now: PostgreSQL refuses to alter a table with checks pending."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ('market', '0011_oue_olh'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ChainPoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('epsilon', models.BigIntegerField()),
                ('present', models.BinaryField()),
                ('sealed', models.BinaryField()),
                ('revision', models.PositiveIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name='value',
            name='slot',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name='ChainBlock',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('index', models.PositiveIntegerField()),
                ('capacity', models.PositiveIntegerField()),
                ('size', models.PositiveIntegerField(default=0)),
                ('heads', models.BinaryField()),
                ('revision', models.PositiveIntegerField(default=0)),
                ('attribute', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='chain_blocks', to='market.attribute')),
            ],
        ),
        migrations.AddField(
            model_name='value',
            name='block',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='values', to='market.chainblock'),
        ),
        migrations.AddConstraint(
            model_name='value',
            constraint=models.UniqueConstraint(fields=('block', 'slot'), name='value_block_slot_unique'),
        ),
        migrations.AddConstraint(
            model_name='value',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('block__isnull', True), ('slot__isnull', True)), models.Q(('block__isnull', False), ('slot__isnull', False)), _connector='OR'), name='value_block_and_slot_together'),
        ),
        migrations.AddField(
            model_name='chainpoint',
            name='attribute',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='market.attribute'),
        ),
        migrations.AddField(
            model_name='chainpoint',
            name='block',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='points', to='market.chainblock'),
        ),
        migrations.AddConstraint(
            model_name='chainblock',
            constraint=models.UniqueConstraint(fields=('attribute', 'index'), name='chain_block_index_unique'),
        ),
        migrations.AddConstraint(
            model_name='chainblock',
            constraint=models.CheckConstraint(condition=models.Q(('capacity__gte', 1), ('size__lte', models.F('capacity'))), name='chain_block_size'),
        ),
        migrations.AddConstraint(
            model_name='chainblock',
            constraint=models.CheckConstraint(condition=django.db.models.lookups.Exact(django.db.models.functions.text.Length('heads'), django.db.models.expressions.CombinedExpression(models.F('capacity'), '*', models.Value(8))), name='chain_block_heads_length'),
        ),
        migrations.AddConstraint(
            model_name='chainpoint',
            constraint=models.UniqueConstraint(fields=('block', 'epsilon'), name='chain_point_unique'),
        ),
        migrations.AddConstraint(
            model_name='chainpoint',
            constraint=models.CheckConstraint(condition=models.Q(('epsilon__gte', 0), ('epsilon__lte', 700000000)), name='chain_point_epsilon'),
        ),
        migrations.RunPython(chains_to_blocks, blocks_to_chains, elidable=False),
        migrations.DeleteModel(
            name='Chain',
        ),
    ]
