from django.core.management.base import BaseCommand

from accounts.services import schedules_advance


class Command(BaseCommand):
    help = "Raise scheduled ceilings to their value now, synchronously (what Celery beat does)."

    def handle(self, *args, **options):
        n = schedules_advance()
        self.stdout.write(self.style.SUCCESS(f"raised {n} ceilings"))
