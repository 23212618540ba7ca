"""The checkpoints' signed notes, the log's key history and the witnesses' cosignatures, checked
(docs/receipts.md#the-audit).

Every checkpoint's note must be the C2SP checkpoint of its own tree size and root under ``LDP_LOG_ORIGIN``, with at
least one signature by a key of the log's key history (``LedgerLogKey``, and the keys of the ring) and no
signature by such a key that fails.  Every stored cosignature must verify with its witness's key over its
checkpoint's text.  A witness whose last answer refused the log (403: the log's key is not trusted, 404: the
origin is unknown, 422: the checkpoint is not consistent with what it saw, or a 409 naming a size larger than
the log) fails the audit: either the witness is misconfigured or the log showed it another tree.  A witness that
is only unreachable does not: it is retried (``accounts.ledger.witnesses``).
"""
from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from accounts.ledger import notes, signing, tiles
from accounts.models import LedgerCosignature, LedgerLogKey, LedgerTile, LedgerWitness
from ldpmarket_client.tlog.note import NoteError, open_note, parse_note, parse_vkey

from .report import Recorder

S = "Checkpoints"
#: Answers of a witness that mean it refused the log, not that it was unreachable.
REFUSALS = (403, 404, 422)


def log_keys() -> dict[str, Ed25519PublicKey]:
    """Every key of the log's history and ring, by its statement key id (SHA-256 of the raw key, hex)."""
    raws = {bytes.fromhex(k) for k in LedgerLogKey.objects.values_list("public_key", flat=True)}
    raws |= {s.verifier.public for s in signing.note_signers()}
    keys = {raw: Ed25519PublicKey.from_public_bytes(raw) for raw in raws}
    return {signing.key_id(key): key for key in keys.values()}


def note_problem(note: str, size: int, root_hash: str, keys: dict[str, Ed25519PublicKey]) -> str | None:
    """What is wrong with a checkpoint's stored note, or ``None``."""
    verifiers = [signing.note_verifier(signing.public_raw(key)) for key in keys.values()]
    try:
        opened = open_note(parse_note(note.encode()), verifiers)
    except NoteError as exc:
        return f"its signed note does not verify with the log's keys ({exc})"
    if opened.text != notes.checkpoint_text(size, root_hash):
        return "its signed note states another origin, size or root"
    return None


def check_cosignatures(rec: Recorder) -> None:
    cosignatures = list(LedgerCosignature.objects.select_related("checkpoint", "witness").order_by("id"))
    bad = []
    for c in cosignatures:
        text = notes.checkpoint_text(c.checkpoint.tree_size, c.checkpoint.root_hash)
        try:
            opened = open_note(text + b"\n" + f"{c.line}\n".encode(), [parse_vkey(c.witness.vkey)])
            if opened.verified[0][1] != c.timestamp:
                raise NoteError("its time is not the one stored")
        except NoteError as exc:
            bad.append(f"the cosignature of checkpoint {c.checkpoint_id} by {c.witness.name}: {exc}")
    rec.fail(S, "each stored witness cosignature verifies with its witness's key (C2SP tlog-cosignature)",
             len(cosignatures), bad)
    witnesses = list(LedgerWitness.objects.order_by("name"))
    latest = notes.latest_size()
    refused = [f"witness {w.name} ({w.url}) answered {w.last_status}: {w.last_error}" for w in witnesses
               if w.last_status in REFUSALS or (w.last_status == 409 and w.size > latest)]
    rec.fail(S, "no witness refused the log's checkpoints (403, 404, 422, or a larger tree than the log's)",
             len(witnesses), refused)


def check_tiles(rec: Recorder, leaf_hashes: list[bytes]) -> None:
    """Every stored full tile of the tiled log (``LedgerTile``, docs/receipts.md#the-tiled-log) equals the tile the
    checkpoint log's leaves give: a stored tile changed after it was computed would be served to every reader."""
    by_level: dict[int, list[bytes]] = {}
    bad, checked = [], 0
    for level, index, hashes in LedgerTile.objects.order_by("level", "index").values_list("level", "index",
                                                                                           "hashes"):
        if level not in by_level:
            by_level[level] = tiles.level_hashes(leaf_hashes, level)
        want = b"".join(by_level[level][index * tiles.WIDTH:(index + 1) * tiles.WIDTH])
        checked += 1
        if bytes(hashes) != want:
            bad.append(f"the stored tile {index} of level {level} is not the one the log's leaves give")
    rec.fail(S, "every stored tile of the tiled log (/log/tile/) is the one the log's leaves give", checked, bad)
