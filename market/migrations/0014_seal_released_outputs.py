"""The outputs a purchase released are sealed at rest too (``market.values.sealing.seal_released``,
docs/architecture.md#chains-in-blocks): every stored chunk's plaintext outputs are sealed, bound to its
purchase, chunk and value ids.  Reversed, they are opened again."""
from django.db import migrations


def seal(apps, schema_editor):
    from market.values import sealing

    Chunk = apps.get_model("market", "PurchaseChunk")
    for chunk in Chunk.objects.order_by("id").iterator(chunk_size=200):
        chunk.outputs = sealing.seal_released(bytes(chunk.outputs), purchase_id=chunk.purchase_id, seq=chunk.seq,
                                              value_ids=bytes(chunk.value_ids))
        chunk.save(update_fields=["outputs"])


def open_again(apps, schema_editor):
    from market.values import sealing

    Chunk = apps.get_model("market", "PurchaseChunk")
    for chunk in Chunk.objects.order_by("id").iterator(chunk_size=200):
        chunk.outputs = sealing.open_released(chunk.outputs, purchase_id=chunk.purchase_id, seq=chunk.seq,
                                              value_ids=bytes(chunk.value_ids))
        chunk.save(update_fields=["outputs"])


class Migration(migrations.Migration):

    dependencies = [
        ("market", "0013_holdings_derived"),
    ]

    operations = [
        migrations.RunPython(seal, open_again),
    ]
