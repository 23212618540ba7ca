"""``python manage.py verify_restore``: a restored database proves itself (docs/operations.md#restore-drill).

    python manage.py verify_restore --checkpoint witness-checkpoint.txt --policy policy.txt

Runs the budget audit (every shard's hash chain, every block's entries root, the checkpoint log, every signature,
note and cosignature, the budgets and money) and the restore checks of ``audit.restore``: the latest checkpoint
the restored database holds verifies with a trusted log key and its root recomputes from the restored log; every
block the log covers is in the restored chains; and each kept checkpoint (``--checkpoint FILE``: a witness's or
``/log/checkpoint``'s signed note, or the JSON of ``ldpmarket-client ledger checkpoint``) verifies with a trusted
key (and the policy's quorum) and is contained in the restored log.  Trusted log keys: those of ``--policy`` and
``--log-key``, kept apart from the backup, or else this process's ``LDP_LEDGER_SIGNING_KEYS`` -- never the key
history the restored database carries.

Exit status: 0 when everything holds, 1 naming what differs, 2 when an input cannot be read.
"""
from __future__ import annotations

import re

from django.core.management.base import BaseCommand, CommandError

from audit.report import report_json
from audit.restore import RestoreInputError, kept_checkpoint, trust_anchors, verify_restore

UNREADABLE = 2


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise CommandError(f"cannot read {what} {path}: {exc.strerror or exc}", returncode=UNREADABLE) from None


class Command(BaseCommand):
    help = ("Verify a restored database (docs/operations.md#restore-drill): the budget audit (hash chains, entries "
            "roots, the checkpoint log), the latest checkpoint it holds against trusted log keys, and each kept "
            "checkpoint (--checkpoint) contained in the restored log. Exit 0 when all holds, 1 naming what differs, "
            "2 on an unreadable input.")

    def add_arguments(self, parser):
        parser.add_argument("--checkpoint", action="append", default=[], metavar="FILE",
                            help="a checkpoint kept outside the database: a signed note (a witness's GET "
                                 "<prefix>/<origin hash>/checkpoint, /log/checkpoint) or the JSON of "
                                 "`ldpmarket-client ledger checkpoint`; the restored log must contain it "
                                 "(repeatable)")
        parser.add_argument("--policy", default=None, metavar="FILE",
                            help="a tlog-policy (docs/receipts.md#witnesses): its log keys are trusted, and kept "
                                 "checkpoints need its quorum of witness cosignatures")
        parser.add_argument("--log-key", action="append", default=[], metavar="VKEY",
                            help="a log verifier key to trust (<origin>+<id>+<key>, as GET "
                                 "/api/v1/ledger/public-key/ gives it; repeatable). Without --policy or --log-key, "
                                 "the keys of this process's LDP_LEDGER_SIGNING_KEYS are trusted")
        parser.add_argument("--anchor", default="",
                            help="a ledger head recorded after a backup (audit_budgets prints it): it must still "
                                 "be in the chain")
        parser.add_argument("--examples", type=int, default=5, help="offending rows shown per failed check")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, checkpoint, policy, log_key, anchor, examples, json, **options):
        if anchor and not re.fullmatch(r"[0-9a-f]{64}", anchor.strip().lower()):
            raise CommandError(f"--anchor {anchor!r} is not a block hash: give the 64 hexadecimal characters of a "
                               f"ledger head printed by an earlier audit", returncode=UNREADABLE)
        try:
            trust = trust_anchors(policy_text=_read(policy, "the policy") if policy else None,
                                  policy_name=policy or "", log_keys=log_key)
            kept = [kept_checkpoint(_read(path, "the checkpoint"), path) for path in checkpoint]
        except RestoreInputError as exc:
            raise CommandError(str(exc), returncode=UNREADABLE) from None
        report = verify_restore(trust=trust, kept=kept, examples=examples, anchor=anchor or None)
        self.stdout.write(report_json(report) if json else report.as_text())
        if not report.ok:
            failed = report.failed
            first = next((c.examples[0] for c in failed if c.examples), "")
            raise CommandError(f"restore verification FAILED: {len(failed)} check(s) violated: "
                               f"{'; '.join(c.name for c in failed[:3])}{' ...' if len(failed) > 3 else ''}"
                               + (f" -- {first}" if first else "") + " (docs/operations.md#restore-drill)")
