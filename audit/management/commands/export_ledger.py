"""``python manage.py export_ledger``: the privacy ledger as CSV, streamed, with filters
(docs/budget-rules.md#the-audit).

    python manage.py export_ledger --owner alice --attribute 3 --created-after 2025-01-01 -o ledger.csv

Filters are those of the audit API (``audit.filters.LedgerEntryFilter``):
owner and buyer by id or username, attribute and value by id, kind, and a time
range (ISO 8601 date or date-time; after is inclusive, before exclusive), and a
release's guarantee (ldp, uldp, per_report_non_collusion).  Each row carries the
release's guarantee and its purchase's mechanism.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from accounts.models import User
from audit.export import export_csv_rows
from audit.filters import ledger_filterset


def _user_exists(ref: str) -> bool:
    """Whether ``ref`` (a user id or username, as the filters take it) names a user."""
    ref = ref.strip()
    return User.objects.filter(**({"id": int(ref)} if ref.isdigit() else {"username": ref})).exists()


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
        for role in ("owner", "buyer"):  # a mistyped name would otherwise export an empty ledger without a word
            if role in data and not _user_exists(data[role]):
                raise CommandError(f"--{role}: no user with id or username {data[role]!r}")
        fs = ledger_filterset(data)
        if not fs.is_valid():
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in fs.errors.items()))
        # The CSV is streamed in chunks of many rows; count the rows themselves (one line each: no field holds a
        # line break), less the header.
        lines = 0
        if output == "-":
            for chunk in export_csv_rows(fs.qs):
                lines += chunk.count("\n")
                self.stdout.write(chunk, ending="")
            self.stdout.flush()
        else:
            with open(output, "w", newline="", encoding="utf-8") as fh:
                for chunk in export_csv_rows(fs.qs):
                    lines += chunk.count("\n")
                    fh.write(chunk)
        rows = max(lines - 1, 0)
        self.stderr.write(f"{rows} ledger entr{'y' if rows == 1 else 'ies'} written to "
                          f"{'stdout' if output == '-' else output}")
