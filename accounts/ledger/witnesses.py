"""Witnesses of the ledger's checkpoints (docs/receipts.md#witnesses): the policy, and submitting checkpoints.

``LDP_WITNESS_POLICY`` names a C2SP tlog-policy file.  Its ``witness <name> <vkey> <url>`` lines with a URL are the
witnesses this log submits its checkpoints to; its ``quorum`` is the rule verifiers apply.  After each checkpoint
(on commit) a task per witness (``witness_submit``) sends ``POST <url>/add-checkpoint`` as c2sp.org/tlog-witness
says: ``old <size>``, the RFC 6962 consistency proof from that size, a blank line and the checkpoint's note.

- 200: the answer's cosignature lines (type 0x04) are verified with the witness's key, stored
  (``LedgerCosignature``) and appended to the served checkpoint (``accounts.ledger.notes.served_note``).
- 409: the witness holds another size (its body, ``text/x.tlog.size``): the proof is rebuilt from that size and
  the checkpoint sent again (at most ``RESENDS`` times).  A size above the log's latest checkpoint cannot be
  proved consistent: it is recorded (a witness that saw a larger tree: a fork, or a restored backup).
- 403, 404, 422, any other answer, a timeout or a refused connection: recorded on the witness (``last_status``,
  ``last_error``; shown in the admin and the audit) and retried after ``LDP_WITNESS_RETRY_BASE_SECONDS *
  2^(failures - 1)``, at most ``LDP_WITNESS_RETRY_MAX_SECONDS`` (``due_witness_ids``, beat).

The network call is made outside any transaction, and nothing waits for it: a witness that is down never blocks
a purchase or a checkpoint.  Recording the answer is one short transaction on the witness's row.
"""
from __future__ import annotations

import base64
import logging
from datetime import datetime, timedelta
from pathlib import Path

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from accounts.ledger import signing, tiles
from accounts.ledger.notes import latest_checkpoint, latest_size, note_of
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import LedgerCheckpoint, LedgerCosignature, LedgerWitness
from ldpmarket import jobs
from ldpmarket_client.tlog.note import NoteError, open_note, parse_note, parse_vkey
from ldpmarket_client.tlog.policy import Member, Policy, format_policy, parse_policy
from ldpmarket_client.tlog.tiles import TileError, TileTree

log = logging.getLogger(__name__)

#: How many times one submission follows a 409 to the size the witness names.
RESENDS = 3
#: The content type of a 409's body (c2sp.org/tlog-witness).
SIZE_TYPE = "text/x.tlog.size"

_policy_cache: dict[tuple[str, float], Policy] = {}


def policy() -> Policy | None:
    """The parsed ``LDP_WITNESS_POLICY`` file (``None`` when the setting is empty), read again when it changes."""
    path = settings.LDP_WITNESS_POLICY
    if not path:
        return None
    try:
        stamp = (path, Path(path).stat().st_mtime)
        if stamp not in _policy_cache:
            _policy_cache.clear()
            _policy_cache[stamp] = parse_policy(Path(path).read_bytes())
    except OSError as exc:
        raise ImproperlyConfigured(f"LDP_WITNESS_POLICY: cannot read {path} ({exc.strerror}); "
                                   "docs/receipts.md#witnesses") from None
    except NoteError as exc:
        raise ImproperlyConfigured(f"LDP_WITNESS_POLICY {path}: {exc} (c2sp.org/tlog-policy; "
                                   "docs/receipts.md#witnesses)") from None
    return _policy_cache[stamp]


def published_policy() -> str:
    """The policy verifiers should use: a ``log`` line per key of the ring (the keys that sign new checkpoints) and
    the witnesses, groups and quorum of ``LDP_WITNESS_POLICY``, or ``quorum none`` without it."""
    current = policy() or Policy()
    logs = [Member(s.verifier.name, s.verifier) for s in signing.note_signers()]
    return format_policy(Policy(logs=logs, witnesses=current.witnesses, groups=current.groups,
                                quorum=current.quorum))


def sync_witnesses() -> list[int]:
    """Make a ``LedgerWitness`` row for each witness of the policy that has a URL (name and URL follow the file);
    the ids of the policy's witnesses, in name order."""
    current = policy()
    if current is None:
        return []
    ids = []
    for name, member in sorted(current.witnesses.items()):
        if not member.url:
            continue
        witness, created = LedgerWitness.objects.get_or_create(vkey=member.verifier.vkey,
                                                               defaults={"name": name, "url": member.url})
        if not created and (witness.name, witness.url) != (name, member.url):
            LedgerWitness.objects.filter(pk=witness.pk).update(name=name, url=member.url)
        ids.append(witness.pk)
    return ids


def submit_on_commit() -> None:
    """Once the current transaction (a checkpoint's) commits, submit the latest checkpoint to every witness."""
    for witness_id in sync_witnesses():
        jobs.enqueue(jobs.SUBMIT_CHECKPOINT, witness_id)


def due_witness_ids(now: datetime | None = None) -> list[int]:
    """The witnesses of the policy that have not cosigned the latest checkpoint and may be tried now."""
    now = now or timezone.now()
    checkpoint = latest_checkpoint()
    ids = sync_witnesses()
    if checkpoint is None or not ids:
        return []
    cosigned = LedgerCosignature.objects.filter(checkpoint=checkpoint, witness=OuterRef("pk"))
    return list(LedgerWitness.objects.filter(pk__in=ids).filter(~Exists(cosigned))
                .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
                .order_by("name").values_list("pk", flat=True))


def log_tree(checkpoint: LedgerCheckpoint) -> TileTree:
    """The checkpoint's tree read from the tiled log (``accounts.ledger.tiles``: full tiles stored once, partial ones
    from them), its root checked against the checkpoint's: a consistency proof from it reads O(log n) tiles, not
    every leaf of the log (benchmarks/e7_witnesses.py measured 3.7 s per submission at 10^5 leaves that way)."""
    return TileTree(checkpoint.tree_size, tiles.tile, bytes.fromhex(checkpoint.root_hash))


def add_checkpoint_body(old_size: int, checkpoint: LedgerCheckpoint, tree: TileTree | None = None) -> bytes:
    """The body of ``POST <url>/add-checkpoint``: ``old <size>``, the RFC 6962 consistency proof from it (base64
    hashes, from ``tree``, default ``log_tree(checkpoint)``), a blank line and the checkpoint's signed note."""
    proof: list[bytes] = []
    if 0 < old_size < checkpoint.tree_size:
        proof = (tree or log_tree(checkpoint)).consistency_proof(old_size)
    lines = [f"old {old_size}"] + [base64.b64encode(h).decode() for h in proof]
    return ("\n".join(lines) + "\n\n" + note_of(checkpoint)).encode()


def witness_submit(*, witness_id: int, now: datetime | None = None, force: bool = False) -> str:
    """Submit the latest checkpoint to one witness and record its answer (module docstring); what happened, in a
    word: ``cosigned``, ``already``, ``waiting``, ``nothing``, ``superseded`` (the witness holds a checkpoint of the
    log newer than the one this call read) or ``failed``.  Idempotent: a witness that cosigned the latest checkpoint
    is not asked again; one in its retry backoff is not asked before its time unless ``force``."""
    now = now or timezone.now()
    witness = LedgerWitness.objects.get(pk=witness_id)
    checkpoint = latest_checkpoint()
    if checkpoint is None:
        return "nothing"
    if LedgerCosignature.objects.filter(checkpoint=checkpoint, witness=witness).exists():
        return "already"
    if not force and witness.next_attempt_at is not None and witness.next_attempt_at > now:
        return "waiting"
    verifier = parse_vkey(witness.vkey)
    old, tree = witness.size, None
    for _ in range(RESENDS + 1):
        if old > checkpoint.tree_size:
            if latest_size() >= old:  # a checkpoint made since this one was read covers it: its own task submits it
                return "superseded"
            return _failed(witness, 409, f"the witness holds tree size {old}, larger than the log's latest checkpoint "
                                         f"({checkpoint.tree_size}): it saw another tree, or this database was "
                                         "restored from an older backup (docs/operations.md)", now)
        if 0 < old < checkpoint.tree_size and tree is None:
            try:
                tree = log_tree(checkpoint)
            except TileError as exc:
                return _failed(witness, None, f"the log's own tiles do not give this checkpoint: {exc} "
                                              "(run audit_budgets)", now)
        body = add_checkpoint_body(old, checkpoint, tree)
        try:
            answer = requests.post(witness.url.rstrip("/") + "/add-checkpoint", data=body,
                                   timeout=settings.LDP_WITNESS_TIMEOUT_SECONDS,
                                   headers={"Content-Type": "text/plain; charset=utf-8"})
        except requests.RequestException as exc:
            return _failed(witness, None, f"no answer: {type(exc).__name__}: {exc}", now)
        if answer.status_code == 409:
            size = _size_of(answer)
            if size is None:
                return _failed(witness, 409, f"a 409 without a size ({answer.text[:200]!r})", now)
            _record_size(witness, size)
            old = size
            continue
        if answer.status_code != 200:
            return _failed(witness, answer.status_code, answer.text[:500].strip() or answer.reason, now)
        return _cosigned(witness, verifier, checkpoint, answer.content, now)
    return _failed(witness, 409, f"the witness's size kept changing ({RESENDS} resends)", now)


def _size_of(answer: requests.Response) -> int | None:
    text = answer.text.strip()
    if not answer.headers.get("Content-Type", "").startswith(SIZE_TYPE) or not text.isdigit():
        return None
    return int(text)


def _record_size(witness: LedgerWitness, size: int) -> None:
    with transaction.atomic():
        take_lock(Lock.WITNESS)
        LedgerWitness.objects.select_for_update().filter(pk=witness.pk).update(size=size)
    witness.size = size


def _cosigned(witness: LedgerWitness, verifier, checkpoint: LedgerCheckpoint, body: bytes, now: datetime) -> str:
    """Check the 200's cosignature lines against the witness's key and store the one of its key."""
    text = parse_note(note_of(checkpoint).encode()).text
    try:
        note = open_note(text + b"\n" + body, [verifier])
    except NoteError as exc:
        return _failed(witness, 200, f"the answer's cosignature does not verify with the witness's key: {exc}", now)
    _, timestamp, signature = note.verified[0]
    line = signature.line.rstrip("\n")
    with transaction.atomic():
        take_lock(Lock.WITNESS)
        row = LedgerWitness.objects.select_for_update().get(pk=witness.pk)
        try:
            with transaction.atomic():
                LedgerCosignature.objects.create(checkpoint=checkpoint, witness=row, timestamp=timestamp, line=line,
                                                 received_at=now)
        except IntegrityError:  # a concurrent submission stored it first
            pass
        row.size = max(row.size, checkpoint.tree_size)
        row.last_status, row.last_error, row.failures = 200, "", 0
        row.last_attempt_at, row.next_attempt_at = now, None
        row.save(update_fields=["size", "last_status", "last_error", "failures", "last_attempt_at",
                                "next_attempt_at"])
    return "cosigned"


def retry_delay(failures: int) -> timedelta:
    """``base * 2^(failures - 1)`` seconds, at most the cap."""
    base, cap = settings.LDP_WITNESS_RETRY_BASE_SECONDS, settings.LDP_WITNESS_RETRY_MAX_SECONDS
    return timedelta(seconds=min(cap, base * 2 ** min(max(failures - 1, 0), 30)))


def _failed(witness: LedgerWitness, status: int | None, error: str, now: datetime) -> str:
    log.warning("witness %s (%s) refused or missed the checkpoint: %s %s", witness.name, witness.url, status, error)
    with transaction.atomic():
        take_lock(Lock.WITNESS)
        row = LedgerWitness.objects.select_for_update().get(pk=witness.pk)
        row.failures += 1
        row.last_status, row.last_error = status, error
        row.last_attempt_at, row.next_attempt_at = now, now + retry_delay(row.failures)
        row.save(update_fields=["failures", "last_status", "last_error", "last_attempt_at", "next_attempt_at"])
    return "failed"
