"""C2SP checkpoints (c2sp.org/tlog-checkpoint): the text of a log's signed tree head
(docs/receipts.md#checkpoints-as-signed-notes).

``<origin>\\n<tree size>\\n<base64 root>\\n`` and, optionally, extension lines (ldpmarket writes none).  A
checkpoint is trusted only once ``note.open_note`` verified a log signature over it.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

from .note import NoteError, _b64decode, check_key_name


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    @property
    def text(self) -> bytes:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return ("\n".join(lines) + "\n").encode()


def format_checkpoint(origin: str, size: int, root: bytes) -> bytes:
    """A checkpoint's text, without extension lines."""
    check_origin(origin)
    if size < 0 or len(root) != 32:
        raise NoteError("a checkpoint has a non-negative size and a 32-byte root")
    return Checkpoint(origin, size, root).text


def check_origin(origin: str) -> str:
    """An origin ldpmarket accepts: a key name (it is also the log's key name), e.g. ``market.example.org/ledger``."""
    return check_key_name(origin)


def parse_checkpoint(text: bytes) -> Checkpoint:
    """The origin, size, root and extension lines of a checkpoint's text (a verified note's ``text``)."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("a checkpoint is UTF-8 text") from None
    if not decoded.endswith("\n"):
        raise NoteError("a checkpoint's text ends with a newline")
    lines = decoded[:-1].split("\n")
    if len(lines) < 3 or any(not line for line in lines):
        raise NoteError("a checkpoint is at least three non-empty lines: origin, tree size, root hash")
    origin, size_text, root_text, *extensions = lines
    if not size_text.isascii() or not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
        raise NoteError(f"the tree size {size_text!r} is not a decimal without leading zeroes")
    if int(size_text) >= 2 ** 64:
        raise NoteError("the tree size is above 2^64 - 1")
    root = _b64decode(root_text, "the root hash")
    if len(root) != 32:
        raise NoteError("the root hash is 32 bytes (SHA-256)")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))
