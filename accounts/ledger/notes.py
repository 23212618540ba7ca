"""The ledger's checkpoints as C2SP signed notes (docs/receipts.md#checkpoints-as-signed-notes): reads.

A checkpoint's note is ``<origin>\\n<tree size>\\n<base64 root>\\n``, a blank line and one Ed25519 signature line
(type 0x01) per key of the log's ring (``accounts.ledger.signing``).  The served note (``served_note``: what
``/log/checkpoint`` answers) is the latest checkpoint's note with every witness cosignature stored for it
(``LedgerCosignature``, type 0x04) appended, in the witnesses' name order.
"""
from __future__ import annotations

from accounts.ledger import signing
from accounts.models import LedgerCheckpoint, LedgerCosignature
from ldpmarket_client.tlog.checkpoint import format_checkpoint
from ldpmarket_client.tlog.note import sign_note


def checkpoint_text(tree_size: int, root_hex: str) -> bytes:
    """The checkpoint's note text: origin, tree size, base64 root (no extension lines)."""
    return format_checkpoint(signing.origin(), tree_size, bytes.fromhex(root_hex))


def sign_checkpoint(tree_size: int, root_hex: str) -> str:
    """The signed note of a checkpoint, signed by every key of the ring (newest first)."""
    return sign_note(checkpoint_text(tree_size, root_hex), signing.note_signers()).decode()


def note_of(checkpoint: LedgerCheckpoint) -> str:
    """The checkpoint's signed note; a checkpoint made before signed notes is signed now (Ed25519 is
    deterministic, so the same keys give the same note every time)."""
    return checkpoint.note or sign_checkpoint(checkpoint.tree_size, checkpoint.root_hash)


def latest_checkpoint() -> LedgerCheckpoint | None:
    return LedgerCheckpoint.objects.order_by("-tree_size").first()


def latest_size() -> int:
    """The tree size of the latest signed checkpoint (0 before the first)."""
    checkpoint = latest_checkpoint()
    return checkpoint.tree_size if checkpoint else 0


def cosigned_note(checkpoint: LedgerCheckpoint) -> bytes:
    """The checkpoint's note with the cosignature lines of its witnesses appended."""
    lines = (LedgerCosignature.objects.filter(checkpoint=checkpoint).order_by("witness__name")
             .values_list("line", flat=True))
    return (note_of(checkpoint) + "".join(f"{line}\n" for line in lines)).encode()


def served_note() -> bytes | None:
    """The latest checkpoint as ``/log/checkpoint`` serves it (``None`` before the first checkpoint)."""
    checkpoint = latest_checkpoint()
    return None if checkpoint is None else cosigned_note(checkpoint)
