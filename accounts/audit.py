"""The budget audit: every rule of docs/budget-rules.md#budgets-and-ceilings, re-proved from the ledger (docs/budget-rules.md#the-audit).

:func:`audit_budgets` reads each table once (one query per table: the ledger
entries and blocks, budgets, values, purchases, money accounts and entries) into
numpy columns of exact integers -- micro-epsilons, money in ten-thousandths,
timestamps in microseconds -- and checks, with no Python loop per entry:

**Hash chain** (tamper evidence): every block's hash recomputed with
``accounts.ledger.block_hash`` from its entries as stored, the blocks linked by
``prev_hash`` in id order from the genesis hash, entry counts, the head row
pointing at the last block, every entry's ``created_at`` equal to its block's
(the hash covers the block's time, not each entry's), and optionally a block
hash recorded earlier (``anchor``) still present -- which also catches a
rewrite that recomputed every hash after it.  Edits, deletions, insertions and
reorderings of entries or blocks all change a recomputed hash or a link.

**Budget replay**: per value, its entries in ledger order, starting from a
ceiling or schedule event with zero loss; each entry's before-losses equal the
previous entry's after-losses; a chain release sets ``chain = max(chain, e)``, a
one-shot release adds ``e``, other events change no loss; the ceiling in force
at each entry is recomputed from the ledger's own policy events (a fixed
ceiling, or the schedule evaluated with ``accounts.schedule`` at the entry's
time), and every loss after an entry, and every recorded ceiling, is within it;
under a schedule the recorded ceiling never falls; the final losses, policy,
pause flag and raw-deletion state equal the ``BudgetAccount`` and ``Value`` rows.

**Purchases**: each completed purchase has exactly ``included`` release
entries, at the purchase's epsilon, for values of its attribute, one per value;
other purchases have none.  One-shot purchases and surveys
(docs/budget-rules.md#one-shot-losses-add-up): their releases are ``oneshot_release`` entries (chain purchases'
are ``chain_release``) at the purchase's ``charged_epsilon``; every release's
guarantee, and the purchase's, is the one its mechanism gives (``uldp`` for
uRR/uRAP, ``per_report_non_collusion`` for improved Christofides, ``ldp`` for
the others, none or ``ldp`` for chains); surveys store no outputs at all (the
buyer gets only the aggregate).  And per value, ``oneshot_loss`` equals the sum
of its one-shot releases' epsilons.

**Money**: every account's balance equals the sum of its entries and its last
``balance_after`` (each entry's ``balance_after`` is the running sum); per
purchase the buyer's debit equals the price and equals the owners' shares plus
the platform fee; only owners whose values were released are paid; earnings
and fees never appear without a purchase.  Each top-up is one credit of its
buyer's account by its amount, each payout request one debit of its owner's
earnings by its amount (and, if rejected, one credit back); every top-up and
payout movement belongs to its record, purchases' movements (kinds purchase,
fee, earning) name their purchase and no other movement does; and money is
neither created nor lost: all balances add up to what came in (top-ups and
other deposits) less what was paid out (docs/money.md).

The same module holds the empirical privacy audit (:func:`privacy_audit`,
docs/mechanisms-reference.md#privacy-audit-by-inference), the overview figures of the admin console,
and the ledger's CSV export.
"""
from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from . import ledger
from .epsilon import MICRO, from_micro
from .models import (BudgetAccount, LedgerBlock, LedgerEntry, LedgerHead, MoneyAccount, MoneyEntry, PayoutRequest,
                     TopUp)
from .schedule import ceilings_micro

KINDS = list(LedgerEntry.Kind.values)
K_CHAIN, K_ONESHOT, K_CEILING, K_SCHEDULE, K_PAUSE, K_RESUME, K_RAW = (KINDS.index(k) for k in (
    "chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted"))
SHAPES = ledger.SHAPES  # "", "linear", "steps"
MONEY_UNITS = 10_000
ACCOUNT_KINDS = list(MoneyAccount.Kind.values)  # buyer_credit, owner_earnings, platform
A_BUYER, A_OWNER, A_PLATFORM = (ACCOUNT_KINDS.index(k) for k in ("buyer_credit", "owner_earnings", "platform"))
MONEY_KINDS = list(MoneyEntry.Kind.values)  # topup, purchase, earning, payout, fee, adjustment
M_TOPUP, M_PURCHASE, M_EARNING, M_PAYOUT, M_FEE, M_ADJUST = (MONEY_KINDS.index(k) for k in (
    "topup", "purchase", "earning", "payout", "fee", "adjustment"))
PAYOUT_STATUSES = list(PayoutRequest.Status.values)  # requested, settled, rejected
P_REJECTED = PAYOUT_STATUSES.index("rejected")
STATUSES = ["pending", "running", "completed", "failed"]
S_COMPLETED = STATUSES.index("completed")
GUARANTEES = ledger.GUARANTEES  # "", "ldp", "uldp", "per_report_non_collusion"
G_NONE, G_LDP, G_ULDP, G_PER_REPORT = range(4)
MECHANISMS = ["gradual_rr", "urr", "urap", "rr3", "lpp", "private_sample", "warner", "simmons", "christofides",
              "improved_christofides"]
MECH_GRADUAL = 0
SURVEYS = [MECHANISMS.index(m) for m in ("warner", "simmons", "christofides", "improved_christofides")]
#: The guarantee each mechanism's releases carry (index by mechanism code; chains also allow ldp).
MECHANISM_GUARANTEE = np.array([G_NONE, G_ULDP, G_ULDP, G_LDP, G_LDP, G_LDP, G_LDP, G_LDP, G_LDP, G_PER_REPORT])
SECTIONS = ("Hash chain", "Budget replay", "Budgets and values", "Purchases", "Money")


# =============================================================================================
# Reading tables as exact integer columns (one query per table)
# =============================================================================================

def _pg() -> bool:
    return connection.vendor == "postgresql"


def _int(expr: str) -> str:
    return f"CAST({expr} AS BIGINT)" if _pg() else f"CAST({expr} AS INTEGER)"


def _scaled(col: str, scale: int, null: int | None = -1) -> str:
    """Exact integer ``col * scale`` of a NUMERIC column (PostgreSQL numeric is exact; SQLite stores 6-place reals)."""
    expr = _int(f"ROUND({col} * {scale})")
    return expr if null is None else f"COALESCE({expr}, {null})"


def _micro(col: str, null: int | None = -1) -> str:
    return _scaled(col, MICRO, null)


def _units(col: str) -> str:
    return _scaled(col, MONEY_UNITS, None)


def _ts(col: str) -> str:
    """Microseconds since the epoch of a timestamp column (-1 for NULL)."""
    if _pg():
        return f"COALESCE(CAST(EXTRACT(EPOCH FROM {col}) * 1000000 AS BIGINT), -1)"
    # Django stores UTC datetimes in SQLite as 'YYYY-MM-DD HH:MM:SS[.ffffff]'.
    # The fraction is cut off before strftime, which would round .9995 s and above up to the next second.
    seconds = f"CAST(strftime('%s', substr({col}, 1, 19)) AS INTEGER)"
    micros = f"CAST(CASE WHEN length({col}) > 19 THEN substr({col} || '000000', 21, 6) ELSE '0' END AS INTEGER)"
    return f"COALESCE({seconds} * 1000000 + {micros}, -1)"


def _code(col: str, names: list[str], unknown: int = -2) -> str:
    whens = " ".join(f"WHEN '{n}' THEN {i}" for i, n in enumerate(names))
    return _int(f"CASE {col} {whens} ELSE {unknown} END")


def _flag(cond: str) -> str:
    return _int(f"CASE WHEN {cond} THEN 1 ELSE 0 END")


def _fetch(select: list[str], table: str, order: str = "id") -> np.ndarray:
    """``SELECT select FROM table ORDER BY order`` as an (n, len(select)) int64 array; every expression is an integer.

    PostgreSQL: one binary ``COPY ... TO STDOUT`` parsed by numpy; elsewhere one fetch.
    """
    k = len(select)
    if _pg():
        select = [f"CAST(({x}) AS BIGINT)" for x in select]
    sql = f"SELECT {', '.join(select)} FROM {table} ORDER BY {order}"
    with connection.cursor() as cur:
        if _pg():
            from market.pgcopy import copy_out, parse_rows

            data = copy_out(cur.cursor, sql)
            rows = parse_rows(data, [(f"c{j}", ">i8") for j in range(k)])
            return np.stack([rows[f"c{j}"].astype(np.int64) for j in range(k)], axis=1) if rows.size else \
                np.zeros((0, k), dtype=np.int64)
        cur.execute(sql)
        rows = cur.fetchall()
    return np.array(rows, dtype=np.int64).reshape(len(rows), k)


def _cols(arr: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    return {n: np.ascontiguousarray(arr[:, j]) for j, n in enumerate(names)}


ENTRY_COLUMNS = ["id", "block", "value", "kind", "epsilon", "purchase", "chain_before", "chain_after",
                 "oneshot_before", "oneshot_after", "ceiling", "sched_start", "sched_cap", "sched_start_at",
                 "sched_end_at", "sched_shape", "sched_steps", "created_at", "guarantee"]


def read_entries() -> dict[str, np.ndarray]:
    """The ledger entries as integer columns, in ledger order (block id, then entry id)."""
    select = ["id", "block_id", "value_id", _code("kind", KINDS), _micro("epsilon"), _int("COALESCE(purchase_id, -1)"),
              _micro("chain_loss_before"), _micro("chain_loss_after"), _micro("oneshot_loss_before"),
              _micro("oneshot_loss_after"), _micro("ceiling"), _micro("schedule_start"), _micro("schedule_cap"),
              _ts("schedule_start_at"), _ts("schedule_end_at"), _code("schedule_shape", SHAPES),
              _int("COALESCE(schedule_steps, -1)"), _ts("created_at"), _code("guarantee", GUARANTEES)]
    cols = _cols(_fetch(select, LedgerEntry._meta.db_table, order="block_id, id"), ENTRY_COLUMNS)
    order = np.lexsort((cols["id"], cols["block"]))  # already sorted by the query; cheap insurance
    return {k: v[order] for k, v in cols.items()}


def entry_records(e: dict[str, np.ndarray], sl=slice(None)) -> np.ndarray:
    """The canonical ``ledger.ENTRY`` records of (a slice of) the entries, as ``ledger.stored_records`` builds them."""
    names = ["value", "kind", "epsilon", "purchase", "chain_before", "chain_after", "oneshot_before",
             "oneshot_after", "ceiling", "sched_start", "sched_cap", "sched_start_at", "sched_end_at",
             "sched_shape", "sched_steps", "guarantee"]
    n = e["id"][sl].shape[0]
    rec = np.empty(n, dtype=ledger.ENTRY)
    for field_name, col in zip(ledger.ENTRY.names, names):
        rec[field_name] = e[col][sl]
    return rec


def read_blocks() -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    table = LedgerBlock._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"SELECT id, prev_hash, hash, entry_count, {_ts('created_at')} FROM {table} ORDER BY id")
        rows = cur.fetchall()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    counts = np.array([r[3] for r in rows], dtype=np.int64)
    created = np.array([r[4] for r in rows], dtype=np.int64)
    return {"id": ids, "count": counts, "created_at": created}, [r[1] for r in rows], [r[2] for r in rows]


def read_budgets() -> dict[str, np.ndarray]:
    select = ["value_id", _micro("ceiling"), _micro("chain_loss"), _micro("oneshot_loss"), _flag("paused"),
              _micro("schedule_start"), _micro("schedule_cap"), _ts("schedule_start_at"), _ts("schedule_end_at"),
              _code("schedule_shape", SHAPES), _int("COALESCE(schedule_steps, -1)")]
    names = ["value", "ceiling", "chain", "oneshot", "paused", "sched_start", "sched_cap", "sched_start_at",
             "sched_end_at", "sched_shape", "sched_steps"]
    return _cols(_fetch(select, BudgetAccount._meta.db_table, order="value_id"), names)


def read_values() -> dict[str, np.ndarray]:
    from market.models import Value

    select = ["id", "owner_id", "attribute_id", _flag("raw_deleted_at IS NOT NULL")]
    return _cols(_fetch(select, Value._meta.db_table), ["id", "owner", "attribute", "raw_deleted"])


def read_purchases() -> dict[str, np.ndarray]:
    from market.models import Purchase

    select = ["id", "buyer_id", "attribute_id", _micro("epsilon"), _code("status", STATUSES), "included",
              _units("price"), _code("mechanism", MECHANISMS), _micro("charged_epsilon"),
              _code("guarantee", GUARANTEES)]
    return _cols(_fetch(select, Purchase._meta.db_table),
                 ["id", "buyer", "attribute", "epsilon", "status", "included", "price", "mechanism", "charged",
                  "guarantee"])


def read_chunks() -> dict[str, np.ndarray]:
    """The purchases' output chunks: (purchase id, rows) per chunk."""
    from market.models import PurchaseChunk

    return _cols(_fetch(["purchase_id", "count"], PurchaseChunk._meta.db_table), ["purchase", "count"])


def read_money() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    accounts = _cols(_fetch(["id", _code("kind", ACCOUNT_KINDS), _int("COALESCE(user_id, -1)"), _units("balance")],
                            MoneyAccount._meta.db_table), ["id", "kind", "user", "balance"])
    entries = _cols(_fetch(["id", "account_id", _int("COALESCE(purchase_id, -1)"), _units("amount"),
                            _units("balance_after"), _code("kind", MONEY_KINDS)], MoneyEntry._meta.db_table),
                    ["id", "account", "purchase", "amount", "balance_after", "kind"])
    return accounts, entries


def read_topups_payouts() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    topups = _cols(_fetch(["id", "entry_id", "buyer_id", _units("amount")], TopUp._meta.db_table),
                   ["id", "entry", "buyer", "amount"])
    payouts = _cols(_fetch(["id", "hold_id", _int("COALESCE(release_id, -1)"), "owner_id", _units("amount"),
                            _code("status", PAYOUT_STATUSES)], PayoutRequest._meta.db_table),
                    ["id", "hold", "release", "owner", "amount", "status"])
    return topups, payouts


def _lookup(keys: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``query`` in the sorted ``keys`` and whether each was found."""
    if keys.size == 0:
        return np.zeros(query.shape, dtype=np.int64), np.zeros(query.shape, dtype=bool)
    pos = np.clip(np.searchsorted(keys, query), 0, keys.size - 1)
    return pos, keys[pos] == query


# =============================================================================================
# The report
# =============================================================================================

@dataclass
class Check:
    section: str
    name: str
    checked: int
    failures: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failures == 0

    @property
    def status(self) -> str:
        return "PASS" if self.ok else "FAIL"


@dataclass
class AuditReport:
    checks: list[Check]
    stats: dict
    head_hash: str | None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def sections(self) -> list[tuple[str, str, list[Check]]]:
        out = []
        for name in SECTIONS:
            checks = [c for c in self.checks if c.section == name]
            if checks:
                out.append((name, "PASS" if all(c.ok for c in checks) else "FAIL", checks))
        return out

    def as_dict(self) -> dict:
        return {"ok": self.ok, "head_hash": self.head_hash, "seconds": round(self.seconds, 3), "stats": self.stats,
                "checks": [{"section": c.section, "name": c.name, "status": c.status, "checked": c.checked,
                            "failures": c.failures, "examples": c.examples} for c in self.checks]}

    def as_text(self) -> str:
        lines = ["Budget audit (docs/budget-rules.md#budgets-and-ceilings)",
                 "  " + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in self.stats.items()),
                 f"  ledger head: {self.head_hash or '(empty ledger)'}", ""]
        for name, status, checks in self.sections():
            lines.append(f"[{status}] {name}")
            for c in checks:
                if c.ok:
                    lines.append(f"    PASS  {c.name} ({c.checked} checked)")
                else:
                    lines.append(f"    FAIL  {c.name}: {c.failures} of {c.checked} violate it")
                    lines += [f"            - {x}" for x in c.examples]
            lines.append("")
        failed = self.failed
        lines.append(f"RESULT: {'PASS' if not failed else 'FAIL'} -- {len(self.checks) - len(failed)} of "
                     f"{len(self.checks)} checks pass ({self.seconds:.2f} s)")
        return "\n".join(lines)


class _Recorder:
    def __init__(self, examples: int):
        self.examples = examples
        self.checks: list[Check] = []

    def check(self, section: str, name: str, bad: np.ndarray | None, checked: int, describe=None) -> None:
        """Record a check: ``bad`` masks (or indexes) the violating rows; ``describe(i)`` explains one."""
        if bad is None:
            idx = np.zeros(0, dtype=np.int64)
        else:
            bad = np.asarray(bad)
            idx = np.flatnonzero(bad) if bad.dtype == bool else bad.astype(np.int64)
        c = Check(section, name, int(checked), int(idx.size))
        if describe is not None:
            c.examples = [describe(int(i)) for i in idx[:self.examples]]
        self.checks.append(c)

    def fail(self, section: str, name: str, checked: int, messages: list[str]) -> None:
        c = Check(section, name, checked, len(messages), messages[:self.examples])
        self.checks.append(c)


def _eps(v: int) -> str:
    return "null" if v < 0 else str(from_micro(int(v)))


def _money(v: int) -> str:
    """An amount in ten-thousandths, with the currency (docs/money.md)."""
    from decimal import Decimal

    from django.conf import settings

    return f"{(Decimal(int(v)) / MONEY_UNITS).quantize(Decimal('0.0001'))} {settings.LDP_CURRENCY}"


def _status(code: int) -> str:
    return STATUSES[code] if 0 <= code < len(STATUSES) else "?"


def _when(us: int) -> str:
    if us < 0:
        return "null"
    return ledger._dt(int(us)).isoformat()


def _trunc_seconds(delta_us: np.ndarray) -> np.ndarray:
    """Whole seconds of a microsecond difference, truncated toward zero (as ``int(timedelta.total_seconds())``)."""
    return np.where(delta_us >= 0, delta_us // 1_000_000, -((-delta_us) // 1_000_000))


def schedule_ceilings(start, cap, start_at_us, end_at_us, shape, steps, t_us) -> np.ndarray:
    """Vectorized ``accounts.schedule.ceiling_micro`` (micro-epsilons) of schedules at times ``t_us``.

    Malformed schedules (end not after start) evaluate to their start (they are reported separately).
    """
    start, cap = np.asarray(start, np.int64), np.asarray(cap, np.int64)
    d = np.maximum(_trunc_seconds(np.asarray(end_at_us, np.int64) - np.asarray(start_at_us, np.int64)), 1)
    e = _trunc_seconds(np.asarray(t_us, np.int64) - np.asarray(start_at_us, np.int64))
    k = np.where(np.asarray(shape) == SHAPES.index("steps"), np.maximum(np.asarray(steps, np.int64), 1), 0)
    return ceilings_micro(start, cap, np.zeros_like(d), d, k, e)


# =============================================================================================
# The budget audit
# =============================================================================================

@contextlib.contextmanager
def snapshot():
    """Read every table from one consistent snapshot, so purchases committing meanwhile raise no false alarm.

    PostgreSQL: a ``REPEATABLE READ, READ ONLY`` transaction; SQLite: one
    transaction (its first read takes the snapshot).  Inside a caller's
    transaction (tests, another service) the caller's transaction is used as it is.
    """
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if _pg():
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def audit_budgets(*, examples: int = 5, anchor: str | None = None, now: datetime | None = None) -> AuditReport:
    """Re-check every budget, ledger and money invariant (module doc); never writes anything."""
    started = time.perf_counter()
    rec = _Recorder(examples)
    with snapshot():
        now_us = ledger.micros(now or timezone.now())
        e = read_entries()
        blocks, prev_hashes, hashes = read_blocks()
        head = LedgerHead.objects.filter(id=1).values_list("last_block_id", flat=True).first()
        budgets = read_budgets()
        values = read_values()
        purchases = read_purchases()
        chunks = read_chunks()
        accounts, money = read_money()
        topups, payouts = read_topups_payouts()

    _check_hash_chain(rec, e, blocks, prev_hashes, hashes, head, anchor)
    final = _check_replay(rec, e)
    _check_budget_rows(rec, e, final, budgets, values, now_us)
    _check_purchases(rec, e, purchases, values)
    _check_oneshot(rec, e, purchases, budgets, chunks)
    _check_money(rec, e, purchases, values, accounts, money, payouts)
    _check_topups_payouts(rec, accounts, money, topups, payouts)

    stats = {"blocks": int(blocks["id"].size), "ledger_entries": int(e["id"].size),
             "values": int(values["id"].size), "budgets": int(budgets["value"].size),
             "purchases": int(purchases["id"].size), "money_accounts": int(accounts["id"].size),
             "money_entries": int(money["id"].size)}
    return AuditReport(rec.checks, stats, hashes[-1] if hashes else None, time.perf_counter() - started)


# --------------------------------------------------------------------------------------------- hash chain

def _check_hash_chain(rec: _Recorder, e, blocks, prev_hashes, hashes, head_id, anchor) -> None:
    S = "Hash chain"
    n_blocks = blocks["id"].size
    ids, created = blocks["id"], blocks["created_at"]
    # Entries grouped by block (entries are in (block, id) order).
    starts = np.searchsorted(e["block"], ids, side="left")
    ends = np.searchsorted(e["block"], ids, side="right")
    held = ends - starts
    _, in_block = _lookup(ids, e["block"])
    rec.check(S, "every entry belongs to a block", ~in_block, e["id"].size,
              lambda i: f"entry {e['id'][i]} names block {e['block'][i]}, which does not exist")

    linked = np.ones(n_blocks, dtype=bool)
    rehash = np.ones(n_blocks, dtype=bool)
    prev = ledger.GENESIS
    records = entry_records(e)
    for k in range(n_blocks):
        linked[k] = prev_hashes[k] == prev
        rehash[k] = ledger.block_hash(prev_hashes[k], ledger._dt(int(created[k])),
                                      records[starts[k]:ends[k]]) == hashes[k]
        prev = hashes[k]
    rec.check(S, "blocks are linked: each prev_hash is the hash of the block before it (from genesis)", ~linked,
              n_blocks, lambda k: f"block {ids[k]}: prev_hash {prev_hashes[k][:16]}... does not match the block "
                                  f"before it")
    rec.check(S, "entry count of each block matches its entries", held != blocks["count"], n_blocks,
              lambda k: f"block {ids[k]} records {blocks['count'][k]} entries but holds {held[k]}")
    rec.check(S, "each block's hash recomputes from its stored entries", ~rehash, n_blocks,
              lambda k: f"block {ids[k]} (created {_when(created[k])}, {held[k]} entries): recomputed hash differs "
                        f"from {hashes[k][:16]}...")
    head_ok = (head_id is None and n_blocks == 0) or (n_blocks > 0 and head_id == int(ids[-1]))
    rec.check(S, "the ledger head points at the last block", None if head_ok else np.array([0]), 1,
              lambda _: f"head points at block {head_id}, the last block is "
                        f"{int(ids[-1]) if n_blocks else 'none'}")
    pos, found = _lookup(ids, e["block"])
    mismatch = found & (e["created_at"] != created[pos])
    rec.check(S, "each entry's created_at equals its block's (the time the hash covers)", mismatch, e["id"].size,
              lambda i: f"entry {e['id'][i]}: created_at {_when(e['created_at'][i])} but its block {e['block'][i]} "
                        f"was written at {_when(created[pos[i]])}")
    if anchor:
        wanted = anchor.strip().lower()
        present = wanted in set(hashes)
        rec.check(S, "the anchored block hash is still in the chain", None if present else np.array([0]), 1,
                  lambda _: _anchor_not_found(wanted, hashes))


def _anchor_not_found(anchor: str, hashes) -> str:
    """Why an anchor is missing: "not found" first.  A hash within two characters of a block's is a typo of it
    (a rewrite cannot come that close); otherwise it was mistyped, is from another database, or the history up
    to it was rewritten -- the audit cannot tell these apart, so it says all three."""
    near = [h for h in hashes if len(h) == len(anchor) and sum(a != b for a, b in zip(h, anchor)) <= 2]
    if near:
        return (f"anchor {anchor} not found: block hash {near[0]} differs from it in at most two characters "
                f"(mistyped?)")
    return (f"anchor {anchor} not found in the chain: check that it was copied exactly from an earlier report of "
            f"this database; if it was, the history up to it was rewritten")


# --------------------------------------------------------------------------------------------- replay

@dataclass
class _Final:
    value: np.ndarray  # value ids with ledger entries, sorted
    chain: np.ndarray
    oneshot: np.ndarray
    ceiling: np.ndarray  # last recorded ceiling
    policy_kind: np.ndarray  # K_CEILING / K_SCHEDULE, -1 when none
    policy: dict  # schedule fields and ceiling of the last policy event
    paused: np.ndarray
    raw_deleted: np.ndarray


def _check_replay(rec: _Recorder, e) -> _Final:
    S = "Budget replay"
    n = e["id"].size
    vo = np.argsort(e["value"], kind="stable")  # value-major, ledger order within a value
    v = {k: col[vo] for k, col in e.items()}
    pos = np.arange(n)
    new = np.ones(n, dtype=bool)
    if n:
        new[1:] = v["value"][1:] != v["value"][:-1]
    gstart = np.maximum.accumulate(np.where(new, pos, 0)) if n else pos
    kind = v["kind"]
    release = (kind == K_CHAIN) | (kind == K_ONESHOT)
    is_policy = (kind == K_CEILING) | (kind == K_SCHEDULE)
    loss_after = v["chain_after"] + v["oneshot_after"]

    def entry(i: int) -> str:
        k = int(kind[i])
        name = KINDS[k] if 0 <= k < len(KINDS) else f"kind {k}"
        return f"entry {v['id'][i]} (value {v['value'][i]}, {name}, block {v['block'][i]})"

    first_ok = is_policy & (v["chain_before"] == 0) & (v["oneshot_before"] == 0)
    rec.check(S, "each value's ledger starts with a ceiling or schedule event at zero loss", new & ~first_ok,
              int(new.sum()), lambda i: f"{entry(i)} is the value's first entry: chain_loss_before "
                                        f"{_eps(v['chain_before'][i])}, oneshot_loss_before "
                                        f"{_eps(v['oneshot_before'][i])}")
    cont = np.zeros(n, dtype=bool)
    cont[1:] = ~new[1:] & ((v["chain_before"][1:] != v["chain_after"][:-1])
                           | (v["oneshot_before"][1:] != v["oneshot_after"][:-1]))
    rec.check(S, "each entry's before-losses equal the previous entry's after-losses", cont, int((~new).sum()),
              lambda i: f"{entry(i)}: before (chain {_eps(v['chain_before'][i])}, one-shot "
                        f"{_eps(v['oneshot_before'][i])}) but the previous entry left (chain "
                        f"{_eps(v['chain_after'][i - 1])}, one-shot {_eps(v['oneshot_after'][i - 1])})")
    eps = v["epsilon"]
    chain_ok = (kind == K_CHAIN) & (eps > 0) & (v["chain_after"] == np.maximum(v["chain_before"], eps)) \
        & (v["oneshot_after"] == v["oneshot_before"])
    oneshot_ok = (kind == K_ONESHOT) & (eps > 0) & (v["oneshot_after"] == v["oneshot_before"] + eps) \
        & (v["chain_after"] == v["chain_before"])
    rec.check(S, "chain releases set chain_loss = max(chain_loss, epsilon); one-shot releases add epsilon",
              release & ~(chain_ok | oneshot_ok), int(release.sum()),
              lambda i: f"{entry(i)}: epsilon {_eps(eps[i])}, chain {_eps(v['chain_before'][i])} -> "
                        f"{_eps(v['chain_after'][i])}, one-shot {_eps(v['oneshot_before'][i])} -> "
                        f"{_eps(v['oneshot_after'][i])}")
    other_ok = (v["chain_after"] == v["chain_before"]) & (v["oneshot_after"] == v["oneshot_before"]) \
        & (eps == -1) & (v["purchase"] == -1) & (kind >= 0) & (kind < len(KINDS))
    rec.check(S, "budget events (ceiling, schedule, pause, resume, raw deletion) change no loss and sell nothing",
              ~release & ~other_ok, int((~release).sum()),
              lambda i: f"{entry(i)}: epsilon {_eps(eps[i])}, purchase {v['purchase'][i]}, chain "
                        f"{_eps(v['chain_before'][i])} -> {_eps(v['chain_after'][i])}, one-shot "
                        f"{_eps(v['oneshot_before'][i])} -> {_eps(v['oneshot_after'][i])}")

    # The policy in force at each entry: the value's latest ceiling/schedule event at or before it.
    lp = np.maximum.accumulate(np.where(is_policy, pos, -1)) if n else pos
    has = lp >= gstart
    p = np.where(has, lp, pos)
    fixed = has & (kind[p] == K_CEILING)
    sched = has & (kind[p] == K_SCHEDULE)
    in_force = np.where(fixed, v["ceiling"][p], -1)
    if sched.any():
        s = np.flatnonzero(sched)
        in_force[s] = schedule_ceilings(v["sched_start"][p[s]], v["sched_cap"][p[s]], v["sched_start_at"][p[s]],
                                        v["sched_end_at"][p[s]], v["sched_shape"][p[s]], v["sched_steps"][p[s]],
                                        v["created_at"][s])

    def policy(i: int) -> str:
        j = int(p[i])
        if not has[i]:
            return "no ceiling policy"
        if kind[j] == K_CEILING:
            return f"fixed ceiling {_eps(v['ceiling'][j])} (entry {v['id'][j]})"
        return (f"schedule {_eps(v['sched_start'][j])} -> {_eps(v['sched_cap'][j])} from "
                f"{_when(v['sched_start_at'][j])} to {_when(v['sched_end_at'][j])} "
                f"({SHAPES[v['sched_shape'][j]] if 0 <= v['sched_shape'][j] < 3 else '?'}) "
                f"allowing {_eps(in_force[i])} at {_when(v['created_at'][i])} (entry {v['id'][j]})")

    well = np.ones(n, dtype=bool)
    pol_fixed = kind == K_CEILING
    pol_sched = kind == K_SCHEDULE
    no_sched = (v["sched_start"] == -1) & (v["sched_cap"] == -1) & (v["sched_start_at"] == -1) \
        & (v["sched_end_at"] == -1) & (v["sched_shape"] == 0) & (v["sched_steps"] == -1)
    well[pol_fixed] = (no_sched & (v["ceiling"] >= 0) & (v["ceiling"] <= 700 * MICRO))[pol_fixed]
    shape_ok = (((v["sched_shape"] == 1) & (v["sched_steps"] == -1))
                | ((v["sched_shape"] == 2) & (v["sched_steps"] >= 1)))
    sched_ok = (v["sched_start"] >= 0) & (v["sched_cap"] >= v["sched_start"]) & (v["sched_cap"] <= 700 * MICRO) \
        & (v["sched_start_at"] >= 0) & (v["sched_end_at"] - v["sched_start_at"] >= 1_000_000) & shape_ok
    well[pol_sched] = sched_ok[pol_sched]
    rec.check(S, "ceiling and schedule events are well formed", is_policy & ~well, int(is_policy.sum()),
              lambda i: f"{entry(i)}: ceiling {_eps(v['ceiling'][i])}, schedule {_eps(v['sched_start'][i])} -> "
                        f"{_eps(v['sched_cap'][i])}, {_when(v['sched_start_at'][i])} .. "
                        f"{_when(v['sched_end_at'][i])}, shape {v['sched_shape'][i]}, steps {v['sched_steps'][i]}")
    rec.check(S, "a ceiling policy is in force at every entry", ~has, n,
              lambda i: f"{entry(i)} precedes every ceiling or schedule event of its value")
    over = has & (loss_after > in_force)
    rec.check(S, "loss after every entry <= the ceiling in force then (recomputed from the policy events)", over,
              int(has.sum()), lambda i: f"{entry(i)} at {_when(v['created_at'][i])}: loss "
                                        f"{_eps(loss_after[i])} exceeds the {policy(i)}")
    rec_bad = has & ((v["ceiling"] > in_force) | (fixed & (v["ceiling"] != in_force))
                     | (sched & (v["ceiling"] < v["sched_start"][p])))
    rec.check(S, "each recorded ceiling is the one in force (fixed) or within the schedule at that time", rec_bad,
              int(has.sum()), lambda i: f"{entry(i)} records ceiling {_eps(v['ceiling'][i])}; in force: {policy(i)}")
    snapshot = has & ~release & ~is_policy
    same = np.ones(n, dtype=bool)
    for col in ("sched_start", "sched_cap", "sched_start_at", "sched_end_at", "sched_shape", "sched_steps"):
        same &= v[col] == v[col][p]
    rec.check(S, "pause, resume and raw-deletion entries record the policy in force", snapshot & ~same,
              int(snapshot.sum()), lambda i: f"{entry(i)} records a schedule different from the {policy(i)}")
    fall = np.zeros(n, dtype=bool)
    fall[1:] = ~new[1:] & (lp[1:] == lp[:-1]) & sched[1:] & (v["ceiling"][1:] < v["ceiling"][:-1])
    rec.check(S, "under a schedule the ceiling never falls (schedules only raise it)", fall, int(sched.sum()),
              lambda i: f"{entry(i)} records ceiling {_eps(v['ceiling'][i])} after {_eps(v['ceiling'][i - 1])} "
                        f"under the same schedule")

    # Final state per value.
    last = np.flatnonzero(np.append(new[1:], True)) if n else pos
    lpr = np.maximum.accumulate(np.where((kind == K_PAUSE) | (kind == K_RESUME), pos, -1)) if n else pos
    paused = (lpr[last] >= gstart[last]) & (kind[np.maximum(lpr[last], 0)] == K_PAUSE) if n else np.zeros(0, bool)
    raw_values = np.unique(v["value"][kind == K_RAW])
    lastp = p[last]
    return _Final(
        value=v["value"][last], chain=v["chain_after"][last], oneshot=v["oneshot_after"][last],
        ceiling=v["ceiling"][last], policy_kind=np.where(has[last], kind[lastp], -1),
        policy={c: v[c][lastp] for c in ("ceiling", "sched_start", "sched_cap", "sched_start_at", "sched_end_at",
                                          "sched_shape", "sched_steps")},
        paused=paused, raw_deleted=np.isin(v["value"][last], raw_values))


# --------------------------------------------------------------------------------------------- budget rows

def _check_budget_rows(rec: _Recorder, e, f: _Final, b, values, now_us: int) -> None:
    S = "Budgets and values"
    nb = b["value"].size
    pos, found = _lookup(f.value, b["value"])
    rec.check(S, "every budget has ledger entries", ~found, nb,
              lambda i: f"budget of value {b['value'][i]} has no ledger entry")
    _, has_budget = _lookup(b["value"], f.value)
    rec.check(S, "every value in the ledger has a budget row", ~has_budget, f.value.size,
              lambda i: f"value {f.value[i]} has ledger entries but no budget row")
    _, vb = _lookup(b["value"], values["id"])
    rec.check(S, "every value has a budget row", ~vb, values["id"].size,
              lambda i: f"value {values['id'][i]} has no budget row")
    loss = b["chain"] + b["oneshot"]
    rec.check(S, "budget rows: 0 <= loss <= ceiling", (b["chain"] < 0) | (b["oneshot"] < 0) | (loss > b["ceiling"]),
              nb, lambda i: f"value {b['value'][i]}: loss {_eps(loss[i])} (chain {_eps(b['chain'][i])} + one-shot "
                            f"{_eps(b['oneshot'][i])}), ceiling {_eps(b['ceiling'][i])}")
    i_b = np.flatnonzero(found)
    j = pos[i_b]
    wrong_loss = np.zeros(nb, dtype=bool)
    wrong_loss[i_b] = (b["chain"][i_b] != f.chain[j]) | (b["oneshot"][i_b] != f.oneshot[j])
    rec.check(S, "replayed final losses equal the budget rows", wrong_loss, i_b.size,
              lambda i: f"value {b['value'][i]}: budget row chain {_eps(b['chain'][i])}, one-shot "
                        f"{_eps(b['oneshot'][i])}; the ledger replays to chain {_eps(f.chain[pos[i]])}, one-shot "
                        f"{_eps(f.oneshot[pos[i]])}")
    sched_cols = ("sched_start", "sched_cap", "sched_start_at", "sched_end_at", "sched_shape", "sched_steps")
    wrong_policy = np.zeros(nb, dtype=bool)
    kinds = f.policy_kind[j]
    fixed, sched = kinds == K_CEILING, kinds == K_SCHEDULE
    same_sched = np.ones(i_b.size, dtype=bool)
    for c in sched_cols:
        same_sched &= b[c][i_b] == f.policy[c][j]
    ceil = b["ceiling"][i_b]
    allowed_now = np.full(i_b.size, -1, dtype=np.int64)
    if sched.any():
        s = np.flatnonzero(sched)
        allowed_now[s] = schedule_ceilings(b["sched_start"][i_b[s]], b["sched_cap"][i_b[s]],
                                           b["sched_start_at"][i_b[s]], b["sched_end_at"][i_b[s]],
                                           b["sched_shape"][i_b[s]], b["sched_steps"][i_b[s]], now_us)
    ok = (fixed & same_sched & (ceil == f.policy["ceiling"][j])) \
        | (sched & same_sched & (ceil >= f.ceiling[j]) & (ceil <= allowed_now))
    wrong_policy[i_b] = ~ok
    rec.check(S, "each budget's ceiling and schedule match its last policy event (and the schedule now)",
              wrong_policy, i_b.size,
              lambda i: f"value {b['value'][i]}: budget ceiling {_eps(b['ceiling'][i])}, schedule "
                        f"{_eps(b['sched_start'][i])} -> {_eps(b['sched_cap'][i])}; last policy in the ledger: "
                        + ("fixed ceiling " + _eps(f.policy['ceiling'][pos[i]])
                           if f.policy_kind[pos[i]] == K_CEILING else
                           f"schedule {_eps(f.policy['sched_start'][pos[i]])} -> "
                           f"{_eps(f.policy['sched_cap'][pos[i]])}, last recorded ceiling {_eps(f.ceiling[pos[i]])}"))
    wrong_pause = np.zeros(nb, dtype=bool)
    wrong_pause[i_b] = (b["paused"][i_b] == 1) != f.paused[j]
    rec.check(S, "each budget's paused flag equals its last pause/resume entry", wrong_pause, i_b.size,
              lambda i: f"value {b['value'][i]}: paused={bool(b['paused'][i])} but the ledger says "
                        f"{'paused' if f.paused[pos[i]] else 'not paused'}")
    vpos, vfound = _lookup(f.value, values["id"])
    raw_wrong = vfound & ((values["raw_deleted"] == 1) != f.raw_deleted[vpos])
    rec.check(S, "a value's raw datum is deleted exactly when the ledger records it", raw_wrong, int(vfound.sum()),
              lambda i: f"value {values['id'][i]}: raw deleted={bool(values['raw_deleted'][i])}, the ledger "
                        f"{'records' if f.raw_deleted[vpos[i]] else 'does not record'} a deletion")


# --------------------------------------------------------------------------------------------- purchases

def _check_purchases(rec: _Recorder, e, p, values) -> None:
    S = "Purchases"
    release = (e["kind"] == K_CHAIN) | (e["kind"] == K_ONESHOT)
    r = np.flatnonzero(release)
    ppos, pfound = _lookup(p["id"], e["purchase"][r])
    rec.check(S, "every release belongs to an existing purchase", ~pfound, r.size,
              lambda k: f"entry {e['id'][r[k]]} (value {e['value'][r[k]]}) releases for purchase "
                        f"{e['purchase'][r[k]]}, which does not exist")
    counts = np.zeros(p["id"].size, dtype=np.int64)
    np.add.at(counts, ppos[pfound], 1)
    completed = p["status"] == S_COMPLETED
    wrong = np.where(completed, counts != p["included"], counts != 0)
    rec.check(S, "each completed purchase has exactly `included` ledger entries; others have none", wrong,
              p["id"].size, lambda i: f"purchase {p['id'][i]} ({_status(p['status'][i])}): included "
                                      f"{p['included'][i]}, ledger entries {counts[i]}")
    vpos, vfound = _lookup(values["id"], e["value"][r])
    rf = np.flatnonzero(pfound)
    q = ppos[rf]
    bad = np.zeros(r.size, dtype=bool)
    chain_purchase = p["mechanism"][q] == MECH_GRADUAL
    bad[rf] = (chain_purchase & (e["epsilon"][r[rf]] != p["epsilon"][q])) | ~vfound[rf] \
        | (values["attribute"][vpos[rf]] != p["attribute"][q])
    rec.check(S, "each release is at its purchase's epsilon, for a value of its attribute", bad, rf.size,
              lambda k: f"entry {e['id'][r[k]]}: epsilon {_eps(e['epsilon'][r[k]])}, value {e['value'][r[k]]}; "
                        f"purchase {p['id'][ppos[k]]} is at {_eps(p['epsilon'][ppos[k]])} on attribute "
                        f"{p['attribute'][ppos[k]]}")
    pair = np.stack([e["purchase"][r], e["value"][r]], axis=1)
    order = np.lexsort((pair[:, 1], pair[:, 0]))
    sp = pair[order]
    dup = np.zeros(r.size, dtype=bool)
    if r.size > 1:
        dup[order[1:]] = (sp[1:] == sp[:-1]).all(axis=1)
    rec.check(S, "a purchase releases each value at most once", dup, r.size,
              lambda k: f"entry {e['id'][r[k]]}: value {e['value'][r[k]]} released twice in purchase "
                        f"{e['purchase'][r[k]]}")


# --------------------------------------------------------------------------------------------- one-shot

def _mechanism(code: int) -> str:
    return MECHANISMS[code] if 0 <= code < len(MECHANISMS) else "?"


def _guarantee(code: int) -> str:
    return (GUARANTEES[code] or "none") if 0 <= code < len(GUARANTEES) else "?"


def _check_oneshot(rec: _Recorder, e, p, b, chunks) -> None:
    """One-shot releases and surveys (module doc, "Purchases"), and oneshot_loss as the sum of one-shot releases."""
    S = "Purchases"
    release = (e["kind"] == K_CHAIN) | (e["kind"] == K_ONESHOT)
    r = np.flatnonzero(release)
    ppos, pfound = _lookup(p["id"], e["purchase"][r])
    rf = np.flatnonzero(pfound)
    q = ppos[rf]
    mech = p["mechanism"][q]
    oneshot = mech != MECH_GRADUAL
    kind = e["kind"][r[rf]]
    wrong_kind = np.zeros(r.size, dtype=bool)
    wrong_kind[rf] = np.where(oneshot, kind != K_ONESHOT, kind != K_CHAIN)
    rec.check(S, "chain purchases release chain_release entries, one-shot purchases and surveys oneshot_release",
              wrong_kind, rf.size,
              lambda k: f"entry {e['id'][r[k]]} ({KINDS[e['kind'][r[k]]]}) for purchase {p['id'][ppos[k]]} "
                        f"({_mechanism(p['mechanism'][ppos[k]])})")
    charged_bad = np.zeros(r.size, dtype=bool)
    charged_bad[rf] = oneshot & ((p["charged"][q] <= 0) | (e["epsilon"][r[rf]] != p["charged"][q]))
    rec.check(S, "each one-shot release is at its purchase's charged epsilon", charged_bad, int(oneshot.sum()),
              lambda k: f"entry {e['id'][r[k]]} (value {e['value'][r[k]]}): epsilon {_eps(e['epsilon'][r[k]])}, "
                        f"purchase {p['id'][ppos[k]]} ({_mechanism(p['mechanism'][ppos[k]])}) charged "
                        f"{_eps(p['charged'][ppos[k]])}")
    known = (p["mechanism"] >= 0) & (p["mechanism"] < len(MECHANISMS))
    expected = np.where(known, MECHANISM_GUARANTEE[np.clip(p["mechanism"], 0, len(MECHANISMS) - 1)], -9)
    bad_purchase = ~known | (p["guarantee"] != expected) \
        | ((p["status"] == S_COMPLETED) & (p["mechanism"] != MECH_GRADUAL) & (p["charged"] <= 0))
    rec.check(S, "each purchase's guarantee is its mechanism's (and completed one-shot purchases record their "
                 "charged epsilon)", bad_purchase, p["id"].size,
              lambda i: f"purchase {p['id'][i]}: mechanism {_mechanism(p['mechanism'][i])}, guarantee "
                        f"{_guarantee(p['guarantee'][i])}, charged {_eps(p['charged'][i])}")
    g = e["guarantee"][r[rf]]
    want = expected[q]
    wrong_g = np.zeros(r.size, dtype=bool)
    wrong_g[rf] = np.where(oneshot, g != want, (g != G_NONE) & (g != G_LDP))
    rec.check(S, "each release's guarantee matches its purchase's mechanism (improved Christofides: per-report, "
                 "non-collusion)", wrong_g, rf.size,
              lambda k: f"entry {e['id'][r[k]]} (value {e['value'][r[k]]}) records guarantee "
                        f"{_guarantee(e['guarantee'][r[k]])}; purchase {p['id'][ppos[k]]} is "
                        f"{_mechanism(p['mechanism'][ppos[k]])} ({_guarantee(expected[ppos[k]])})")
    not_release = ~release & (e["guarantee"] != G_NONE)
    rec.check(S, "budget events carry no guarantee", not_release, int((~release).sum()),
              lambda i: f"entry {e['id'][i]} ({KINDS[e['kind'][i]] if 0 <= e['kind'][i] < len(KINDS) else '?'}) "
                        f"records guarantee {_guarantee(e['guarantee'][i])}")
    cpos, cfound = _lookup(p["id"], chunks["purchase"])
    stored = np.zeros(p["id"].size, dtype=np.int64)
    np.add.at(stored, cpos[cfound], chunks["count"][cfound])
    is_survey = np.isin(p["mechanism"], SURVEYS)
    rec.check(S, "surveys store no outputs (the buyer gets only the aggregate; improved Christofides reports are "
                 "never sold)", is_survey & (stored > 0), int(is_survey.sum()),
              lambda i: f"purchase {p['id'][i]} ({_mechanism(p['mechanism'][i])}) stores {stored[i]} outputs")

    S = "Budgets and values"
    one = e["kind"] == K_ONESHOT
    vals, inv = np.unique(e["value"][one], return_inverse=True)
    sums = np.zeros(vals.size, dtype=np.int64)
    np.add.at(sums, inv, e["epsilon"][one])
    pos, found = _lookup(vals, b["value"])
    total = np.where(found, sums[pos] if vals.size else 0, 0)
    rec.check(S, "each budget's oneshot_loss is the sum of its one-shot releases' epsilons", b["oneshot"] != total,
              b["value"].size, lambda i: f"value {b['value'][i]}: oneshot_loss {_eps(b['oneshot'][i])}, one-shot "
                                         f"releases sum to {_eps(total[i])}")


# --------------------------------------------------------------------------------------------- money

def _check_money(rec: _Recorder, e, p, values, a, m, payouts) -> None:
    S = "Money"
    na, nm = a["id"].size, m["id"].size
    apos, afound = _lookup(a["id"], m["account"])
    rec.check(S, "every money entry belongs to an account", ~afound, nm,
              lambda i: f"money entry {m['id'][i]} names account {m['account'][i]}, which does not exist")
    # Replay each account: entries by (account, id); running sums.
    order = np.lexsort((m["id"], m["account"]))
    acc, amt, after = m["account"][order], m["amount"][order], m["balance_after"][order]
    new = np.ones(nm, dtype=bool)
    if nm:
        new[1:] = acc[1:] != acc[:-1]
    cs = np.cumsum(amt)
    gs = np.maximum.accumulate(np.where(new, np.arange(nm), 0)) if nm else np.zeros(0, dtype=np.int64)
    running = cs - (cs[gs] - amt[gs])  # the account's balance after each of its entries
    bad_run = np.zeros(nm, dtype=bool)
    bad_run[order] = running != after
    running_of = np.empty(nm, dtype=np.int64)
    running_of[order] = running
    rec.check(S, "each entry's balance_after is its account's running sum", bad_run, nm,
              lambda i: f"money entry {m['id'][i]} (account {m['account'][i]}): balance_after "
                        f"{_money(m['balance_after'][i])}, running sum {_money(running_of[i])}")
    total = np.zeros(na, dtype=np.int64)
    lastafter = np.full(na, 0, dtype=np.int64)
    has = np.zeros(na, dtype=bool)
    fo = afound[order]
    np.add.at(total, apos[order][fo], amt[fo])
    ends = np.flatnonzero(np.append(new[1:], True)) if nm else np.zeros(0, dtype=np.int64)
    ends = ends[fo[ends]] if nm else ends
    lastafter[apos[order][ends]] = after[ends]
    has[apos[order][ends]] = True
    rec.check(S, "each account's balance equals the sum of its entries", total != a["balance"], na,
              lambda i: f"account {a['id'][i]} ({ACCOUNT_KINDS[a['kind'][i]] if a['kind'][i] >= 0 else '?'}, user "
                        f"{a['user'][i]}): balance {_money(a['balance'][i])}, entries sum to {_money(total[i])}")
    rec.check(S, "each account's balance equals its last balance_after", has & (lastafter != a["balance"]), na,
              lambda i: f"account {a['id'][i]}: balance {_money(a['balance'][i])}, last balance_after "
                        f"{_money(lastafter[i])}")
    rec.check(S, "balances are never negative", (a["balance"] < 0), na,
              lambda i: f"account {a['id'][i]}: balance {_money(a['balance'][i])}")

    kind = np.where(afound, a["kind"][apos], -1)
    user = np.where(afound, a["user"][apos], -2)
    with_p = m["purchase"] >= 0
    ppos, pfound = _lookup(p["id"], m["purchase"])
    rec.check(S, "money entries name existing purchases", with_p & ~pfound, int(with_p.sum()),
              lambda i: f"money entry {m['id'][i]} names purchase {m['purchase'][i]}, which does not exist")
    returned = np.isin(m["id"], payouts["release"])  # a rejected payout credits the owner's earnings back
    unexplained = ~with_p & ((kind == A_OWNER) | (kind == A_PLATFORM)) & (m["amount"] > 0) & ~returned
    rec.check(S, "earnings and fees are credited only by purchases", unexplained, int((~with_p).sum()),
              lambda i: f"money entry {m['id'][i]}: {_money(m['amount'][i])} credited to account {m['account'][i]} "
                        f"({ACCOUNT_KINDS[kind[i]]}) without a purchase")
    pm = np.flatnonzero(with_p & pfound)
    q = ppos[pm]
    buyer_side = kind[pm] == A_BUYER
    wrong_side = np.zeros(nm, dtype=bool)
    wrong_side[pm] = np.where(buyer_side, (m["amount"][pm] >= 0) | (user[pm] != p["buyer"][q]),
                              m["amount"][pm] <= 0)
    rec.check(S, "in a purchase only its buyer is debited, and owners and the platform are credited", wrong_side,
              pm.size, lambda i: f"money entry {m['id'][i]}: {_money(m['amount'][i])} on account {m['account'][i]} "
                                 f"({ACCOUNT_KINDS[kind[i]] if kind[i] >= 0 else '?'}, user {user[i]}) in purchase "
                                 f"{m['purchase'][i]}")
    debit = np.zeros(p["id"].size, dtype=np.int64)
    credit = np.zeros(p["id"].size, dtype=np.int64)
    moved = np.zeros(p["id"].size, dtype=np.int64)
    np.add.at(debit, q[buyer_side], -m["amount"][pm][buyer_side])
    np.add.at(credit, q[~buyer_side], m["amount"][pm][~buyer_side])
    np.add.at(moved, q, 1)
    completed = p["status"] == S_COMPLETED
    bad_p = np.where(completed, (debit != p["price"]) | (credit != debit), moved != 0)
    rec.check(S, "per purchase: buyer debit = price = owners' shares + platform fee (none unless completed)", bad_p,
              p["id"].size, lambda i: f"purchase {p['id'][i]}: price {_money(p['price'][i])}, buyer debited "
                                      f"{_money(debit[i])}, owners and platform credited {_money(credit[i])}, "
                                      f"{moved[i]} movements")
    # Owners paid in a purchase must have had a value released in it.
    release = (e["kind"] == K_CHAIN) | (e["kind"] == K_ONESHOT)
    vpos, vfound = _lookup(values["id"], e["value"][release])
    sold_pairs = np.unique(e["purchase"][release][vfound] * (1 << 32) + values["owner"][vpos[vfound]])
    paid = np.flatnonzero(with_p & (kind == A_OWNER))
    pairs = m["purchase"][paid] * (1 << 32) + user[paid]
    unpaid = np.zeros(nm, dtype=bool)
    unpaid[paid] = ~np.isin(pairs, sold_pairs)
    rec.check(S, "only owners whose values a purchase released are paid by it", unpaid, paid.size,
              lambda i: f"money entry {m['id'][i]}: owner {user[i]} paid {_money(m['amount'][i])} by purchase "
                        f"{m['purchase'][i]}, which released none of their values")


def _check_topups_payouts(rec: _Recorder, a, m, t, po) -> None:
    S = "Money"
    nm = m["id"].size
    apos, afound = _lookup(a["id"], m["account"])
    kind = np.where(afound, a["kind"][apos], -1)
    user = np.where(afound, a["user"][apos], -2)

    def movement(entry_ids):
        """Position of each entry id among the entries, whether found, and its account kind, user and amount."""
        pos, found = _lookup(m["id"], entry_ids)
        pick = lambda col, none: np.where(found, col[pos] if nm else none, none)  # noqa: E731
        return (found, pick(kind, -1), pick(user, -2), pick(m["amount"], 0), pick(m["kind"], -1),
                pick(m["account"], -1))

    found, akind, auser, amount, mkind, _ = movement(t["entry"])
    bad = ~found | (akind != A_BUYER) | (auser != t["buyer"]) | (amount != t["amount"]) | (mkind != M_TOPUP)
    rec.check(S, "each top-up is one credit of its buyer's account by its amount", bad, t["id"].size,
              lambda i: f"top-up {t['id'][i]} of {_money(t['amount'][i])} to user {t['buyer'][i]}: its movement "
                        f"{t['entry'][i]} credits {_money(amount[i])} to a "
                        f"{ACCOUNT_KINDS[akind[i]] if akind[i] >= 0 else 'missing'} account of user {auser[i]}")
    hfound, hkind, huser, hamount, hmkind, hacc = movement(po["hold"])
    rfound, rkind, ruser, ramount, rmkind, racc = movement(po["release"])
    rejected = po["status"] == P_REJECTED
    bad = (~hfound | (hkind != A_OWNER) | (huser != po["owner"]) | (hamount != -po["amount"]) | (hmkind != M_PAYOUT)
           | np.where(rejected, ~rfound | (racc != hacc) | (ramount != po["amount"]) | (rmkind != M_PAYOUT),
                      po["release"] >= 0))
    rec.check(S, "each payout holds its amount from its owner's earnings (and a rejected one returns it)", bad,
              po["id"].size,
              lambda i: f"payout {po['id'][i]} of {_money(po['amount'][i])} for owner {po['owner'][i]} "
                        f"({PAYOUT_STATUSES[po['status'][i]] if po['status'][i] >= 0 else '?'}): hold "
                        f"{_money(hamount[i])} on user {huser[i]}'s account, returned {_money(ramount[i])}")
    recorded = np.concatenate([t["entry"], po["hold"], po["release"][po["release"] >= 0]])
    orphan = ((m["kind"] == M_TOPUP) | (m["kind"] == M_PAYOUT)) & ~np.isin(m["id"], recorded)
    rec.check(S, "every top-up and payout movement belongs to its top-up or payout request", orphan, nm,
              lambda i: f"money entry {m['id'][i]}: {_money(m['amount'][i])} "
                        f"({MONEY_KINDS[m['kind'][i]] if m['kind'][i] >= 0 else '?'}) on account {m['account'][i]} "
                        f"without a record")
    of_sale = (m["kind"] == M_PURCHASE) | (m["kind"] == M_FEE) | (m["kind"] == M_EARNING)
    expected = np.select([kind == A_BUYER, kind == A_PLATFORM, kind == A_OWNER], [M_PURCHASE, M_FEE, M_EARNING], -1)
    with_p = m["purchase"] >= 0
    bad = (m["kind"] < 0) | (of_sale != with_p) | (with_p & (m["kind"] != expected))
    rec.check(S, "purchases' movements (purchase, fee, earning) name their purchase, and only they do", bad, nm,
              lambda i: f"money entry {m['id'][i]}: kind "
                        f"{MONEY_KINDS[m['kind'][i]] if m['kind'][i] >= 0 else 'unknown'} on a "
                        f"{ACCOUNT_KINDS[kind[i]] if kind[i] >= 0 else '?'} account, purchase "
                        f"{m['purchase'][i] if with_p[i] else 'none'}")
    inflow = int(m["amount"][(m["kind"] == M_TOPUP) | (m["kind"] == M_ADJUST)].sum())
    outflow = -int(m["amount"][m["kind"] == M_PAYOUT].sum())
    held = int(a["balance"].sum())
    rec.check(S, "money is neither created nor lost: balances = top-ups and deposits - payouts",
              np.array([held != inflow - outflow]), 1,
              lambda i: f"balances add up to {_money(held)}; top-ups and deposits {_money(inflow)} less payouts "
                        f"{_money(outflow)} make {_money(inflow - outflow)}")


# =============================================================================================
# Empirical privacy audit (docs/mechanisms-reference.md#privacy-audit-by-inference)
# =============================================================================================

@dataclass
class Level:
    epsilon: float
    n: int
    bound: float
    attackers: dict  # name -> {"error_rate", "standard_error", "p_value", "flag"}


@dataclass
class AttributeAudit:
    attribute_id: int
    label: str
    m: int
    kind: str
    values: int = 0
    sampled: int = 0
    common_epsilons: int = 0
    levels: list[Level] = field(default_factory=list)
    note: str = ""
    error: str = ""

    @property
    def leak(self) -> bool:
        return any(a["flag"] for lv in self.levels for a in lv.attackers.values())

    @property
    def ok(self) -> bool:
        return not self.leak and not self.error

    @property
    def skipped(self) -> bool:
        """Nothing was attacked (no chains, nothing sampled, no common epsilon, too few values): neither a pass
        nor a failure."""
        return not self.error and not self.levels

    @property
    def status(self) -> str:
        return "FAIL" if not self.ok else "SKIPPED" if self.skipped else "PASS"

    @property
    def domain(self) -> str:
        """``m`` in words: what the attackers guess among."""
        per = {"string": " per Bloom bit", "graph": " states per item", "ternary": " states",
               "numeric": " (discretized to its bounds)"}
        return f"m = {self.m}{per.get(self.kind, '')}"


@dataclass
class PrivacyAuditReport:
    attributes: list[AttributeAudit]
    sample: int
    seconds: float = 0.0
    png: bytes | None = None

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.attributes)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "sample": self.sample, "attributes": [
            {"attribute": a.attribute_id, "label": a.label, "m": a.m, "kind": a.kind, "values": a.values,
             "sampled": a.sampled, "leak": a.leak, "error": a.error, "note": a.note, "status": a.status,
             "skipped": a.skipped,
             "levels": [{"epsilon": lv.epsilon, "n": lv.n, "bound": lv.bound, "attackers": lv.attackers}
                        for lv in a.levels]} for a in self.attributes]}

    def as_text(self) -> str:
        from mechanisms.audit import ATTACKERS

        short = {"last_output": "LO", "mle": "MLE", "highest_frequency": "HF", "weighted_highest_frequency": "WHF"}
        lines = ["Privacy audit by inference (docs/mechanisms-reference.md#privacy-audit-by-inference): error rate +- standard error of each",
                 "attacker on a uniform-prior subsample of stored chains, against the Bayes bound 1 - E/(E + m - 1).",
                 "A '!' marks an error rate significantly below the bound (a chain leaks more than its epsilon).", ""]
        for a in self.attributes:
            lines.append(f"[{a.status}] attribute {a.attribute_id} {a.label} ({a.domain}, {a.kind}): {a.values} "
                         f"values, {a.sampled} sampled, {a.common_epsilons} common epsilons")
            if a.error:
                lines.append(f"    ERROR: {a.error}")
            if a.note:
                lines.append(f"    note: {a.note}")
            if a.levels:
                head = f"    {'epsilon':>9} {'n':>6} {'bound':>7} " + " ".join(f"{short[n]:>16}" for n in ATTACKERS)
                lines.append(head)
                for lv in a.levels:
                    cells = []
                    for name in ATTACKERS:
                        r = lv.attackers[name]
                        mark = "!" if r["flag"] else " "
                        cells.append(f"{r['error_rate']:7.4f}+-{r['standard_error']:6.4f}{mark}")
                    lines.append(f"    {lv.epsilon:9.4f} {lv.n:6d} {lv.bound:7.4f} " + " ".join(cells))
            lines.append("")
        audited = sum(not a.skipped for a in self.attributes)
        skipped = len(self.attributes) - audited
        lines.append(f"RESULT: {'PASS' if self.ok else 'FAIL'} ({audited} attribute{'s' if audited != 1 else ''} "
                     f"audited, {skipped} skipped; {self.seconds:.2f} s)")
        return "\n".join(lines)


def _sample_ids(ids: np.ndarray, k: int, rng) -> np.ndarray:
    from mechanisms.random import words

    if ids.size <= k:
        return np.sort(ids)
    keys = words(rng, ids.size)
    return np.sort(ids[np.argpartition(keys, k)[:k]])


def _audit_attribute(attribute, *, sample: int, levels: int, coverage: float, rng) -> AttributeAudit:
    from market import chains as market_chains
    from market import domain, sealing
    from market.models import Chain, Value
    from mechanisms.audit import ATTACKERS, LEAK_LEVEL, run_attacks

    m, width = attribute.domain_size, attribute.width
    out = AttributeAudit(attribute.id, str(attribute), m, attribute.kind)
    if attribute.is_oneshot:
        out.values = int(Value.objects.filter(attribute=attribute).count())
        out.note = (f"one-shot mechanism ({attribute.mechanism}): no stored chains to attack; each release is a "
                    f"fresh draw charged to the value's one-shot loss")
        return out
    ids = np.array(list(Value.objects.filter(attribute=attribute, input_sealed__isnull=False)
                        .values_list("id", flat=True)), dtype=np.int64)
    out.values = int(Value.objects.filter(attribute=attribute).count())
    chosen = _sample_ids(ids, sample, rng)
    rows = []
    for s in range(0, chosen.size, 1000):
        part = chosen[s:s + 1000].tolist()
        rows += list(Chain.objects.filter(value_id__in=part).order_by("value_id").values_list(
            "value_id", "value__owner_id", "value__input_sealed", "epsilons", "outputs"))
    out.sampled = len(rows)
    if not rows:
        out.note = "no stored chains with their raw value to audit"
        return out
    try:
        payload = sealing.open_inputs([bytes(r[2]) for r in rows], [r[1] for r in rows], [attribute.id] * len(rows),
                                      domain.payload_bytes(attribute))
    except sealing.SealBroken as exc:
        out.error = f"sealed inputs do not open: {exc}"
        return out
    truth = domain.from_payload(attribute, payload)  # (n, width)
    decoded = [market_chains.decode(r[3], r[4], width) for r in rows]
    all_eps = np.concatenate([d[0] for d in decoded])
    distinct, counts = np.unique(all_eps, return_counts=True)
    common = distinct[counts >= coverage * len(rows)]
    out.common_epsilons = int(common.size)
    if common.size == 0:
        out.note = "the sampled chains share no epsilon"
        return out
    n, L = len(rows), common.size
    present = np.zeros((n, L), dtype=bool)
    outputs = np.full((n, L, width), -1, dtype=np.int64)
    for i, (eps, outs) in enumerate(decoded):
        pos = np.clip(np.searchsorted(eps, common), 0, max(eps.size - 1, 0))
        hit = eps[pos] == common
        present[i] = hit
        outputs[i, hit] = outs[pos[hit]]
    steps = np.unique(np.round(np.linspace(1, L, min(levels, L))).astype(np.int64))
    threshold = LEAK_LEVEL / steps.size  # Bonferroni over the levels of one attribute
    for j in steps:
        keep = present[:, :j].all(axis=1)
        x = truth[keep].reshape(-1)
        o = outputs[keep, :j, :].transpose(0, 2, 1).reshape(-1, j)
        if x.size == 0 or np.bincount(x, minlength=m).min() == 0:
            continue
        if (o < 0).any() or (o >= m).any() or (x < 0).any() or (x >= m).any():
            out.error = "stored outputs or inputs outside the attribute's domain"
            return out
        res = run_attacks(x, o, common[:j] / MICRO / attribute.draw_divisor, m, rng)  # each output's epsilon
        out.levels.append(Level(
            epsilon=float(common[j - 1]) / MICRO, n=int(res["n"]), bound=float(res["bound"]),
            attackers={name: {"error_rate": r["error_rate"], "standard_error": r["standard_error"],
                              "z": r["z"], "p_value": r["p_value"], "flag": bool(r["p_value"] < threshold)}
                       for name, r in ((nm, res["attackers"][nm]) for nm in ATTACKERS)}))
    if not out.levels:
        out.note = "too few sampled values of every category for a uniform-prior subsample"
    return out


def privacy_audit(*, sample: int = 2000, levels: int = 10, attribute_ids: Iterable[int] | None = None,
                  coverage: float = 0.5, rng=None, plot: bool = True) -> PrivacyAuditReport:
    """Run the four attackers of docs/mechanisms-reference.md#privacy-audit-by-inference on a sample of each attribute's stored chains.

    For each attribute: ``sample`` values with their raw datum are drawn at
    random; their true inputs are opened (``market.sealing.open_inputs``: an
    operator tool -- nothing but error rates leaves this function); the
    epsilons present in at least ``coverage`` of the sampled chains form the
    common path; at up to ``levels`` prefixes of it, the chains holding the
    whole prefix are attacked (``mechanisms.audit.run_attacks``, uniform-prior
    subsample).  An attacker is flagged when its error rate is below the
    Theorem 6.1 bound by more than chance allows (exact binomial test at
    ``LEAK_LEVEL``, Bonferroni-divided by the number of levels).
    """
    from market.models import Attribute

    started = time.perf_counter()
    qs = Attribute.objects.select_related("dataset").order_by("id")
    if attribute_ids:
        qs = qs.filter(id__in=list(attribute_ids))
    results = [_audit_attribute(a, sample=sample, levels=levels, coverage=coverage, rng=rng) for a in qs]
    report = PrivacyAuditReport(results, sample)
    if plot:
        report.png = privacy_plot_png(report)
    report.seconds = time.perf_counter() - started
    return report


# =============================================================================================
# Charts (matplotlib, Agg, object API: no global pyplot state, safe in threads)
# =============================================================================================

def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def data_uri(png: bytes | None) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode() if png else ""


def privacy_plot_png(report: PrivacyAuditReport) -> bytes | None:
    from mechanisms.audit import ATTACKERS, bayes_error_bound

    audited = [a for a in report.attributes if a.levels]
    if not audited:
        return None
    cols = min(3, len(audited))
    rows = math.ceil(len(audited) / cols)
    fig = _figure(5.0 * cols, 3.6 * rows)
    labels = {"last_output": "Last output (LO)", "mle": "Maximum likelihood (MLE)",
              "highest_frequency": "Highest frequency (HF)", "weighted_highest_frequency": "Weighted HF (WHF)"}
    markers = {"last_output": "o", "mle": "s", "highest_frequency": "^", "weighted_highest_frequency": "v"}
    for k, a in enumerate(audited):
        ax = fig.add_subplot(rows, cols, k + 1)
        eps = np.array([lv.epsilon for lv in a.levels])
        dense = np.linspace(eps.min(), eps.max(), 200) if eps.size > 1 else eps
        ax.plot(dense, bayes_error_bound(dense, a.m) * np.ones_like(dense), "k-", lw=1.5,
                label="Bound 1 - E/(E+m-1)")
        for name in ATTACKERS:
            rate = np.array([lv.attackers[name]["error_rate"] for lv in a.levels])
            se = np.array([lv.attackers[name]["standard_error"] for lv in a.levels])
            ax.errorbar(eps, rate, yerr=se, marker=markers[name], ms=4, lw=1, capsize=2, label=labels[name])
            flagged = np.array([lv.attackers[name]["flag"] for lv in a.levels])
            if flagged.any():
                ax.plot(eps[flagged], rate[flagged], "rx", ms=10, mew=2)
        ax.set_title(f"{a.label} (m={a.m})" + ("  LEAK" if a.leak else ""), fontsize=9,
                     color="red" if a.leak else "black")
        ax.set_xlabel("epsilon")
        ax.set_ylabel("error rate")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7)
    return _png(fig)


@dataclass
class Overview:
    stats: dict
    loss_png: bytes | None
    sales_png: bytes | None
    utilisation: list[tuple[str, int]]


def overview() -> Overview:
    """Figures for the console's overview page: counts, loss and ceiling histograms, purchases and revenue by day."""
    from django.db.models import Count, Sum
    from django.db.models.functions import TruncDate

    from market.models import Attribute, Dataset, Purchase, Value

    b = read_budgets()
    loss = (b["chain"] + b["oneshot"]) / MICRO
    ceiling = b["ceiling"] / MICRO
    completed = Purchase.objects.filter(status=Purchase.Status.COMPLETED)
    totals = completed.aggregate(n=Count("id"), revenue=Sum("price"), released=Sum("included"))
    stats = {
        "datasets": Dataset.objects.count(), "attributes": Attribute.objects.count(),
        "values": Value.objects.count(),
        "values with raw datum": Value.objects.filter(raw_deleted_at__isnull=True).count(),
        "paused values": int(b["paused"].sum()), "completed purchases": totals["n"] or 0,
        "values released": totals["released"] or 0, "revenue": totals["revenue"] or 0,
        "ledger entries": LedgerEntry.objects.count(),
        "mean loss": round(float(loss.mean()), 4) if loss.size else 0,
        "mean ceiling": round(float(ceiling.mean()), 4) if ceiling.size else 0,
    }
    used = np.where(b["ceiling"] > 0, (b["chain"] + b["oneshot"]) / np.maximum(b["ceiling"], 1), 0.0)
    spent = b["chain"] + b["oneshot"]
    utilisation = [("nothing spent", int((spent == 0).sum())),
                   ("under half spent", int(((spent > 0) & (used < 0.5)).sum())),
                   ("half or more spent", int(((used >= 0.5) & (spent < b["ceiling"])).sum())),
                   ("exhausted (loss = ceiling)", int(((spent == b["ceiling"]) & (spent > 0)).sum()))]
    loss_png = None
    if loss.size:
        fig = _figure(10, 3.4)
        hi = max(float(ceiling.max()), float(loss.max()), 1e-6)
        bins = np.linspace(0, hi, 41)
        ax1, ax2, ax3 = fig.subplots(1, 3)
        ax1.hist(ceiling, bins=bins, color="#4c72b0")
        ax1.set_title("Ceilings")
        ax1.set_xlabel("epsilon")
        ax1.set_ylabel("values")
        ax2.hist(loss, bins=bins, color="#dd8452")
        ax2.set_title("Losses (chain + one-shot)")
        ax2.set_xlabel("epsilon")
        ax3.hist(np.clip(used, 0, 1), bins=np.linspace(0, 1, 21), color="#55a868")
        ax3.set_title("Loss / ceiling")
        ax3.set_xlabel("share of budget spent")
        for ax in (ax1, ax2, ax3):
            ax.grid(alpha=0.3)
        loss_png = _png(fig)
    daily = list(completed.exclude(completed_at=None).annotate(day=TruncDate("completed_at")).values("day")
                 .annotate(n=Count("id"), revenue=Sum("price")).order_by("day"))
    sales_png = None
    if daily:
        from datetime import timedelta

        from matplotlib import dates as mdates

        fig = _figure(10, 3.2)
        ax1, ax2 = fig.subplots(1, 2)
        days = [d["day"] for d in daily]
        revenue = [float(d["revenue"] or 0) for d in daily]
        ax1.bar(days, [d["n"] for d in daily], width=0.8, color="#4c72b0")
        ax1.set_title("Completed purchases per day")
        ax1.set_ylabel("purchases")
        ax2.bar(days, revenue, width=0.8, color="#dd8452", label="per day")
        ax2.plot(days, np.cumsum(revenue), "o-", color="#c44e52", label="cumulative")
        ax2.set_title("Revenue")
        ax2.legend(fontsize=7)
        for ax in (ax1, ax2):
            locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
            ax.set_xlim(days[0] - timedelta(days=2), days[-1] + timedelta(days=2))
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        sales_png = _png(fig)
    return Overview(stats, loss_png, sales_png, utilisation)


# =============================================================================================
# Ledger export (CSV, streamed)
# =============================================================================================

EXPORT_HEADER = ["entry_id", "block_id", "created_at", "kind", "value_id", "attribute_id", "owner_id", "owner",
                 "purchase_id", "buyer_id", "buyer", "epsilon", "chain_loss_before", "chain_loss_after",
                 "oneshot_loss_before", "oneshot_loss_after", "ceiling", "schedule_start", "schedule_cap",
                 "schedule_start_at", "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee", "mechanism"]
_EXPORT_SOURCES = ["id", "block_id", "created_at", "kind", "value_id", "value__attribute_id", "value__owner_id",
                   "value__owner__username", "purchase_id", "purchase__buyer_id", "purchase__buyer__username",
                   "epsilon", "chain_loss_before", "chain_loss_after", "oneshot_loss_before", "oneshot_loss_after",
                   "ceiling", "schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at",
                   "schedule_shape", "schedule_steps", "guarantee", "purchase__mechanism"]
_EXPORT_TIMES = {"created_at", "schedule_start_at", "schedule_end_at"}
#: Timestamps are written as ISO 8601 in UTC with microseconds by both paths.
_PG_ISO = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"
_CHUNK = 1 << 16


class _Echo:
    def write(self, value):
        return value


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, datetime):
        return x.astimezone(dt_timezone.utc).isoformat(timespec="microseconds")
    return str(x)


def _export_values(queryset, pg: bool):
    """The export's columns as named annotations, in order (timestamps formatted in SQL on PostgreSQL)."""
    from django.db.models import CharField, F, Func, Value

    exprs = {}
    for j, src in enumerate(_EXPORT_SOURCES):
        expr = F(src)
        if pg and src in _EXPORT_TIMES:
            expr = Func(F(src), template=_PG_ISO, output_field=CharField())
        elif pg and src in ("schedule_shape", "guarantee"):  # COPY writes "" as "", Python's csv as nothing
            expr = Func(F(src), Value(""), function="NULLIF", output_field=CharField())
        exprs[f"x{j:02d}"] = expr
    return queryset.order_by("id").values(**exprs)


def _rows_python(queryset, chunk_size: int) -> Iterator[str]:
    writer = csv.writer(_Echo(), lineterminator="\n")
    buf = []
    for row in _export_values(queryset, pg=False).values_list(
            *[f"x{j:02d}" for j in range(len(_EXPORT_SOURCES))]).iterator(chunk_size=chunk_size):
        buf.append(writer.writerow([_cell(x) for x in row]))
        if len(buf) >= 512:
            yield "".join(buf)
            buf = []
    if buf:
        yield "".join(buf)


def _rows_copy(queryset) -> Iterator[str]:
    """PostgreSQL: the server writes the CSV (``COPY (query) TO STDOUT``); chunks of ~64 KB are passed on."""
    sql, params = _export_values(queryset, pg=True).query.sql_with_params()
    with connection.cursor() as cur:
        with cur.cursor.copy(f"COPY ({sql}) TO STDOUT (FORMAT CSV)", params) as copy:
            buf, size = [], 0
            for data in copy:
                buf.append(bytes(data))
                size += len(data)
                if size >= _CHUNK:
                    yield b"".join(buf).decode()
                    buf, size = [], 0
            if buf:
                yield b"".join(buf).decode()


def export_csv_rows(queryset, chunk_size: int = 5000) -> Iterator[str]:
    """CSV text (header first) of the given ledger entries in id order, streamed in chunks.

    Owners and buyers appear by id and username; epsilons as exact decimals;
    times as ISO 8601 UTC with microseconds.  On PostgreSQL the rows are
    formatted by the server (``COPY``), elsewhere by Python; the bytes agree.
    """
    yield ",".join(EXPORT_HEADER) + "\n"
    if connection.vendor == "postgresql":
        yield from _rows_copy(queryset)
    else:
        yield from _rows_python(queryset, chunk_size)


def report_json(report) -> str:
    return json.dumps(report.as_dict(), indent=2, default=str)
