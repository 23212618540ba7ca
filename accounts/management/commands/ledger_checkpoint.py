"""``python manage.py ledger_checkpoint``: sign a checkpoint of the ledger now (docs/budget-rules.md#checkpoints)."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from accounts.ledger import signing
from accounts.ledger.checkpoints import blocks_awaiting_checkpoint, checkpoint_make


class Command(BaseCommand):
    help = ("Append a leaf for each ledger block written since the last checkpoint to the checkpoint log and sign "
            "its Merkle root (Ed25519); prints the checkpoint. Beat does this every "
            "LDP_CHECKPOINT_INTERVAL_SECONDS (docs/receipts.md).")

    def add_arguments(self, parser):
        parser.add_argument("--public-key", action="store_true", help="print the public key (PEM) and exit")

    def handle(self, *args, public_key=False, **options):
        if public_key:
            self.stdout.write(signing.public_pem())
            return
        checkpoint = checkpoint_make()
        if checkpoint is None:
            self.stdout.write("The ledger is empty: nothing to checkpoint.")
            return
        # One checkpoint takes at most LDP_CHECKPOINT_MAX_ENTRIES entries' blocks: go on until every block is in.
        while checkpoint.appended and blocks_awaiting_checkpoint():
            self._print(checkpoint)
            checkpoint = checkpoint_make()
        self._print(checkpoint)
        left = blocks_awaiting_checkpoint()
        if left:
            self.stderr.write(f"{left} block(s) got no leaf: their stored entries do not match their hashes. "
                              f"Run `manage.py audit_budgets` (docs/budget-rules.md#the-audit).")

    def _print(self, checkpoint) -> None:
        self.stdout.write(f"checkpoint {checkpoint.id}: tree size {checkpoint.tree_size}, root {checkpoint.root_hash}, "
                          f"{checkpoint.created_at.isoformat(timespec='seconds')}, key {checkpoint.key_id[:16]}..., "
                          f"signature {checkpoint.signature[:16]}...")
