from django.core.management.base import BaseCommand

from market.chains.extension import chains_extend
from market.models import Attribute


class Command(BaseCommand):
    help = "Extend every chain whose ceiling passed its head, synchronously (what the Celery task does)."

    def add_arguments(self, parser):
        parser.add_argument("--attribute", type=int, help="only this attribute id")

    def handle(self, *args, attribute=None, **options):
        ids = [attribute] if attribute else list(Attribute.objects.order_by("id").values_list("id", flat=True))
        total = 0
        for attribute_id in ids:
            n = chains_extend(attribute_id=attribute_id)
            total += n
            self.stdout.write(f"attribute {attribute_id}: extended {n} chains")
        self.stdout.write(self.style.SUCCESS(f"extended {total} chains"))
