"""``python manage.py ledger_checkpoint``: sign a checkpoint of the ledger now (docs/budget-rules.md#checkpoints)."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from accounts.checkpoints import checkpoint_make
from ldpmarket import ledger_key


class Command(BaseCommand):
    help = ("Append the shard heads that moved since the last checkpoint to the checkpoint log and sign its Merkle "
            "root (Ed25519); prints the checkpoint. Beat does this every LDP_CHECKPOINT_INTERVAL_SECONDS.")

    def add_arguments(self, parser):
        parser.add_argument("--public-key", action="store_true", help="print the public key (PEM) and exit")

    def handle(self, *args, public_key=False, **options):
        if public_key:
            self.stdout.write(ledger_key.public_pem())
            return
        checkpoint = checkpoint_make()
        if checkpoint is None:
            self.stdout.write("The ledger is empty: nothing to checkpoint.")
            return
        self.stdout.write(f"checkpoint {checkpoint.id}: tree size {checkpoint.tree_size}, root {checkpoint.root_hash}, "
                          f"{checkpoint.created_at.isoformat(timespec='seconds')}, key {checkpoint.key_id[:16]}..., "
                          f"signature {checkpoint.signature[:16]}...")
