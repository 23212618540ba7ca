"""``python manage.py audit_budgets``: re-check every budget invariant from the ledger
(docs/budget-rules.md#budgets-and-ceilings).

Prints a report (sections with PASS/FAIL, counts, the first offending rows) and
exits 0 only when everything holds; any violation exits 1.
"""
from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from audit.budget_audit import audit_budgets
from audit.report import report_json


class Command(BaseCommand):
    help = ("Re-prove the privacy budgets from the ledger: hash chain, per-value replay against the ceilings in "
            "force, budget rows, purchases and money. Exit status 1 on any violation.")

    def add_arguments(self, parser):
        parser.add_argument("--examples", type=int, default=5, help="offending rows shown per failed check")
        parser.add_argument("--anchor", default="",
                            help="a block hash recorded earlier (e.g. a previous report's ledger head): it must "
                                 "still be in the chain, which also catches a rewrite that recomputed every hash")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, examples, anchor, json, **options):
        if anchor and not re.fullmatch(r"[0-9a-f]{64}", anchor.strip().lower()):
            raise CommandError(f"--anchor {anchor!r} is not a block hash: give the 64 hexadecimal characters of a "
                               f"ledger head printed by an earlier audit")
        report = audit_budgets(examples=examples, anchor=anchor or None)
        self.stdout.write(report_json(report) if json else report.as_text())
        if not report.ok:
            failed = report.failed
            raise CommandError(f"budget audit FAILED: {len(failed)} check(s) violated "
                               f"({sum(c.failures for c in failed)} offending rows)")
