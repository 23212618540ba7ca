"""A restored database proves itself (docs/operations.md#restore-drill): what ``manage.py verify_restore`` checks.

:func:`verify_restore` runs the budget audit (``audit.budget_audit``: every shard's hash chain, every block's
entries root and chunk roots, the checkpoint log and every checkpoint's root, signatures, notes and cosignatures,
the budget replay, the budgets, purchases and money) and adds what only a restore needs, in its section
*Restore*:

1. **The latest checkpoint the restore holds** is signed by a *trusted* log key, states its own size and root
   under the log's origin, and its root is the root of the restored log's first ``tree_size`` leaves.  The audit
   checks every checkpoint against the key history stored in the database; a restore cannot vouch for itself that
   way (a forged backup can carry a forged history), so this check uses trust anchors kept apart from the backup:
   the log keys given on the command line (``--policy``, ``--log-key``), or else the keys this process signs with
   (``LDP_LEDGER_SIGNING_KEYS`` from the environment, which docs/operations.md#backups keeps apart from the dumps).
   Once that checkpoint verifies, the audit's own checks (every leaf, every block and every entry recomputed and
   consistent with it) authenticate the whole restored log up to it.
2. **Every block the checkpoint log covers is in the restored chains**, as the log saw it: a restore whose last
   blocks are missing names them, shard by shard (block ids and heights).
3. **Each kept checkpoint** (``--checkpoint FILE``: a C2SP signed note as ``/log/checkpoint`` or a witness's
   ``GET <prefix>/<origin hash>/checkpoint`` serves it, with cosignatures, or the JSON of ``ldpmarket-client ledger
   checkpoint``, whose ``note`` it reads) is signed by a trusted log key (and, with ``--policy``, cosigned by the
   policy's quorum of witnesses), and **the restored log contains it**: the root of the restored log's first
   ``size`` leaves is the kept root.  A kept checkpoint larger than the restored log is followed past it with the
   blocks the restore holds that no checkpoint covers yet, leafed as the next checkpoint would leaf them
   (``accounts.ledger.leaves.block_tree``): if they give the kept root, nothing the kept checkpoint covers is lost
   (the next checkpoint signs them again); otherwise the restore is older than the kept checkpoint and the report
   says which leaves it lacks and when the kept checkpoint was made or cosigned.  The same size with another root
   is a fork, or an altered restore.

Everything is read in one snapshot (``audit.sql.snapshot``); nothing is written.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from accounts.ledger import hashchain as ledger
from accounts.ledger import merkle, notes, signing
from accounts.ledger.leaves import LEAF_VERSION, block_leaf, block_tree, log_leaf_hashes
from accounts.models import LedgerCheckpoint, LedgerLogKey, LedgerWitness
from ldpmarket.problems import RestoreInputError
from ldpmarket_client.tlog.checkpoint import Checkpoint, parse_checkpoint
from ldpmarket_client.tlog.note import (
    COSIGNATURE_V1,
    ED25519,
    NoteError,
    Verifier,
    open_note,
    parse_note,
    parse_vkey,
)
from ldpmarket_client.tlog.policy import Policy, parse_policy

from . import sql
from .budget_audit import audit_budgets
from .report import AuditReport, Check, Recorder
from .tables import read_blocks, read_checkpoints

S = "Restore"


# ------------------------------------------------------------------------------------------------ the inputs

@dataclass
class Trust:
    """The log keys the restore checks trust, and in words where they come from."""

    logs: list[Verifier]
    source: str
    policy: Policy | None = None


def trust_anchors(*, policy_text: bytes | None = None, policy_name: str = "", log_keys: list[str] = ()) -> Trust:
    """The trusted log keys: the ``log`` lines of a tlog-policy and the ``--log-key`` vkeys given, or, when none is
    given, the keys of this process's signing ring (``LDP_LEDGER_SIGNING_KEYS``: from the environment, not from the
    restored database)."""
    policy = None
    logs: list[Verifier] = []
    if policy_text is not None:
        try:
            policy = parse_policy(policy_text)
        except NoteError as exc:
            raise RestoreInputError(f"the policy {policy_name} cannot be read: {exc}") from None
        if not policy.logs:
            raise RestoreInputError(f"the policy {policy_name} names no log key (a 'log <vkey>' line)")
        logs += [m.verifier for m in policy.logs]
    for text in log_keys:
        try:
            verifier = parse_vkey(text)
        except NoteError as exc:
            raise RestoreInputError(f"--log-key {text!r} is not a verifier key: {exc}") from None
        if verifier.sig_type != ED25519:
            raise RestoreInputError(f"--log-key {text!r} is a key of type 0x{verifier.sig_type:02x}: a log key is "
                                    f"of type 0x01 (Ed25519)")
        if verifier not in logs:
            logs.append(verifier)
    if logs:
        given = [f"--policy {policy_name}"] if policy is not None else []
        given += ["--log-key"] if log_keys else []
        return Trust(logs, f"given with {' and '.join(given)}, kept apart from the backup", policy)
    return Trust([s.verifier for s in signing.note_signers()],
                 "this process's signing keys (LDP_LEDGER_SIGNING_KEYS in its environment, not the restored "
                 "database's key history); give --policy or --log-key for an anchor kept apart from this machine")


@dataclass
class Kept:
    """A checkpoint kept outside the database, as read from its file (its signatures not yet checked)."""

    name: str
    note: bytes
    checkpoint: Checkpoint
    made_at: str | None = None  # the JSON's created_at, when it came as JSON


def kept_checkpoint(data: bytes, name: str) -> Kept:
    """Read a kept checkpoint: a C2SP signed note (with any cosignatures), or the JSON of ``ldpmarket-client ledger
    checkpoint`` (one item of ``GET /api/v1/ledger/checkpoints/``), whose ``note`` is the signed note."""
    made_at, item = None, None
    if data.lstrip()[:1] == b"{":
        try:
            item = json.loads(data)
        except ValueError as exc:
            raise RestoreInputError(f"the checkpoint {name} is not JSON: {exc}") from None
        note = item.get("note") if isinstance(item, dict) else None
        if not isinstance(note, str) or not note:
            raise RestoreInputError(f"the checkpoint {name} holds no signed note (its 'note' field): keep the note "
                                    f"of /log/checkpoint or of `ldpmarket-client ledger checkpoint`")
        data, made_at = note.encode(), item.get("created_at")
    try:
        checkpoint = parse_checkpoint(parse_note(data).text)
    except NoteError as exc:
        raise RestoreInputError(f"the checkpoint {name} is not a signed checkpoint note: {exc}") from None
    if item is not None:
        item_size, item_root = item.get("tree_size"), item.get("root_hash")
        if (item_size is not None and item_size != checkpoint.size) or (item_root is not None
                                                                        and item_root != checkpoint.root.hex()):
            raise RestoreInputError(f"the checkpoint {name}: its note states tree size {checkpoint.size} and another "
                                    f"root than its tree_size {item_size} and root_hash")
    return Kept(name, data, checkpoint, made_at if isinstance(made_at, str) else None)


# ------------------------------------------------------------------------------------------------ the report

@dataclass
class RestoreReport:
    trust: Trust
    log: dict
    kept: list[dict]
    checks: list[Check]
    audit: AuditReport
    seconds: float = 0.0
    pending: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and self.audit.ok

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok] + self.audit.failed

    def as_dict(self) -> dict:
        return {"ok": self.ok, "seconds": round(self.seconds, 3),
                "trust": {"source": self.trust.source, "log_keys": [v.vkey for v in self.trust.logs],
                          "quorum": self.trust.policy.describe_quorum() if self.trust.policy else None},
                "log": self.log, "kept": self.kept,
                "checks": [{"section": c.section, "name": c.name, "status": c.status, "checked": c.checked,
                            "failures": c.failures, "examples": c.examples} for c in self.checks],
                "audit": self.audit.as_dict()}

    def as_text(self) -> str:
        log = self.log
        latest = (f"tree size {log['latest_size']}, made {log['latest_at']}" if log["latest_size"] is not None
                  else "none")
        lines = ["Restore verification (docs/operations.md#restore-drill)",
                 f"  trusted log keys: {', '.join(_short(v) for v in self.trust.logs)} -- {self.trust.source}"]
        if self.trust.policy is not None:
            lines.append(f"  witness quorum for kept checkpoints: {self.trust.policy.describe_quorum()}")
        lines += [f"  restored log: {log['leaves']} leaves, {log['blocks']} blocks in {log['shards']} shards; latest "
                  f"checkpoint: {latest}; blocks no checkpoint covers yet: {log['uncovered_blocks']}",
                  f"  key history in the restored database: {', '.join(log['key_history']) or 'none'}"]
        for k in self.kept:
            lines.append(f"  kept checkpoint {k['name']}: tree size {k['tree_size']} of {k['origin']}"
                         + (f", {k['when']}" if k["when"] else ""))
        lines.append("")
        status = "PASS" if all(c.ok for c in self.checks) else "FAIL"
        lines.append(f"[{status}] {S}")
        for c in self.checks:
            if c.ok:
                lines.append(f"    PASS  {c.name} ({c.checked} checked)")
            else:
                lines.append(f"    FAIL  {c.name}: {c.failures} of {c.checked} violate it")
                lines += [f"            - {x}" for x in c.examples]
        lines += [f"    note: {p}" for p in self.pending]
        lines += ["", self.audit.as_text(), ""]
        failed = self.failed
        lines.append(f"RESTORE: {'PASS' if not failed else 'FAIL'} -- {len(failed)} check(s) fail "
                     f"(restore checks and budget audit; {self.seconds:.2f} s)")
        return "\n".join(lines)


def _short(v: Verifier) -> str:
    return f"{v.name}+{v.key_id:08x}"


def _vkey_text(vkey: str) -> str:
    try:
        return _short(parse_vkey(vkey))
    except NoteError:
        return f"{vkey[:40]!r} (not a verifier key)"


# ------------------------------------------------------------------------------------------------ the checks

def verify_restore(*, trust: Trust, kept: list[Kept] = (), examples: int = 5, anchor: str | None = None
                   ) -> RestoreReport:
    """The restore checks and the budget audit (module doc), in one snapshot; never writes anything."""
    started = time.perf_counter()
    rec = Recorder(examples)
    with sql.snapshot():
        audit = audit_budgets(examples=examples, anchor=anchor)
        blocks, _, hashes = read_blocks()
        checkpoints, leaves = read_checkpoints()
        leaf_hashes = log_leaf_hashes()
        history = list(LedgerLogKey.objects.order_by("first_size", "id").values_list("vkey", flat=True))
        witness_keys = _witness_keys(trust)
        latest = LedgerCheckpoint.objects.order_by("-tree_size").first()
        _check_latest(rec, trust, latest, leaf_hashes)
        _check_covered(rec, blocks, hashes, leaves)
        chain = _Continuation(blocks, hashes, leaves)
        kept_info, pending = [], []
        for k in kept:
            info, note = _check_kept(rec, trust, witness_keys, k, leaf_hashes, checkpoints, latest, chain)
            kept_info.append(info)
            pending += [note] if note else []
    log = {"leaves": len(leaf_hashes), "blocks": int(blocks["id"].size),
           "shards": len({int(s) for s in blocks["shard"]}),
           "latest_size": latest.tree_size if latest else None,
           "latest_at": latest.created_at.isoformat() if latest else None,
           "uncovered_blocks": chain.uncovered_count, "key_history": [_vkey_text(v) for v in history]}
    return RestoreReport(trust, log, kept_info, rec.checks, audit, time.perf_counter() - started, pending)


def _trusted_note(trust: Trust, note: bytes, size: int, root_hex: str, witnesses=()) -> str | None:
    """Why ``note`` is not this log's checkpoint of ``size`` and ``root_hex`` signed by a trusted log key (``None``
    when it is).  A signature line of a known key that fails rejects the note (c2sp.org/signed-note): with
    ``witnesses``, a forged cosignature of one of them too."""
    try:
        opened = open_note(note, list(trust.logs) + list(witnesses))
    except NoteError as exc:
        return f"its signed note does not verify with a trusted log key ({exc})"
    if not any(v in trust.logs for v, _, _ in opened.verified):
        return "its signed note is not signed by a trusted log key"
    if opened.text != notes.checkpoint_text(size, root_hex):
        return (f"its signed note states another origin, size or root than {signing.origin()!r}, {size}, "
                f"{root_hex[:16]}...")
    return None


def _check_latest(rec: Recorder, trust: Trust, latest: LedgerCheckpoint | None, leaf_hashes: list[bytes]) -> None:
    """The latest checkpoint the restore holds: signed by a trusted key, its root recomputed from the leaves."""
    bad = []
    if latest is not None:
        size, root_hex = latest.tree_size, latest.root_hash
        if latest.note:
            why = _trusted_note(trust, latest.note.encode(), size, root_hex)
        else:  # made before signed notes: its statement signature, by a trusted key
            keys = [Ed25519PublicKey.from_public_bytes(v.public) for v in trust.logs]
            statement = signing.statement(size, root_hex, latest.created_at)
            why = (None if any(signing.verify(statement, latest.signature, key) for key in keys) else
                   "it has no signed note and its statement signature does not verify with a trusted log key")
        if why:
            bad.append(f"checkpoint {latest.id} (tree size {size}, made {latest.created_at.isoformat()}): {why}")
        if size > len(leaf_hashes):
            bad.append(f"checkpoint {latest.id} covers {size} leaves, the restored log holds {len(leaf_hashes)}")
        elif merkle.root(leaf_hashes[:size]).hex() != root_hex:
            bad.append(f"checkpoint {latest.id} (tree size {size}): the restored log's first {size} leaves give "
                       f"another root than its {root_hex[:16]}...")
    rec.fail(S, "the latest checkpoint the restored database holds is signed by a trusted log key and its root "
                "recomputes from the restored log's leaves", 1 if latest is not None else 0, bad)


def _check_covered(rec: Recorder, blocks, hashes, leaves) -> None:
    """Every block a leaf of the checkpoint log names is in the restored chain of its shard, at its height, with its
    hash: what is missing is named per shard."""
    chains: dict[int, list[tuple[int, str]]] = {}
    for k in range(blocks["id"].size):
        chains.setdefault(int(blocks["shard"][k]), []).append((int(blocks["id"][k]), hashes[k]))
    missing: dict[int, list[tuple]] = {}
    covered = 0
    for index, cid, shard, height, head, block_id, *_ in leaves:
        if block_id is None:
            continue
        covered += 1
        chain = chains.get(shard, [])
        if not (0 < height <= len(chain) and chain[height - 1] == (block_id, head)):
            missing.setdefault(shard, []).append((height, block_id, index, cid))
    messages = []
    for shard, lost in sorted(missing.items()):
        lost.sort()
        heights = _span("height", "heights", lost[0][0], lost[-1][0])
        indexes = _span("leaf", "leaves", lost[0][2], lost[-1][2])
        held = len(chains.get(shard, []))
        messages.append(f"shard {shard}: {_ids([b for _, b, _, _ in lost])} ({heights} of its chain, {indexes} of the "
                        f"checkpoint log) missing from the restored database or not as the log saw them; the "
                        f"restored chain holds {held} block(s)")
    rec.checks.append(Check(S, "every block the checkpoint log covers is in the restored database, in its shard's "
                               "chain at its height with its hash (no lost tail)", covered,
                            sum(len(lost) for lost in missing.values()), messages[:rec.examples]))


class _Continuation:
    """The leaves the next checkpoint would append for the blocks of the restore no leaf names yet (block id order,
    as ``accounts.ledger.checkpoints`` appends them; a shard stops at a block whose entries do not give its hash),
    computed the first time a kept checkpoint needs them."""

    def __init__(self, blocks, hashes, leaves):
        named = {leaf[5] for leaf in leaves if leaf[5] is not None}
        heights: dict[int, int] = {}
        self.todo = []
        prev_of: dict[int, str] = {}
        for k in range(blocks["id"].size):
            shard, block_id = int(blocks["shard"][k]), int(blocks["id"][k])
            heights[shard] = heights.get(shard, 0) + 1
            if block_id not in named:
                self.todo.append((block_id, shard, heights[shard], prev_of.get(shard, ledger.GENESIS), hashes[k],
                                  int(blocks["count"][k]), int(blocks["created_at"][k])))
            prev_of[shard] = hashes[k]
        self.uncovered_count = len(self.todo)
        self._next = 0  # the next block of ``todo`` to leaf
        self._broken: set[int] = set()
        self._hashes: list[bytes] = []
        self.ids: list[int] = []

    def leaf_hashes(self, upto: int) -> list[bytes]:
        """The first ``upto`` continuation leaves' hashes (fewer when the restore holds fewer blocks)."""
        while len(self._hashes) < upto and self._next < len(self.todo):
            block_id, shard, height, prev_hash, head, count, created_us = self.todo[self._next]
            self._next += 1
            if shard in self._broken:
                continue
            try:
                rehashed, root, _ = block_tree(block_id, shard, prev_hash, ledger._dt(created_us), count,
                                               version=LEAF_VERSION)
            except LookupError:  # an entry of the block is missing: the audit names it
                rehashed = None
            if rehashed != head:
                self._broken.add(shard)
                continue
            data = block_leaf(shard, height, block_id, count, created_us, head, root.hex(), LEAF_VERSION)
            self._hashes.append(merkle.leaf_hash(data))
            self.ids.append(block_id)
        return self._hashes[:upto]


def _witness_keys(trust: Trust) -> dict[Verifier, str]:
    """Witness keys whose cosignatures date a kept checkpoint: the policy's, else those the restored database
    names (only to say when it was cosigned: with a policy, only its witnesses count towards its quorum)."""
    if trust.policy is not None:
        return {m.verifier: name for name, m in trust.policy.witnesses.items()}
    found = {}
    for name, vkey in LedgerWitness.objects.values_list("name", "vkey"):
        try:
            verifier = parse_vkey(vkey)
        except NoteError:
            continue
        if verifier.sig_type == COSIGNATURE_V1:
            found[verifier] = name
    return found


def _when(kept: Kept, witness_keys: dict[Verifier, str]) -> tuple[str, list[str]]:
    """When the kept checkpoint was made or cosigned, in words, and the witnesses whose cosignatures verify."""
    words, witnessed = [], []
    if kept.made_at:
        words.append(f"made {kept.made_at}")
    try:
        opened = open_note(kept.note, list(witness_keys))
    except NoteError:
        opened = None
    for verifier, timestamp, _ in (opened.verified if opened else []):
        name = witness_keys[verifier]
        witnessed.append(name)
        words.append(f"cosigned by {name} at {datetime.fromtimestamp(timestamp, timezone.utc).isoformat()}")
    return "; ".join(words), witnessed


def _check_kept(rec: Recorder, trust: Trust, witness_keys: dict[Verifier, str], kept: Kept,
                leaf_hashes: list[bytes], checkpoints, latest: LedgerCheckpoint | None,
                chain: _Continuation) -> tuple[dict, str | None]:
    """The kept checkpoint's two checks: its signatures, and the restored log containing it.  Answers what the
    report says of it, and a note when the restore holds its last leaves only as blocks not yet checkpointed."""
    cp = kept.checkpoint
    size, root_hex = cp.size, cp.root.hex()
    when, witnessed = _when(kept, witness_keys)
    info = {"name": kept.name, "tree_size": size, "root_hash": root_hex, "origin": cp.origin, "when": when,
            "witnessed": witnessed}
    what = f"the kept checkpoint {kept.name} (tree size {size}{', ' + when if when else ''})"

    # Its signatures: a trusted log key over this log's checkpoint text, and the policy's quorum of witnesses.
    bad = []
    if cp.origin != signing.origin():
        bad.append(f"{what} is of the log {cp.origin!r}, not of this log {signing.origin()!r}")
    elif why := _trusted_note(trust, kept.note, size, root_hex, witness_keys if trust.policy else ()):
        bad.append(f"{what}: {why} ({trust.source})")
    elif trust.policy is not None and not trust.policy.satisfied(set(witnessed)):
        bad.append(f"{what}: cosigned by {len(witnessed)} of {len(trust.policy.witnesses)} witnesses of the policy "
                   f"({', '.join(witnessed) or 'none'}); the quorum is {trust.policy.describe_quorum()}")
    rec.fail(S, f"the kept checkpoint {kept.name} is signed by a trusted log key"
                + (f" and cosigned by the policy's quorum ({trust.policy.describe_quorum()})" if trust.policy else ""),
             1, bad)

    # The restored log contains it.
    held, bad, pending = len(leaf_hashes), [], None
    if size <= held:
        got = merkle.root(leaf_hashes[:size]).hex()
        if got != root_hex:
            same = next((c for c in checkpoints if c[2] == size), None)
            bad.append(f"{what}: the restored log's first {size} leaves give root {got[:16]}..., the kept checkpoint "
                       f"states {root_hex[:16]}...: the restore is not the log the kept checkpoint signed (a fork, or "
                       f"an altered restore)"
                       + (f"; the restored database holds checkpoint {same[0]} of the same tree size with root "
                          f"{same[3][:16]}...: two signed roots of one size are a fork" if same else ""))
    else:
        more = chain.leaf_hashes(size - held)
        if len(more) == size - held and merkle.root(leaf_hashes + more).hex() == root_hex:
            pending = (f"{kept.name}: the restored database holds its {_span('leaf', 'leaves', held, size - 1)} as "
                       f"{_ids(chain.ids[:size - held])}, which no checkpoint it holds covers yet; with them the "
                       f"restored log gives the kept root, and `manage.py ledger_checkpoint` signs them again")
        else:
            latest_words = (f"its latest checkpoint, made {latest.created_at.isoformat()}, covers {latest.tree_size}"
                            if latest else "it holds no checkpoint")
            if chain.uncovered_count == 0:
                tail = "and it holds no block beyond them"
            elif len(more) < size - held:
                tail = (f"and the {len(more)} block(s) it holds beyond them ({_ids(chain.ids[:len(more)])}) are "
                        f"fewer than the leaves it lacks: at least {size - held - len(more)} block(s) the kept "
                        f"checkpoint covers are not in the restore")
            else:
                tail = (f"and the blocks it holds beyond them ({_ids(chain.ids[:size - held])}) do not give the kept "
                        f"root: they are not the blocks the kept checkpoint covers")
            lacks = _span("leaf", "leaves", held, size - 1)
            bad.append(f"the restore is older than {what}: the restored log holds {held} leaves ({latest_words}); "
                       f"it lacks {lacks} ({size - held} block(s) checkpointed by the time of the kept checkpoint), "
                       f"{tail}")
    rec.fail(S, f"the restored log contains the kept checkpoint {kept.name}: the root of its first {size} leaves is "
                f"the kept root", 1, bad)
    return info, pending


def _span(one: str, many: str, first: int, last: int) -> str:
    """``leaf 3`` or ``leaves 3..5``."""
    return f"{one} {first}" if first == last else f"{many} {first}..{last}"


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:8]) + (", ..." if len(ids) > 8 else "")
    return f"block{'s' if len(ids) != 1 else ''} {shown}" if ids else "no block"

