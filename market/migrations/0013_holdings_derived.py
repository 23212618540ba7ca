"""Holdings derived (docs/architecture.md#chains-in-blocks): a buyer's held epsilon per value is the highest
epsilon of their completed chain purchases that released it (``market.purchases.eligibility.held_epsilons``, from the
purchases' output chunks), so the per-value ``Holding`` table is dropped.  Before dropping it, every stored
holding is checked against what the purchases give; a difference stops the migration (nothing is lost).
"""
import numpy as np
from django.db import migrations


def _derived(apps) -> dict[tuple[int, int], int]:
    """``{(buyer, value): highest micro-epsilon released to the buyer}`` from the completed chain purchases."""
    PurchaseChunk = apps.get_model("market", "PurchaseChunk")
    derived: dict[tuple[int, int], int] = {}
    chunks = PurchaseChunk.objects.filter(purchase__status="completed", purchase__mechanism="gradual_rr")
    for buyer, epsilon, blob in chunks.values_list("purchase__buyer_id", "purchase__epsilon", "value_ids").iterator():
        e = int(round(epsilon * 10**6))
        for v in np.frombuffer(bytes(blob), dtype="<i8").tolist():
            if derived.get((buyer, v), 0) < e:
                derived[(buyer, v)] = e
    return derived


def check_derivable(apps, schema_editor):
    Holding = apps.get_model("market", "Holding")
    derived = _derived(apps)
    for buyer, value, epsilon in Holding.objects.values_list("buyer_id", "value_id", "epsilon").iterator():
        if derived.get((buyer, value)) != int(round(epsilon * 10**6)):
            raise RuntimeError(f"The holding of value {value} by buyer {buyer} at {epsilon} is not what the buyer's "
                               f"purchases released; fix it before migrating (docs/architecture.md#chains-in-blocks).")


def rederive(apps, schema_editor):
    """Reversed: the holdings table again, filled from the purchases."""
    from decimal import Decimal

    Holding = apps.get_model("market", "Holding")
    Holding.objects.bulk_create([Holding(buyer_id=b, value_id=v, epsilon=Decimal(e) / 10**6)
                                 for (b, v), e in _derived(apps).items()], batch_size=5000)


class Migration(migrations.Migration):

    dependencies = [
        ('market', '0012_chains_in_blocks'),
    ]

    operations = [
        migrations.RunPython(check_derivable, rederive),
        migrations.DeleteModel(
            name='Holding',
        ),
    ]
