from django.core.management.base import BaseCommand

from market.sweeper import sweep


class Command(BaseCommand):
    help = ("Send again (or fail) the purchases and chain extensions nobody is running any more, now (what Celery "
            "beat does every LDP_SWEEP_INTERVAL_SECONDS; docs/operations.md).")

    def handle(self, *args, **options):
        self.stdout.write(self.style.SUCCESS(str(sweep())))
