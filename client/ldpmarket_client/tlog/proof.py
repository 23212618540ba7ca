"""C2SP offline proofs (c2sp.org/tlog-proof): an entry's index, its inclusion proof and the cosigned checkpoint,
in one text file (``.tlog-proof``); docs/receipts.md#exporting-a-proof.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

from .note import NoteError, _b64decode

HEADER = "c2sp.org/tlog-proof@v1"


@dataclass(frozen=True)
class Proof:
    index: int
    hashes: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None


def format_proof(proof: Proof) -> bytes:
    lines = [HEADER]
    if proof.extra is not None:
        lines.append("extra " + base64.b64encode(proof.extra).decode())
    lines.append(f"index {proof.index}")
    lines += [base64.b64encode(h).decode() for h in proof.hashes]
    return ("\n".join(lines) + "\n\n").encode() + proof.checkpoint


def parse_proof(data: bytes) -> Proof:
    """The parts of a proof; its checkpoint must then be opened with a policy and the inclusion checked."""
    head, sep, checkpoint = data.partition(b"\n\n")
    if not sep:
        raise NoteError("a tlog proof ends with a blank line and a checkpoint")
    lines = head.decode("ascii", errors="replace").split("\n")
    if lines[0] != HEADER:
        raise NoteError(f"a tlog proof starts with {HEADER}")
    rest, extra = lines[1:], None
    if rest and rest[0].startswith("extra "):
        extra = _b64decode(rest[0][6:], "the extra data")
        rest = rest[1:]
    if not rest or not rest[0].startswith("index "):
        raise NoteError("a tlog proof names its entry's index")
    index_text = rest[0][6:]
    if not index_text.isdigit() or (index_text != "0" and index_text.startswith("0")):
        raise NoteError("the index is a decimal without leading zeroes")
    if int(index_text) >= 2 ** 64:
        raise NoteError("the index is above 2^64 - 1")
    hashes = tuple(_b64decode(line, "a proof hash") for line in rest[1:])
    if any(len(h) != 32 for h in hashes):
        raise NoteError("each proof hash is 32 bytes")
    return Proof(int(index_text), hashes, checkpoint, extra)


def verify_proof(data: bytes, policy, leaf: bytes | None = None):
    """Verify a tlog proof with a ``policy.Policy``: its checkpoint is signed by one of the policy's logs and
    cosigned by a quorum of its witnesses, and ``leaf`` (the logged entry's data; default the proof's ``extra``,
    which is then only trusted through this inclusion check) is leaf ``index`` of the checkpoint's tree.  Returns
    ``(checkpoint, names of the witnesses that cosigned)``; raises ``NoteError`` (or ``QuorumNotMet``)."""
    from .merkle import leaf_hash, verify_inclusion

    proof = parse_proof(data)
    checkpoint, _, witnessed = policy.verify_checkpoint(proof.checkpoint)
    entry = proof.extra if leaf is None else leaf
    if entry is None:
        raise NoteError("the proof carries no entry (extra) and none was given")
    if not verify_inclusion(proof.index, checkpoint.size, leaf_hash(entry), proof.hashes, checkpoint.root):
        raise NoteError(f"the entry is not leaf {proof.index} of the checkpoint's tree of size {checkpoint.size}")
    return checkpoint, witnessed
