"""Grids end at the samplers' limit, 30 (docs/mechanisms.md, "The epsilon limit").

A grid that went further is cut at 30 first (a grid starting above 30 becomes the single point 30): chains
are only ever grown to grid points, and no sampler realises an epsilon above 30 exactly.
"""
from decimal import Decimal

from django.db import migrations, models

LIMIT = Decimal(30)


def cut_grids(apps, schema_editor):
    Attribute = apps.get_model("market", "Attribute")
    Attribute.objects.filter(grid_start__gt=LIMIT).update(grid_start=LIMIT)
    Attribute.objects.filter(grid_stop__gt=LIMIT).update(grid_stop=LIMIT)


class Migration(migrations.Migration):

    dependencies = [
        ('market', '0006_drop_redundant_fk_indexes'),
    ]

    operations = [
        migrations.RunPython(cut_grids, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name='attribute',
            name='attribute_grid_valid',
        ),
        migrations.AddConstraint(
            model_name='attribute',
            constraint=models.CheckConstraint(condition=models.Q(('grid_start__gte', 0), ('grid_step__gt', 0), ('grid_stop__gte', models.F('grid_start')), ('grid_stop__lte', 30)), name='attribute_grid_valid'),
        ),
    ]
