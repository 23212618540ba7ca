"""A monitor that cosigns meaning (docs/receipts.md#the-monitor): ``ldpmarket-client monitor``.

A witness checks that a log only grows.  The monitor also checks **what the log says**: for every checkpoint it
follows the tiled log (``/log/``, c2sp.org/tlog-tiles) from the last size it checked, verifies the new tree is
consistent with the old one, and for each new block leaf it

1. fetches the block's entries through the auditors' API (``/api/v1/audit/blocks/<id>/entries/``: an auditor's
   token), recomputes the block's **entries root** (RFC 6962, over ``SHA-256(0x00 || entry data)``) and compares it
   and the entry count with what the block leaf states;
2. replays the budget rules of docs/budget-rules.md on every entry, in log order:

   - the loss after, chain after + one-shot after, is at most the ceiling in force after the entry;
   - losses never go down; a chain release sets ``chain after = max(chain before, epsilon)``, a one-shot release
     ``one-shot after = one-shot before + epsilon``, and any other entry leaves both losses as they were;
   - each value's entries chain with no gap: an entry's losses before are the losses after the value's previous
     entry (zero before its first).

Only when every rule holds does it advance its state and cosign the checkpoint (C2SP tlog-cosignature, type 0x04,
under its own key, whose name should say what it checked, e.g. ``auditor.example/ldpmarket-budget-rules``); otherwise
it stops at the **first violation**, names it (the block, the entry, the rule) and keeps it.  Its state (the size
and root it checked, each value's losses) is a SQLite file, so it resumes where it stopped.

``Monitor.vet`` lets the monitor serve as a witness of the log's policy (``ldpmarket-client monitor serve``): the
log submits each checkpoint to it as to any witness, and it cosigns only after the checks above.
"""
from __future__ import annotations

import base64
import sqlite3
import time
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from .receipts import KINDS, decode_block, decode_entry, micro_text
from .tlog import merkle
from .tlog.checkpoint import Checkpoint, parse_checkpoint
from .tlog.note import NoteError, Signer, Verifier, open_note
from .tlog.tiles import FetchError, TileError, TileReader, TileTree
from .witness import WitnessError

SCHEMA = """
CREATE TABLE IF NOT EXISTS monitored (origin TEXT PRIMARY KEY, size INTEGER NOT NULL, root BLOB NOT NULL,
                                      note BLOB NOT NULL, checked_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS losses (origin TEXT NOT NULL, value INTEGER NOT NULL, chain INTEGER NOT NULL,
                                   oneshot INTEGER NOT NULL, entry INTEGER NOT NULL, PRIMARY KEY (origin, value));
CREATE TABLE IF NOT EXISTS violations (id INTEGER PRIMARY KEY, origin TEXT NOT NULL, size INTEGER NOT NULL,
                                       found_at INTEGER NOT NULL, what TEXT NOT NULL);
"""
#: Entries asked for per page of the auditors' API.
PAGE = 10_000
CHAIN_RELEASE, ONESHOT_RELEASE = KINDS.index("chain_release"), KINDS.index("oneshot_release")
#: An entry's id is its block's id * ID_SHIFT + its position in the block.
ID_SHIFT = 2 ** 24


class Violation(Exception):
    """The first thing the monitor found wrong: the checkpoint is not cosigned."""


@dataclass
class Outcome:
    """What one check did: ``cosigned`` (the checkpoint note with the monitor's cosignature), or ``violation``, or
    ``unavailable`` (the log or its API did not answer: nothing is recorded, the check is tried again later);
    ``checked``: how many entries were replayed, ``blocks``: how many block leaves were checked."""

    size: int
    cosigned: bytes | None = None
    violation: str | None = None
    checked: int = 0
    blocks: int = 0
    unavailable: str | None = None


class Replay:
    """The budget rules over entries in log order (module docstring), with each value's losses so far."""

    def __init__(self, losses: dict[int, tuple[int, int, int]]):
        self.losses = dict(losses)  # value -> (chain after, one-shot after, entry id of its latest entry)
        self.touched: set[int] = set()  # the values whose losses this replay changed (the state to write back)

    def check(self, entry_id: int, f: dict[str, int]) -> str | None:
        """The rule entry ``entry_id`` (fields ``f``, micro-epsilons) breaks, or ``None``; ``None`` also records it."""
        value = f["value"]
        cb, ca, ob, oa, ceiling, eps = (f["chain_before"], f["chain_after"], f["oneshot_before"], f["oneshot_after"],
                                        f["ceiling"], f["epsilon"])
        where = f"entry {entry_id} (value {value}, {KINDS[f['kind']] if 0 <= f['kind'] < len(KINDS) else f['kind']})"
        if min(cb, ca, ob, oa) < 0 or ceiling < 0:
            return f"{where}: a loss or the ceiling is missing"
        if ca + oa > ceiling:
            return (f"{where}: the loss after, {micro_text(ca + oa)} (chain {micro_text(ca)} + one-shot "
                    f"{micro_text(oa)}), is above the ceiling {micro_text(ceiling)}")
        if ca < cb or oa < ob:
            return f"{where}: a loss goes down (chain {micro_text(cb)} -> {micro_text(ca)}, one-shot " \
                   f"{micro_text(ob)} -> {micro_text(oa)})"
        if f["kind"] == CHAIN_RELEASE:
            if eps < 0 or ca != max(cb, eps) or oa != ob:
                return (f"{where}: a chain release at {micro_text(eps)} must set the chain loss to "
                        f"max({micro_text(cb)}, {micro_text(eps)}) and keep the one-shot loss; it records chain "
                        f"{micro_text(ca)}, one-shot {micro_text(ob)} -> {micro_text(oa)}")
        elif f["kind"] == ONESHOT_RELEASE:
            if eps < 0 or oa != ob + eps or ca != cb:
                return (f"{where}: a one-shot release of {micro_text(eps)} must add it to the one-shot loss "
                        f"({micro_text(ob)}) and keep the chain loss; it records one-shot {micro_text(oa)}, chain "
                        f"{micro_text(cb)} -> {micro_text(ca)}")
        elif (ca, oa) != (cb, ob):
            return f"{where}: a budget event changes the losses"
        previous = self.losses.get(value)
        before = (previous[0], previous[1]) if previous else (0, 0)
        if (cb, ob) != before:
            last = f"entry {previous[2]}" if previous else "no entry (the value's first)"
            return (f"{where}: a gap in the value's history: it starts from chain {micro_text(cb)} + one-shot "
                    f"{micro_text(ob)}, but {last} left chain {micro_text(before[0])} + one-shot "
                    f"{micro_text(before[1])}")
        self.losses[value] = (ca, oa, entry_id)
        self.touched.add(value)
        return None


class Monitor:
    """Follows the log at ``service_url`` (its ``/log/`` and the auditors' API with ``token``) for the origin of the
    log keys ``logs``, and cosigns with ``signer`` (type 0x04) what passes (module docstring).  ``session``: a
    ``requests.Session`` (or anything with its ``get``)."""

    def __init__(self, service_url: str, token: str, logs: Iterable[Verifier], signer: Signer, db: str | Path, *,
                 session=None, clock: Callable[[], float] = time.time, timeout: float = 60):
        if session is None:
            import requests

            session = requests.Session()
        self.logs = list(logs)
        origins = {v.name for v in self.logs}
        if len(origins) != 1:
            raise ValueError("the monitor follows one log: give its keys (one origin)")
        self.origin = origins.pop()
        self.base = service_url.rstrip("/")
        self.session, self.timeout, self.clock = session, timeout, clock
        self.headers = {"Authorization": f"Token {token}"}
        self.reader = TileReader(self.base + "/log/", self.origin, self.logs, session=session, timeout=timeout)
        self.signer = signer
        self.db = str(db)
        with closing(self._connect()) as conn:
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db, timeout=30, isolation_level=None)

    # ------------------------------------------------------------------------------------------------ state

    def state(self) -> tuple[int, bytes, bytes | None]:
        """The size and root checked so far, and the note the monitor cosigned last (``(0, b"", None)`` at first)."""
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT size, root, note FROM monitored WHERE origin = ?", (self.origin,)).fetchone()
        return (row[0], row[1], row[2]) if row else (0, b"", None)

    def violations(self) -> list[tuple[int, str]]:
        with closing(self._connect()) as conn:
            return conn.execute("SELECT size, what FROM violations WHERE origin = ? ORDER BY id",
                                (self.origin,)).fetchall()

    def _losses(self, conn) -> dict[int, tuple[int, int, int]]:
        rows = conn.execute("SELECT value, chain, oneshot, entry FROM losses WHERE origin = ?", (self.origin,))
        return {value: (chain, oneshot, entry) for value, chain, oneshot, entry in rows}

    # ------------------------------------------------------------------------------------------------ checks

    def follow(self) -> Outcome:
        """Fetch the log's latest checkpoint and check it (``check``)."""
        try:
            data = self.reader.get("checkpoint")
        except FetchError as exc:
            return Outcome(self.state()[0], unavailable=str(exc))
        note = open_note(data, self.logs)
        return self.check(parse_checkpoint(note.text), note.text + b"\n" +
                          "".join(sig.line for _, _, sig in note.verified).encode())

    def vet(self, checkpoint: Checkpoint) -> str | None:
        """For serving as a witness: ``None`` if ``checkpoint`` passes every check (the monitor's state then
        includes it), else the first violation.  A checkpoint older than the tree already checked (a late
        submission: the log signed it before the one checked) passes if it is a prefix of that tree, changing
        nothing (the witness then answers 409 for its stale old size); one that is not is a fork."""
        size, root, _ = self.state()
        if checkpoint.origin == self.origin and checkpoint.size < size:
            try:
                self.reader.verify_consistency(TileTree(size, self.reader._tile, root), checkpoint.size,
                                               checkpoint.root)
            except FetchError as exc:
                raise WitnessError(503, f"the log did not serve what the check needs: {exc}") from None
            except TileError as exc:
                violation = f"a fork: the checkpoint of size {checkpoint.size} is not a prefix of the tree of size " \
                            f"{size} already checked: {exc}"
                self._record_violation(checkpoint.size, violation)
                return violation
            return None
        outcome = self.check(checkpoint, None)
        if outcome.unavailable:
            raise WitnessError(503, f"the log did not serve what the check needs: {outcome.unavailable}")
        return outcome.violation

    def check(self, checkpoint: Checkpoint, signed: bytes | None) -> Outcome:
        """Check the log from the size checked so far to ``checkpoint`` (module docstring); on success advance and,
        when ``signed`` (the log-signed note) is given, return it cosigned."""
        size, root, _ = self.state()
        outcome = Outcome(checkpoint.size)
        try:
            if checkpoint.origin != self.origin:
                raise Violation(f"the checkpoint is of {checkpoint.origin!r}, not of {self.origin!r}")
            if checkpoint.size < size:
                raise Violation(f"the log shrank: it shows {checkpoint.size} leaves after {size} were checked")
            if checkpoint.size == size and checkpoint.root != root and size:
                raise Violation(f"a fork: another root at the size {size} already checked")
            tree = TileTree(checkpoint.size, self.reader._tile, checkpoint.root)
            try:
                self.reader.verify_consistency(tree, size, root)
            except TileError as exc:
                raise Violation(f"not consistent with the tree of size {size} already checked: {exc}") from None
            with closing(self._connect()) as conn:
                replay = Replay(self._losses(conn))
            leaves = self.reader.entries(tree, size, checkpoint.size) if checkpoint.size > size else []
            for offset, leaf in enumerate(leaves):
                checked = self._check_leaf(size + offset, leaf, replay)
                outcome.checked += checked
                outcome.blocks += checked is not None
        except FetchError as exc:  # the log or its API did not answer: not evidence, nothing cosigned, retried
            outcome.unavailable = str(exc)
            return outcome
        except (Violation, TileError, NoteError) as exc:
            outcome.violation = str(exc)
            self._record_violation(checkpoint.size, outcome.violation)
            return outcome
        now = max(int(self.clock()), 1)
        if signed is not None:
            outcome.cosigned = signed + self.signer.signature_line(checkpoint.text, now).encode()
        self._advance(checkpoint, replay, outcome.cosigned or b"", now)
        return outcome

    def _check_leaf(self, index: int, data: bytes, replay: Replay) -> int | None:
        """Check one leaf of the log: a block leaf's entries (how many); a shard-head leaf (written before receipts)
        carries no entries (``None``)."""
        try:
            block = decode_block(data)
        except ValueError:
            return None  # a shard-head leaf: the later block leaves cover its blocks' entries
        entries, start, hashes = 0, 0, []
        while True:
            page = self._page(block["block_id"], start)
            if page["version"] != block["version"]:
                raise Violation(f"block {block['block_id']} (leaf {index}): the auditors' API gives its entries in "
                                f"version {page['version']}, the log states version {block['version']}")
            for entry in page["entries"]:
                raw = _b64(entry["data"])
                try:
                    fields = decode_entry(raw)
                except ValueError as exc:
                    raise Violation(f"block {block['block_id']}, entry {entry['id']}: {exc}") from None
                if fields["version"] != block["version"] or entry["id"] != block["block_id"] * ID_SHIFT + entries:
                    raise Violation(f"block {block['block_id']} (leaf {index}): entry {entry['id']} is not entry "
                                    f"{entries} of the block in the block's leaf version")
                hashes.append(merkle.leaf_hash(raw))
                why = replay.check(entry["id"], fields)
                if why:
                    raise Violation(f"block {block['block_id']} (leaf {index}), {why}")
                entries += 1
            if page["next"] is None:
                break
            start = page["next"]
        if entries != block["entry_count"]:
            raise Violation(f"block {block['block_id']} (leaf {index}): the log states {block['entry_count']} entries, "
                            f"the auditors' API gives {entries}")
        if merkle.root(hashes) != block["entries_root"]:
            raise Violation(f"block {block['block_id']} (leaf {index}): its entries do not give the entries root the "
                            f"log states ({block['entries_root'].hex()[:16]}...): an entry was changed after the "
                            f"checkpoint, or the API shows other entries than the log")
        return entries

    def _page(self, block_id: int, start: int) -> dict:
        url = f"{self.base}/api/v1/audit/blocks/{block_id}/entries/"
        try:
            response = self.session.get(url, params={"start": start, "limit": PAGE}, headers=self.headers,
                                        timeout=self.timeout)
        except OSError as exc:
            raise FetchError(f"{url}: no answer ({exc})") from None
        if response.status_code != 200:
            raise FetchError(f"{url}: HTTP {response.status_code} {response.text[:200]}")
        return response.json()

    def _advance(self, checkpoint: Checkpoint, replay: Replay, note: bytes, now: int) -> None:
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT size FROM monitored WHERE origin = ?", (self.origin,)).fetchone()
                if row and row[0] > checkpoint.size:
                    raise Violation("another check advanced past this checkpoint meanwhile")
                conn.execute("INSERT INTO monitored (origin, size, root, note, checked_at) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root, "
                             "note = excluded.note, checked_at = excluded.checked_at",
                             (self.origin, checkpoint.size, checkpoint.root, note, now))
                conn.executemany("INSERT INTO losses (origin, value, chain, oneshot, entry) VALUES (?, ?, ?, ?, ?) "
                                 "ON CONFLICT (origin, value) DO UPDATE SET chain = excluded.chain, "
                                 "oneshot = excluded.oneshot, entry = excluded.entry",
                                 [(self.origin, v, *replay.losses[v]) for v in sorted(replay.touched)])
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _record_violation(self, size: int, what: str) -> None:
        with closing(self._connect()) as conn:
            conn.execute("INSERT INTO violations (origin, size, found_at, what) VALUES (?, ?, ?, ?)",
                         (self.origin, size, int(self.clock()), what))


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)
