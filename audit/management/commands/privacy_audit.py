"""``python manage.py privacy_audit``: the empirical privacy audit of stored chains
(docs/mechanisms-reference.md#privacy-audit-by-inference).

For each attribute, a random sample of values with their raw datum; their true
inputs are opened inside this process only (raw values never leave it: the
output is error rates); the four attackers run at the chains' common epsilons;
a table and a PNG plot are written.  Exits 1 when an attacker beats the
theoretical minimum error (a leaking chain) or a sealed input does not open.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.privacy import privacy_audit
from audit.report import report_json


def default_out() -> Path:
    media = getattr(settings, "MEDIA_ROOT", "") or ""
    return (Path(media) if media else Path(settings.BASE_DIR) / "media") / "audit"


class Command(BaseCommand):
    help = "Attack a sample of stored chains per attribute and compare error rates with the Bayes bound."

    def add_arguments(self, parser):
        parser.add_argument("--sample", type=int, default=2000, help="values sampled per attribute (default 2000)")
        parser.add_argument("--levels", type=int, default=10, help="epsilon levels audited per attribute")
        parser.add_argument("--attribute", type=int, action="append", default=None,
                            help="audit only this attribute id (repeatable)")
        parser.add_argument("--coverage", type=float, default=0.5,
                            help="an epsilon belongs to the common path when at least this share of the sampled "
                                 "chains holds it (default 0.5)")
        parser.add_argument("--out", default=None, help="directory for the plot and JSON (default MEDIA_ROOT/audit "
                                                        "or BASE_DIR/media/audit)")
        parser.add_argument("--seed", type=int, default=None,
                            help="seed a numpy generator (reproducible runs); default: the secure source")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, sample, levels, attribute, coverage, out, seed, json, **options):
        if sample < 2 or levels < 1 or not 0 < coverage <= 1:
            raise CommandError("--sample must be >= 2, --levels >= 1 and --coverage in (0, 1]")
        rng = np.random.default_rng(seed) if seed is not None else None
        report = privacy_audit(sample=sample, levels=levels, attribute_ids=attribute, coverage=coverage, rng=rng)
        directory = Path(out) if out else default_out()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "privacy_audit.json").write_text(report_json(report))
        self.stdout.write(report_json(report) if json else report.as_text())
        if report.png:
            path = directory / "privacy_audit.png"
            path.write_bytes(report.png)
            self.stderr.write(f"plot written to {path}")
        if not report.ok:
            bad = [f"{a.attribute_id} ({a.error or 'leak'})" for a in report.attributes if not a.ok]
            raise CommandError(f"privacy audit FAILED for attribute(s) {', '.join(bad)}")
