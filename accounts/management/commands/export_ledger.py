"""``python manage.py export_ledger``: the privacy ledger as CSV, streamed, with filters (docs/budget-rules.md#the-audit).

    python manage.py export_ledger --owner alice --attribute 3 --created-after 2025-01-01 -o ledger.csv

Filters are those of the audit API (``accounts.audit_api.LedgerEntryFilter``):
owner and buyer by id or username, attribute and value by id, kind, and a time
range (ISO 8601 date or date-time; after is inclusive, before exclusive), and a
release's guarantee (ldp, uldp, per_report_non_collusion).  Each row carries the
release's guarantee and its purchase's mechanism.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from accounts.audit import export_csv_rows
from accounts.audit_api import ledger_filterset


class Command(BaseCommand):
    help = "Write the privacy ledger (optionally filtered) as CSV to stdout or a file."

    def add_arguments(self, parser):
        for name in ("owner", "buyer", "attribute", "value", "purchase", "kind", "guarantee", "created-after",
                     "created-before"):
            parser.add_argument(f"--{name}", default=None)
        parser.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")

    def handle(self, *args, output, **options):
        data = {k: options[k] for k in ("owner", "buyer", "attribute", "value", "purchase", "kind", "guarantee",
                                        "created_after", "created_before") if options.get(k) not in (None, "")}
        fs = ledger_filterset(data)
        if not fs.is_valid():
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in fs.errors.items()))
        rows = export_csv_rows(fs.qs)
        n = -1
        if output == "-":
            for n, line in enumerate(rows):
                self.stdout.write(line, ending="")
            self.stdout.flush()
        else:
            with open(output, "w", newline="", encoding="utf-8") as fh:
                for n, line in enumerate(rows):
                    fh.write(line)
            self.stderr.write(f"{n} ledger entries written to {output}")
