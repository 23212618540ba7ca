"""``manage.py rotate_value_key``: seal every sealed row again with the newest key of ``LDP_VALUE_KEYS``, online
(``market.values.rotation``; the runbook: docs/security.md#rotating-the-value-key)."""
from __future__ import annotations

import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from market.values import rotation


class Command(BaseCommand):
    help = ("Seal every raw value, input, chain point and released chunk under an older key of LDP_VALUE_KEYS again "
            "with its newest key, in batches (one transaction each), while the service runs; resumable.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="only count the sealed rows per key")
        parser.add_argument("--batch", type=int, default=None,
                            help="rows per batch (default: 2000 values, 200 chain points or chunks)")
        parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")

    def handle(self, *args, dry_run=False, batch=None, no_progress=False, **options):
        if not dry_run and len(settings.LDP_VALUE_KEYS) > 1 and not (settings.LDP_LEDGER_SIGNING_KEYS
                                                                   and settings.LDP_LEDGER_BLINDING_KEY):
            raise CommandError("Set LDP_LEDGER_SIGNING_KEYS and LDP_LEDGER_BLINDING_KEY first (to the value key they "
                               "were derived from): docs/security.md#rotating-the-value-key, step 1.")
        names = rotation.key_names()
        self._report("before" if not dry_run else "sealed rows", rotation.counts(), names)
        if dry_run:
            return
        if len(names) == 1:
            self.stdout.write("LDP_VALUE_KEYS holds one key: every row it opens is under it already.")
        show = None if no_progress else self._progress()
        done = rotation.rotate(batch=dict.fromkeys(rotation.TABLES, batch) if batch else None, progress=show)
        if show is not None:
            sys.stderr.write("\n")
        for table in rotation.TABLES:
            self.stdout.write(f"{table}: {done.rotated[table]} sealed again in {done.seconds[table]:.1f} s "
                              f"({done.rate(table):.0f} rows/s)")
        for message in done.broken[:20]:
            self.stderr.write(f"  does not open: {message}")
        after = rotation.counts()
        self._report("after", after, names)
        left = rotation.remaining(after)
        older = sum(t["older"] for t in left.values())
        retired = sum(t["retired"] for t in left.values())
        if retired or done.broken:
            raise CommandError(f"{retired} row(s) are under keys no longer in LDP_VALUE_KEYS and {len(done.broken)} "
                               f"did not open: put the key that sealed them back in the ring and run again "
                               f"(audit_budgets names them).")
        if older:
            raise CommandError(f"{older} row(s) are still under older keys (written meanwhile by a process without the "
                               f"new ring?): run rotate_value_key again.")
        self.stdout.write(self.style.SUCCESS("every sealed row is under the newest key: the older keys can leave "
                                             "LDP_VALUE_KEYS (docs/security.md#rotating-the-value-key)"))

    def _report(self, title: str, counts: dict, names: dict[int, str]) -> None:
        self.stdout.write(f"{title}:")
        for table, per in counts.items():
            parts = [f"{n} under {names.get(k, f'key {k} (not in LDP_VALUE_KEYS)')}" for k, n in sorted(
                per.items(), key=lambda kv: (kv[0] not in names, list(names).index(kv[0]) if kv[0] in names else 0))]
            self.stdout.write(f"  {table}: {', '.join(parts) or 'none'}")

    def _progress(self):
        started, current = [time.perf_counter()], [None]

        def show(table: str, done: int, total: int) -> None:
            if table != current[0]:  # a table's line stays; the next one starts on its own
                if current[0] is not None:
                    sys.stderr.write("\n")
                started[0], current[0] = time.perf_counter(), table
            elapsed = time.perf_counter() - started[0]
            width = 30
            filled = width * done // max(total, 1)
            sys.stderr.write(f"\r{table:>16} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                             f"({done / elapsed if elapsed else 0:.0f} rows/s)  ")
            sys.stderr.flush()

        return show
