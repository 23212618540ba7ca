"""Checking a receipts file with nothing from the service (docs/receipts.md#checking-receipts).

    import json
    from ldpmarket_client import verify_bundle

    report = verify_bundle(json.load(open("receipts.json")), json.load(open("checkpoint.json")),
                           open("key.pem", "rb").read(), consistency=None)
    report.ok                    # every check passed
    for line in report.lines():  # one line per problem, then a summary
        print(line)

The checks, in the order of docs/receipts.md#checking-receipts: the checkpoint the owner kept is signed by the
key (:data:`CHECKPOINT`); the receipts file's checkpoint too (:data:`FILE_CHECKPOINT`); both are of one log
(:data:`SAME_LOG`: equal roots at equal sizes, else a consistency proof); every receipt's entry is in its block
and the block in the log (:data:`PROOFS`); the losses obey the ceilings and each value's receipts chain
(:data:`LOSSES`).  The file's shape is :data:`FILE`.  Every problem is reported, not only the first.

This module needs ``cryptography`` (Ed25519) and the standard library; it imports nothing of the service.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# The package's own RFC 6962 code, so that it depends on nothing of the service; tests/client/test_receipts_verify.py
# and tests/client/test_tlog_merkle.py check it against the service's accounts/ledger/merkle.py.
from .tlog.merkle import LEAF_PREFIX, NODE_PREFIX, leaf_hash, node_hash, verify_consistency, verify_inclusion  # noqa: F401

FORMAT = "ldpmarket-receipts-v1"
STATEMENT_HEADER = "ldpmarket ledger checkpoint v1"
#: Entry data (docs/receipts.md#entry-data): version 1, the entry's fields alone; version 2, blinded by the
#: entry's own 32-byte key, which follows the marker.
ENTRY_MARKER = b"ldpmarket-ledger-entry-leaf-v1\x00"
ENTRY_MARKER_V2 = b"ldpmarket-ledger-entry-leaf-v2\x00"
#: Block leaf data (docs/receipts.md#block-leaf-data-135-bytes): its marker says how its entries are hashed.
BLOCK_MARKER = b"ldpmarket-ledger-block-leaf-v1\x00"
BLOCK_MARKER_V2 = b"ldpmarket-ledger-block-leaf-v2\x00"
ENTRY_MARKERS = {1: ENTRY_MARKER, 2: ENTRY_MARKER_V2}
BLOCK_MARKERS = {1: BLOCK_MARKER, 2: BLOCK_MARKER_V2}
KEY_SIZE = 32
#: The 16 little-endian int64 of an entry's data, in order (docs/receipts.md#entry-data).
ENTRY_FIELDS = ("value", "kind", "epsilon", "purchase", "chain_before", "chain_after", "oneshot_before",
                "oneshot_after", "ceiling", "schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at",
                "schedule_shape", "schedule_steps", "guarantee")
ENTRY_DATA_SIZE = len(ENTRY_MARKER) + 8 * len(ENTRY_FIELDS)  # 159, version 1
ENTRY_DATA_SIZES = {1: ENTRY_DATA_SIZE, 2: ENTRY_DATA_SIZE + KEY_SIZE}  # 191, version 2
#: The 5 little-endian int64 of a block's leaf data, then its hash and its entries root (32 bytes each).
BLOCK_FIELDS = ("shard", "height", "block_id", "entry_count", "created_at")
BLOCK_DATA_SIZE = len(BLOCK_MARKER) + 8 * len(BLOCK_FIELDS) + 32 + 32
KINDS = ("chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted",
         "owner_custody", "owner_upload")
GUARANTEES = ("", "ldp", "uldp", "per_report_non_collusion")
SHAPES = ("", "linear", "steps")
MICRO = 10 ** 6
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: The checks of a :class:`Report`, by name.
FILE, CHECKPOINT, FILE_CHECKPOINT, SAME_LOG, PROOFS, LOSSES = (
    "file", "checkpoint", "file's checkpoint", "same log", "proofs", "losses")
DESCRIPTIONS = {
    FILE: "the receipts file is a receipts file",
    CHECKPOINT: "your checkpoint is signed by the key and states its tree size and root",
    FILE_CHECKPOINT: "the receipts file's checkpoint is signed by the same key and states its tree size and root",
    SAME_LOG: "both checkpoints are of one log (equal roots, or a consistency proof)",
    PROOFS: "each entry is in its block's entry tree and the block is in the checkpoint's log",
    LOSSES: "losses within the ceilings, never down, and each value's receipts chain without gaps",
}


# ------------------------------------------------------------------------------------------------ decoding

def _version(data: bytes, markers: dict[int, bytes], sizes: dict[int, int]) -> int:
    """The version whose marker ``data`` starts with and whose size it has; ``ValueError`` saying why not."""
    version = next((v for v, marker in markers.items() if data.startswith(marker)), None)
    if version is None:
        if len(data) not in sizes.values():
            raise ValueError(f"is {len(data)} bytes, not {' or '.join(str(n) for n in sorted(set(sizes.values())))}")
        raise ValueError(f"does not start with the marker {' or '.join(repr(m) for m in markers.values())}")
    if len(data) != sizes[version]:
        raise ValueError(f"is {len(data)} bytes, not {sizes[version]} (version {version})")
    return version


def decode_entry(data: bytes) -> dict[str, int]:
    """An entry's 16 fields from its data (docs/receipts.md#entry-data), with ``version`` (1, or 2 when the data
    holds the entry's blinding key after the marker); ``ValueError`` if it is not entry data."""
    version = _version(data, ENTRY_MARKERS, ENTRY_DATA_SIZES)
    fields = dict(zip(ENTRY_FIELDS, struct.unpack(f"<{len(ENTRY_FIELDS)}q", data[-8 * len(ENTRY_FIELDS):])))
    fields["version"] = version
    return fields


def decode_block(data: bytes) -> dict[str, Any]:
    """A block leaf's fields (docs/receipts.md#block-leaf-data-135-bytes): ``version`` (of its entries' data, by
    its marker), ``shard``, ``height``, ``block_id``, ``entry_count``, ``created_at`` (microseconds),
    ``block_hash`` and ``entries_root`` (bytes)."""
    version = _version(data, BLOCK_MARKERS, dict.fromkeys(BLOCK_MARKERS, BLOCK_DATA_SIZE))
    at = len(BLOCK_MARKER) + 8 * len(BLOCK_FIELDS)
    fields: dict[str, Any] = dict(zip(BLOCK_FIELDS, struct.unpack(f"<{len(BLOCK_FIELDS)}q",
                                                                  data[len(BLOCK_MARKER):at])))
    fields["block_hash"], fields["entries_root"] = data[at:at + 32], data[at + 32:]
    fields["version"] = version
    return fields


def micro_text(m: int | None) -> str:
    """Micro-epsilons as the API writes them (6 decimals), ``null`` for none (-1)."""
    if m is None or m < 0:
        return "null"
    return f"{m // MICRO}.{m % MICRO:06d}"


def load_public_key(pem: bytes | str | Ed25519PublicKey) -> Ed25519PublicKey:
    """The Ed25519 key of a PEM block (``public_key_pem`` of ``GET /api/v1/ledger/public-key/``); ``ValueError``
    for no PEM key, ``TypeError`` for a key of another algorithm."""
    if isinstance(pem, Ed25519PublicKey):
        return pem
    if isinstance(pem, str):
        pem = pem.encode()
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise TypeError(f"not an Ed25519 key but {type(key).__name__}")
    return key


def key_id(key: Ed25519PublicKey) -> str:
    """SHA-256 (hex) of the raw 32-byte key: what each checkpoint names as ``key_id``."""
    return hashlib.sha256(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).hexdigest()


# ------------------------------------------------------------------------------------------------ the report

@dataclass
class Check:
    """One check of docs/receipts.md#checking-receipts: ``ok`` when it found no ``problems``."""

    name: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self.name]


@dataclass
class Report:
    """What :func:`verify_bundle` found: the checks (each ok or with its problems), what was checked, and notes
    that are no failure (entries pending, more pages)."""

    checks: list[Check]
    receipts: int = 0
    values: int = 0
    pending: int = 0
    tree_size: int | None = None  # the receipts file's checkpoint: every proof is against it
    checkpoint_size: int | None = None  # the checkpoint given (the owner's)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def problems(self) -> list[str]:
        """Every problem as ``"<check>: <problem>"``, in the order of the checks."""
        return [f"{c.name}: {p}" for c in self.checks for p in c.problems]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def summary(self) -> str:
        size = "?" if self.tree_size is None else self.tree_size
        what = (f"{self.receipts} receipt{'s' * (self.receipts != 1)} of {self.values} "
                f"value{'s' * (self.values != 1)}")
        against = f"the checkpoint of tree size {size}"
        if self.checkpoint_size is not None and self.checkpoint_size != self.tree_size:
            link = "consistent with yours of" if self.ok else "yours:"
            against += f" ({link} tree size {self.checkpoint_size})"
        if self.ok:
            return f"verified: {what} against {against}"
        n = len(self.problems)
        return f"NOT verified: {n} problem{'s' * (n != 1)} in {what} against {against}"

    def lines(self) -> list[str]:
        """One line per failure (``FAILED <check>: <problem>``), the notes, then :meth:`summary`."""
        return [f"FAILED {p}" for p in self.problems] + [f"note: {n}" for n in self.notes] + [self.summary()]


class _Bad(ValueError):
    """A field of the input that cannot be read; its message says which and why."""


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int(obj: dict, name: str, minimum: int = 0) -> int:
    x = obj.get(name)
    if not _is_int(x) or x < minimum:
        raise _Bad(f"{name} {x!r} is not an integer >= {minimum}")
    return x


def _hex(x, name: str, size: int | None = None) -> bytes:
    if not isinstance(x, str):
        raise _Bad(f"{name} is not a hex string but {x!r}")
    try:
        raw = bytes.fromhex(x)
    except ValueError:
        raise _Bad(f"{name} is not hex: {x[:40]!r}") from None
    if size is not None and len(raw) != size:
        raise _Bad(f"{name} is {len(raw)} bytes, not {size}")
    return raw


def _proof(x, name: str) -> list[bytes]:
    if not isinstance(x, list):
        raise _Bad(f"{name} is not a list of hex hashes")
    return [_hex(h, f"{name}[{i}]", 32) for i, h in enumerate(x)]


def _time(text) -> datetime | None:
    """An ISO 8601 time with its zone, or None."""
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def _short(h: bytes | str) -> str:
    text = h.hex() if isinstance(h, bytes) else h
    return text[:16] + "..."


# ------------------------------------------------------------------------------------- 1, 2: the checkpoints

def _checkpoint_problems(cp, key: Ed25519PublicKey | None, expected_key_id: str | None) -> list[str]:
    """Check 1 (and 2) of docs/receipts.md#checking-receipts for one checkpoint."""
    if not isinstance(cp, dict):
        return [f"is not a JSON object but {type(cp).__name__}"]
    problems = []
    size, root = cp.get("tree_size"), cp.get("root_hash")
    if not _is_int(size) or size < 1:
        problems.append(f"tree_size {size!r} is not a positive integer")
    if not (isinstance(root, str) and len(root) == 64 and all(c in "0123456789abcdef" for c in root)):
        problems.append(f"root_hash {root!r} is not 64 lower-case hex digits")
    if expected_key_id is not None and cp.get("key_id") != expected_key_id:
        problems.append(f"key_id {cp.get('key_id')!r} is not the SHA-256 of the public key given "
                        f"({expected_key_id}): another key signed it, or it is another service's")
    statement = cp.get("statement")
    if not isinstance(statement, str):
        problems.append("has no statement (the text the signature covers)")
        return problems
    lines = statement.split("\n")
    if len(lines) != 5 or lines[4] != "":
        problems.append(f"the statement {statement!r} is not four lines, each ending with a newline")
    else:
        header, s_size, s_root, s_time, _ = lines
        if header != STATEMENT_HEADER:
            problems.append(f"the statement's first line {header!r} is not {STATEMENT_HEADER!r}")
        if s_size != str(size):
            problems.append(f"the statement says tree size {s_size}, the checkpoint's tree_size is {size!r}")
        if s_root != root:
            problems.append(f"the statement says root {s_root}, the checkpoint's root_hash is {root}")
        signed_at = _time(s_time)
        if signed_at is None:
            problems.append(f"the statement's time {s_time!r} is not an ISO 8601 time with a zone")
        created = cp.get("created_at")
        if created is not None and signed_at is not None and _time(created) != signed_at:
            problems.append(f"created_at {created!r} is not the statement's time {s_time}")
    try:
        signature = _hex(cp.get("signature"), "signature", 64)
    except _Bad as exc:
        problems.append(f"{exc}: no Ed25519 signature")
        return problems
    if key is not None:
        try:
            key.verify(signature, statement.encode("utf-8"))
        except InvalidSignature:
            problems.append("the signature does not verify over the statement with the public key given: the "
                            "statement or the signature was changed, or another key signed it")
    return problems


def _same_log(mine: dict, theirs: dict, consistency) -> list[str]:
    """Check 2's second half: the owner's checkpoint and the file's are of one log."""
    try:
        a, b = _int(mine, "tree_size", 1), _int(theirs, "tree_size", 1)
        ra, rb = _hex(mine.get("root_hash"), "root_hash", 32), _hex(theirs.get("root_hash"), "root_hash", 32)
    except (_Bad, AttributeError) as exc:
        return [f"cannot compare the checkpoints: {exc}"]
    if a == b:
        if ra != rb:
            return [(f"forked log: your checkpoint and the receipts file's both have tree size {a} but "
                     f"different roots ({ra.hex()} and {rb.hex()}): the service signed two different logs")]
        return []
    lo, hi = min(a, b), max(a, b)
    roots = {a: ra, b: rb}
    if consistency is None:
        return [(f"your checkpoint has tree size {a}, the receipts file's {b}: a consistency proof must link "
                 f"them; get it with `ldpmarket-client ledger consistency --first {lo} --second {hi} --out "
                 f"proof.json` (GET /api/v1/ledger/consistency/?first={lo}&second={hi}) and pass --consistency "
                 f"proof.json, or get receipts at your checkpoint with `ldpmarket-client owner receipts "
                 f"--tree-size {a}`")]
    if not isinstance(consistency, dict):
        return [f"the consistency proof is not a JSON object but {type(consistency).__name__}"]
    problems = []
    try:
        first, second = _int(consistency, "first", 1), _int(consistency, "second", 1)
        proof = _proof(consistency.get("proof"), "proof")
    except _Bad as exc:
        return [f"the consistency proof cannot be read: {exc}"]
    if (first, second) != (lo, hi):
        return [(f"the consistency proof is between tree sizes {first} and {second}, not {lo} and {hi}: get "
                 f"the right one with `ldpmarket-client ledger consistency --first {lo} --second {hi}`")]
    for name, size in (("first_root", lo), ("second_root", hi)):
        given = consistency.get(name)
        if given != roots[size].hex():
            problems.append(f"the consistency proof's {name} {given!r} is not the signed root of tree size {size} "
                            f"({roots[size].hex()})")
    if lo < 1 or not verify_consistency(lo, hi, roots[lo], roots[hi], proof):
        problems.append(f"forked log: the consistency proof does not show that the log of tree size {lo} (root "
                        f"{roots[lo].hex()}) is a prefix of the log of tree size {hi} (root {roots[hi].hex()})")
    return problems


# ---------------------------------------------------------------------------------------------- 3: the proofs

def _decimal(x) -> Decimal | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (str, int, float)):
        raise _Bad(f"{x!r} is not a decimal")
    try:
        return Decimal(str(x))
    except InvalidOperation:
        raise _Bad(f"{x!r} is not a decimal") from None


def _micros_time(us: int) -> datetime | None:
    return None if us < 0 else EPOCH + timedelta(microseconds=us)


def _named(code: int, names: Sequence[str], what: str) -> str | None:
    if code == -1:
        return None
    if not 0 <= code < len(names):
        raise _Bad(f"entry_data's {what} code {code} is none this client knows")
    return names[code]


def _entry_problems(entry, fields: dict[str, int], block: dict | None) -> list[str]:
    """Where the ``entry`` shown says anything else than what ``entry_data`` (and ``block_data``) prove."""
    if entry is None:
        return []
    if not isinstance(entry, dict):
        return [f"entry is not a JSON object but {type(entry).__name__}"]
    problems = []
    proven: dict[str, tuple[str, Any]] = {  # key in `entry` -> (kind of comparison, proven value)
        "value": ("int", fields["value"]), "purchase": ("int", fields["purchase"]),
        "epsilon": ("micro", fields["epsilon"]), "ceiling": ("micro", fields["ceiling"]),
        "chain_loss_before": ("micro", fields["chain_before"]), "chain_loss_after": ("micro", fields["chain_after"]),
        "oneshot_loss_before": ("micro", fields["oneshot_before"]),
        "oneshot_loss_after": ("micro", fields["oneshot_after"]),
        "schedule_start": ("micro", fields["schedule_start"]), "schedule_cap": ("micro", fields["schedule_cap"]),
        "schedule_start_at": ("time", fields["schedule_start_at"]),
        "schedule_end_at": ("time", fields["schedule_end_at"]),
        "schedule_steps": ("int", fields["schedule_steps"]),
        "kind": ("name", (fields["kind"], KINDS)), "guarantee": ("name", (fields["guarantee"], GUARANTEES)),
        "schedule_shape": ("name", (fields["schedule_shape"], SHAPES)),
    }
    if block is not None:
        proven["created_at"] = ("time", block["created_at"])
    for key, (how, want) in proven.items():
        if key not in entry:
            continue
        got = entry[key]
        try:
            if how == "int":
                expected = None if want == -1 else want
                same = (got is None or _is_int(got)) and got == expected
                shown = "null" if expected is None else str(expected)
            elif how == "micro":
                shown = micro_text(want)
                same = _decimal(got) == (None if want < 0 else Decimal(want) / MICRO)
            elif how == "time":
                t = _micros_time(want)
                shown = "null" if t is None else t.isoformat()
                same = (got is None and t is None) or (t is not None and _time(got) == t)
            else:
                code, names = want
                name = _named(code, names, key)
                shown = "null" if name is None else repr(name)
                same = got == name or (got in ("", None) and name in ("", None))  # both say "none"
        except _Bad as exc:
            problems.append(f"entry.{key}: {exc}")
            continue
        if not same:
            problems.append(f"entry.{key} says {got!r}, but entry_data proves {shown}"
                            if key != "created_at" else
                            f"entry.created_at says {got!r}, but block_data proves the block's time {shown}")
    return problems


@dataclass
class _Proven:
    """What the loss checks need of one receipt whose entry_data decodes."""

    index: int
    label: str
    fields: dict[str, int]
    block_index: int | None
    entry_index: int | None


def _receipt(i: int, r, checkpoint_tree: tuple[int, bytes] | None) -> tuple[list[str], _Proven | None]:
    """Check 3 for receipt ``i``: its problems, and its decoded entry for check 4."""
    if not isinstance(r, dict):
        return [f"receipts[{i}] is not a JSON object"], None
    entry = r.get("entry")
    shown_id = entry.get("id") if isinstance(entry, dict) else None
    problems: list[str] = []
    fields = block = None
    try:
        fields = decode_entry(_hex(r.get("entry_data"), "entry_data"))
    except (_Bad, ValueError) as exc:
        problems.append(f"entry_data {exc}" if not isinstance(exc, _Bad) else str(exc))
    try:
        block = decode_block(_hex(r.get("block_data"), "block_data"))
    except (_Bad, ValueError) as exc:
        problems.append(f"block_data {exc}" if not isinstance(exc, _Bad) else str(exc))
    value = fields["value"] if fields else (entry.get("value") if isinstance(entry, dict) else None)
    label = f"receipts[{i}] (entry {shown_id if shown_id is not None else '?'}, value {value})"

    if fields is not None:
        problems += _entry_problems(entry, fields, block)
    positions: dict[str, int | None] = {}
    for name, minimum in (("entry_index", 0), ("block_size", 1), ("block_index", 0)):
        try:
            positions[name] = _int(r, name, minimum)
        except _Bad as exc:
            positions[name] = None
            problems.append(str(exc))
    entry_index, block_size, block_index = (positions["entry_index"], positions["block_size"],
                                            positions["block_index"])

    if fields is not None and block is not None and entry_index is not None and block_size is not None:
        if block["entry_count"] != block_size:
            problems.append(f"block_size {block_size} is not the entry count {block['entry_count']} that block_data "
                            f"proves for block {block['block_id']}")
        if fields["version"] != block["version"]:
            problems.append(f"entry_data is a version-{fields['version']} entry, but block_data proves that the "
                            f"entries of block {block['block_id']} are version {block['version']}")
        try:
            proof = _proof(r.get("entry_proof"), "entry_proof")
        except _Bad as exc:
            problems.append(str(exc))
        else:
            data = bytes.fromhex(r["entry_data"])
            if entry_index >= block_size:
                problems.append(f"entry_index {entry_index} is outside a block of {block_size} entries")
            elif not verify_inclusion(entry_index, block_size, leaf_hash(data), proof, block["entries_root"]):
                problems.append(f"entry_data is not leaf {entry_index} of the entry tree of {block_size} leaves "
                                f"whose root block_data states ({_short(block['entries_root'])}): the entry, its "
                                f"position or entry_proof was changed")
    if block is not None and block_index is not None and checkpoint_tree is not None:
        size, root = checkpoint_tree
        try:
            proof = _proof(r.get("block_proof"), "block_proof")
        except _Bad as exc:
            problems.append(str(exc))
        else:
            data = bytes.fromhex(r["block_data"])
            if block_index >= size:
                problems.append(f"block_index {block_index} is outside the checkpoint's log of {size} leaves")
            elif not verify_inclusion(block_index, size, leaf_hash(data), proof, root):
                problems.append(f"block_data (block {block['block_id']}) is not leaf {block_index} of the "
                                f"checkpoint's log of {size} leaves (root {_short(root)}): the block, its "
                                f"block_index or block_proof was changed")
    proven = None if fields is None else _Proven(i, label, fields, block_index, entry_index)
    return [f"{label}: {p}" for p in problems], proven


# ---------------------------------------------------------------------------------------------- 4: the losses

def _loss_text(f: dict[str, int], when: str) -> str:
    return f"chain {micro_text(f[f'chain_{when}'])}, one-shot {micro_text(f[f'oneshot_{when}'])}"


def _losses(proven: list[_Proven]) -> list[str]:
    """Check 4 of docs/receipts.md#checking-receipts: within the ceiling, never down, and a chain per value."""
    problems = []
    for p in proven:
        f = p.fields
        after = f["chain_after"] + f["oneshot_after"]
        if after > f["ceiling"]:
            problems.append(f"{p.label}: the loss after, {micro_text(after)} (chain {micro_text(f['chain_after'])} "
                            f"+ one-shot {micro_text(f['oneshot_after'])}), is above the ceiling "
                            f"{micro_text(f['ceiling'])}")
        if f["chain_after"] < f["chain_before"]:
            problems.append(f"{p.label}: the chain loss goes down, from {micro_text(f['chain_before'])} to "
                            f"{micro_text(f['chain_after'])}")
        if f["oneshot_after"] < f["oneshot_before"]:
            problems.append(f"{p.label}: the one-shot loss goes down, from {micro_text(f['oneshot_before'])} to "
                            f"{micro_text(f['oneshot_after'])}")
    by_value: dict[int, list[_Proven]] = {}
    for p in proven:
        if p.block_index is not None and p.entry_index is not None:
            by_value.setdefault(p.fields["value"], []).append(p)
    for value, history in by_value.items():
        history.sort(key=lambda p: (p.block_index, p.entry_index))
        previous = None
        for p in history:
            f = p.fields
            where = f"block_index {p.block_index}, entry_index {p.entry_index}"
            if previous is None:
                if f["chain_before"] != 0 or f["oneshot_before"] != 0:
                    problems.append(f"{p.label}: value {value}'s first receipt ({where}) starts from a loss "
                                    f"({_loss_text(f, 'before')}), not from none: the value's earlier entries are "
                                    f"missing from the file")
            elif (previous.block_index, previous.entry_index) == (p.block_index, p.entry_index):
                problems.append(f"{p.label}: the same ledger entry ({where}) as receipts[{previous.index}]")
            elif (f["chain_before"], f["oneshot_before"]) != (previous.fields["chain_after"],
                                                               previous.fields["oneshot_after"]):
                problems.append(f"{p.label}: a gap in value {value}'s history: this entry ({where}) starts from "
                                f"{_loss_text(f, 'before')}, but the one before it, receipts[{previous.index}], "
                                f"ends at {_loss_text(previous.fields, 'after')}: an entry is missing from the file")
            previous = p
    return problems


# ---------------------------------------------------------------------------------------------- all of them

def verify_bundle(bundle: dict, checkpoint: dict, public_key_pem: bytes | str | Ed25519PublicKey,
                  consistency: dict | None = None) -> Report:
    """Check a receipts file (``bundle``, the JSON of ``GET /api/v1/owner/receipts/``) against the ``checkpoint``
    you kept (one item of ``GET /api/v1/ledger/checkpoints/``), the service's public key (PEM) and, when the two
    checkpoints differ in size, the ``consistency`` proof between them (``GET /api/v1/ledger/consistency/``), as
    docs/receipts.md#checking-receipts says.  Never raises for a bad input: every problem is in the report."""
    checks = {name: Check(name) for name in (FILE, CHECKPOINT, FILE_CHECKPOINT, SAME_LOG, PROOFS, LOSSES)}
    report = Report(checks=list(checks.values()))

    key = expected_key_id = None
    try:
        key = load_public_key(public_key_pem)
        expected_key_id = key_id(key)
    except (ValueError, TypeError) as exc:
        checks[CHECKPOINT].problems.append(f"the public key given is {exc}")

    if not isinstance(bundle, dict):
        checks[FILE].problems.append(f"the receipts file is not a JSON object but {type(bundle).__name__}")
        bundle = {}
    elif bundle.get("format") != FORMAT:
        checks[FILE].problems.append(f"format is {bundle.get('format')!r}, not {FORMAT!r}")
    file_checkpoint = bundle.get("checkpoint")
    receipts = bundle.get("receipts")
    if not isinstance(receipts, list):
        checks[FILE].problems.append("receipts is not a list")
        receipts = []
    pending = bundle.get("pending") or []
    report.pending = len(pending) if isinstance(pending, list) else 0
    if report.pending:
        report.notes.append(f"{report.pending} entr{'ies' if report.pending != 1 else 'y'} pending: written after "
                            f"the checkpoint, they get receipts at the next one")
    if bundle.get("next"):
        report.notes.append(f"the file continues at {bundle['next']}: the values on further pages are not checked")

    checks[CHECKPOINT].problems += [f"your checkpoint: {p}" for p in _checkpoint_problems(checkpoint, key,
                                                                                         expected_key_id)]
    checks[FILE_CHECKPOINT].problems += [f"the receipts file's checkpoint: {p}"
                                         for p in _checkpoint_problems(file_checkpoint, key, expected_key_id)]
    if isinstance(checkpoint, dict) and _is_int(checkpoint.get("tree_size")):
        report.checkpoint_size = checkpoint["tree_size"]
    tree = None
    if isinstance(file_checkpoint, dict):
        if _is_int(file_checkpoint.get("tree_size")):
            report.tree_size = file_checkpoint["tree_size"]
        try:
            tree = (_int(file_checkpoint, "tree_size", 1), _hex(file_checkpoint.get("root_hash"), "root_hash", 32))
        except _Bad:
            tree = None  # reported by the file's checkpoint check; no block can be proven against it
    if isinstance(checkpoint, dict) and isinstance(file_checkpoint, dict):
        checks[SAME_LOG].problems += _same_log(checkpoint, file_checkpoint, consistency)
    else:
        checks[SAME_LOG].problems.append("cannot compare the checkpoints: one of them is not a JSON object")

    proven = []
    for i, r in enumerate(receipts):
        problems, p = _receipt(i, r, tree)
        checks[PROOFS].problems += problems
        if p is not None:
            proven.append(p)
    checks[LOSSES].problems += _losses(proven)
    report.receipts = len(receipts)
    report.values = len({p.fields["value"] for p in proven})
    return report
