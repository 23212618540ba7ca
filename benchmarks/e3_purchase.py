"""E3: end-to-end time of a purchase (docs/quality-targets.md#performance).

One purchase of every value of a categorical attribute (m = 5) at epsilon
0.35, for n = 10^4, 10^5 and 10^6 values, on PostgreSQL:
``market.purchases.execution.purchase_claim`` then ``purchase_execute``, timed together
from outside (the service code is not touched).  Every chain stores the grid
points 0.1, 0.2, ..., 1.0 (the ceiling), so each value is **bridged** between
0.3 and 0.4 and the new point is written back into its chain (chains in blocks,
docs/architecture.md#chains-in-blocks: one new sealed point row per block); the purchase
also raises every budget's ``chain_loss``, appends one ledger block holding one compact release row per chain
block (``accounts_ledgerrelease``: the block's values, owners, losses before and after, ceilings and the owners'
earnings as ``bigint[]`` arrays; docs/budget-rules.md#the-ledger), makes 3 money movements (the buyer debited,
the attribute's ``owners_pending`` account credited the owners' total share, the platform credited its fee;
default price policy: 0.0035 per value, owner share 0.8) and stores the outputs.  The owners themselves are
paid later, in batches (``accounts.money.services.earnings_settle``, docs/money.md#settlement): not part of the
purchase, and not timed -- the settlement task a purchase enqueues on commit (which this set-up's eager Celery
would run in-process, inside the purchase's call) is held back during the timed runs.

Beside it, in the same rounds (interleaved, best of the rounds): the limit, a
single set-based SQL update of the same n rows::

    UPDATE accounts_budgetaccount SET chain_loss = GREATEST(chain_loss, 0.35), updated_at = now()
     WHERE value_id IN (SELECT id FROM market_value WHERE attribute_id = %s)

timed with its commit, twice per round: as PostgreSQL plans it (a hash join over the budget table) and planned
as index probes (``storage.index_probes``, the plan the purchase's own budget update runs with,
docs/architecture.md#updates-keyed-by-an-array-of-ids); the limit is the faster.  Targets: purchase >= 30% of
the limit's rows/s, and time per value linear in n (the per-value time at the largest n within 1.5x of the smallest's).
(Holdings, the basis of upgrade credit, are derived from the buyer's earlier purchases: nothing is written
per value for them.)

Also printed, as a reference bound (not a target), in the same rounds: the
rows this design's purchase must write -- one chain point row per block, budgets,
one ledger block and one compact release row per chain block, the pending account's credit, the buyer's debit
and the platform's fee (3 money entries), the outputs -- written by set-based SQL alone (``_time_writes_alone``: no read
into Python, no locks taken beforehand, no hashing, the deferred foreign-key
checks included), and within it the deferred foreign-key checks alone.  The
server checks each inserted row's foreign keys once however the client
inserts it, so the checks' rate against the limit bounds any implementation
that writes these rows under these constraints; the SQL writes as a whole are
a reference, not a bound (the service inserts by binary COPY, which may beat
``INSERT ... SELECT``).

Before each timed run the chains and budgets are reset to the same state
(``market_chainpoint`` re-filled from a snapshot, the blocks' heads and
revisions put back, ``chain_loss`` back to 0, ``VACUUM ANALYZE``,
``CHECKPOINT``) and a new buyer with enough credit is created, so every round
does the same work (no upgrade credit, every value bridged).  The platform's account and the attribute's
pending-earnings account exist beforehand (sales before); the owners' own accounts are not touched by a purchase.

Where the time goes: the timed runs wrap the functions ``purchase_execute``
calls (``candidates``, ``chainstore.neighbours``, ``chainsets.at``, ...) with
``perf_counter`` probes (outermost calls only; the gaps between them are named
after the inline code there), the deferred row checks the purchase runs before crediting the platform
(``storage.check_deferred_constraints``) among them; plus one
extra untimed run under ``cProfile`` (at ``E3_PROFILE_N``, default 10^5; 0: none)
listing the functions with the most own time.

Set-up (untimed) reuses ``benchmarks.e2_extension``: values, budgets, chain
blocks and their first sealed point rows (0.1) by COPY, then the Celery task ``extend_chains`` grows every
chain to the ceiling 1.0.  Uses a dedicated database ``ldpbench_e3`` (created,
migrated and dropped at the end) on the server of ``E3_POSTGRES_URL``,
``E2_POSTGRES_URL`` or ``DATABASE_URL`` (default postgresql://postgres@127.0.0.1:5432/).

A size whose purchase would take longer than ``E3_MAX_SECONDS`` (default 600 s,
predicted linearly from the smaller sizes) is run once instead of best-of, and
one predicted to take more than twice that is not run; both are printed.

Run: ``python -m benchmarks e3``; figures go to ``benchmarks/results/e3_purchase.json``.
Quicker: ``E3_N=1e4,1e5 E3_ROUNDS=2 python -m benchmarks e3``.
"""
from __future__ import annotations

import cProfile
import os
import pstats
import time
from decimal import Decimal
from urllib.parse import urlsplit

from . import _common
from ._postgres import (
    admin,
    chain_stats,
    checkpoint,
    funded_buyer,
    restore_chains,
    server_url,
    setup_django,
    snapshot_chains,
    with_db,
)

NAME = "e3_purchase"
DB_NAME = "ldpbench_e3"
N_VALUES = tuple(int(float(x)) for x in os.environ.get("E3_N", "1e4,1e5,1e6").split(","))
DEFAULT_ROUNDS = {10**4: 5, 10**5: 3, 10**6: 2, 10**7: 1}  # 10^7: one round takes tens of minutes
ROUNDS = {n: int(os.environ.get("E3_ROUNDS", DEFAULT_ROUNDS.get(n, 2))) for n in N_VALUES}
PROFILE_N = int(float(os.environ.get("E3_PROFILE_N", "1e5")))
MAX_SECONDS = float(os.environ.get("E3_MAX_SECONDS", "600"))
EPSILON = "0.35"  # between the grid points 0.3 and 0.4: every value is bridged
CEILING = "1.0"
GRID_POINTS = 10  # 0.1 .. 1.0
TARGET = 0.30
LINEAR_FACTOR = 1.5  # "linear in n": per-value time at the largest n <= 1.5x that at the smallest
FULL_CHAINS = "e3_chain_full"
CREDIT_PER_VALUE = Decimal("0.01")  # more than the price at 0.35 (0.0035)


# --------------------------------------------------------------------------- database and Django

# --------------------------------------------------------------------------- set-up (untimed)

def _setup(n: int) -> int:
    """n values with chains stored at 0.1 .. 1.0, the platform's and the attribute's pending-earnings accounts, the
    snapshot to reset to; the attribute id."""
    from django.db import connection

    from accounts.models import MoneyAccount
    from market.tasks import extend_chains

    from . import e2_extension as e2

    # n owners, values (inputs sealed), budgets (ceiling 1.0), chain blocks with one sealed point row each at 0.1
    # (it truncates the users, and with them every money account, purchase and ledger release row)
    attribute_id = e2._make_values(n)
    extended = extend_chains.apply(args=[attribute_id]).get()
    if extended != n:
        raise RuntimeError(f"extend_chains extended {extended} values, expected {n}")
    snapshot_chains(FULL_CHAINS)
    stats = chain_stats(attribute_id)
    ceiling = int(Decimal(CEILING) * 1_000_000)
    if stats["values"] != n or stats["points"] != (GRID_POINTS, GRID_POINTS) or stats["heads"] != (ceiling, ceiling):
        raise RuntimeError(f"chains after set-up: {stats}")
    # Sales before: the platform's account and the attribute's pending-earnings account exist (a purchase would
    # create them; the set-based reference needs them).  The owners' own accounts play no part in a purchase.
    MoneyAccount.objects.get_or_create(user=None, kind=MoneyAccount.Kind.PLATFORM)
    MoneyAccount.objects.get_or_create(user=None, kind=MoneyAccount.Kind.OWNERS_PENDING, shard=attribute_id)
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE accounts_moneyaccount")
    return attribute_id


def _reset() -> None:
    """Chains back to 0.1 .. 1.0 (chain points re-filled from the snapshot, block heads and revisions put back)
    and chain_loss back to 0: every timed run starts alike."""
    restore_chains(FULL_CHAINS)


_buyers = 0


def _new_buyer(n: int):
    """A fresh buyer (no holdings: no upgrade credit) with enough credit for n values."""
    global _buyers
    _buyers += 1
    return funded_buyer(f"e3-buyer-{n}-{_buyers}-{time.monotonic_ns()}", CREDIT_PER_VALUE * n)


# --------------------------------------------------------------------------- the limit

LIMIT_SQL = ("UPDATE accounts_budgetaccount SET chain_loss = GREATEST(chain_loss, %s), updated_at = now() "
             "WHERE value_id IN (SELECT id FROM market_value WHERE attribute_id = %s)")
#: The limit's two plans: as PostgreSQL plans it, and as index probes (``storage.index_probes``, the plan the
#: purchase's own budget update runs with).  The limit of a round is the faster.
LIMIT_PLANS = ("as_planned", "index_probes")


def _time_limit(attribute_id: int, n: int, plan: str) -> float:
    from django.db import connection, transaction

    from ldpmarket import storage

    start = time.perf_counter()
    with transaction.atomic(), connection.cursor() as c:
        if plan == "index_probes":
            with storage.index_probes():
                c.execute(LIMIT_SQL, [Decimal(EPSILON), attribute_id])
        else:
            c.execute(LIMIT_SQL, [Decimal(EPSILON), attribute_id])
        rows = c.rowcount
    seconds = time.perf_counter() - start
    if rows != n:
        raise RuntimeError(f"the limit updated {rows} rows, expected {n}")
    return seconds


# --------------------------------------------------------------------------- reference bound (not a target)

PRICE = (Decimal(EPSILON) / 100).quantize(Decimal("0.0001"))  # per value, default policy: 0.01 at epsilon 1
OWNER_SHARE = PRICE * Decimal("0.8")
MONEY_UNITS = 10_000  # money in integer units of 1/10000 (the compact ledger's earnings)


def _time_writes_alone(attribute_id: int, n: int) -> tuple[float, float]:
    """The rows a purchase of the n values must write, written by plain set-based SQL (a reference).

    One transaction: the limit's budget UPDATE; one new chain point row per block at e (bitmap and sealed
    outputs of the size of the block's head row, as the bridge adds: ``chainstore.store``); one ledger block and
    one compact release row per chain block (``accounts_ledgerrelease``, as
    ``accounts.ledger.hashchain._insert_releases`` writes: the block's values' ids, owners, chain loss 0 -> e, one-shot
    loss unchanged, ceilings and the owners' earnings as ``array_agg`` in value-id order); the 3 money movements (the
    buyer debited the price, the attribute's pending-earnings account credited the owners' total share, the platform its
    fee: balances and entries); the outputs in chunks of ``market.purchases.execution.CHUNK`` -- each an
    ``INSERT ... SELECT`` or ``UPDATE`` over the attribute's values.  Nothing is read into Python, locked beforehand,
    hashed or computed.  The deferred foreign-key checks run (``SET CONSTRAINTS ALL IMMEDIATE``), then the transaction
    is rolled back so every round starts alike; the commit's own WAL flush is the only cost not timed.  Returns the
    seconds of it all and of the foreign-key checks alone.

    The checks alone are a bound on any implementation of these rows: the server checks each inserted row's
    foreign keys once, however the client inserts it (``INSERT ... SELECT`` here, binary COPY in the service).
    """
    from django.conf import settings
    from django.db import connection, transaction

    from ldpmarket.keys import newest_value_key_id
    from market.models import Attribute, Purchase
    from market.purchases.execution import CHUNK

    attribute = Attribute.objects.get(id=attribute_id)
    buyer = _new_buyer(n)
    checkpoint()
    values = "SELECT id, owner_id FROM market_value WHERE attribute_id = %(a)s"
    start = time.perf_counter()
    try:
        with transaction.atomic(), connection.cursor() as c:
            purchase = Purchase.objects.create(buyer=buyer, attribute=attribute, epsilon=Decimal(EPSILON),
                                               idempotency_key=f"e3-floor-{buyer.id}", request_hash="-")
            p = {"a": attribute_id, "e": Decimal(EPSILON), "buyer": buyer.id, "purchase": purchase.id,
                 "chunk": CHUNK, "e_micro": int(Decimal(EPSILON) * 1_000_000),
                 "head": int(Decimal(CEILING) * 1_000_000), "share_units": int(OWNER_SHARE * MONEY_UNITS),
                 "price": PRICE * n, "shares": OWNER_SHARE * n, "fee": (PRICE - OWNER_SHARE) * n,
                 "key_id": newest_value_key_id()}
            # one new sealed point row per block at e (the size of the head row's: as many slots, as many bytes)
            c.execute("INSERT INTO market_chainpoint (block_id, attribute_id, epsilon, present, sealed, revision, "
                      "value_key_id) SELECT h.block_id, h.attribute_id, %(e_micro)s, h.present, h.sealed, 0, "
                      "h.value_key_id "
                      "FROM market_chainpoint h JOIN market_chainblock b ON b.id = h.block_id "
                      "WHERE b.attribute_id = %(a)s AND h.epsilon = %(head)s", p)
            chains = c.rowcount
            c.execute("UPDATE accounts_budgetaccount SET chain_loss = GREATEST(chain_loss, %(e)s), updated_at = now() "
                      "WHERE value_id IN (SELECT id FROM market_value WHERE attribute_id = %(a)s)", p)
            c.execute("INSERT INTO accounts_ledgerblock (shard, prev_hash, hash, entry_count, created_at) "
                      "VALUES (%s, md5(random()::text) || md5(random()::text), "
                      "md5(random()::text) || md5(random()::text), %s, now()) RETURNING id", [attribute_id, n])
            p["block"] = c.fetchone()[0]
            # one compact release row per chain block: the block's values in value-id order, at their positions
            c.execute("INSERT INTO accounts_ledgerrelease (block_id, position, shard, purchase_id, chain_block_id, "
                      "kind, guarantee, epsilon, created_at, count, first_value, last_value, value_ids, owner_ids, "
                      "chain_before, chain_after, oneshot_before, oneshot_after, ceiling, earnings) "
                      "SELECT %(block)s, min(pos), %(a)s, %(purchase)s, block_id, 'chain_release', '', %(e)s, now(), "
                      "count(*), min(id), max(id), array_agg(id ORDER BY id), array_agg(owner_id ORDER BY id), "
                      "array_agg(0::bigint ORDER BY id), array_agg(%(e_micro)s::bigint ORDER BY id), "
                      "array_agg(ob ORDER BY id), array_agg(ob ORDER BY id), array_agg(ceil ORDER BY id), "
                      "array_agg(%(share_units)s::bigint ORDER BY id) "
                      "FROM (SELECT v.id, v.owner_id, v.block_id, row_number() OVER (ORDER BY v.id) - 1 AS pos, "
                      "round(b.oneshot_loss * 1000000)::bigint AS ob, round(b.ceiling * 1000000)::bigint AS ceil "
                      "FROM market_value v JOIN accounts_budgetaccount b ON b.value_id = v.id "
                      "WHERE v.attribute_id = %(a)s) t GROUP BY block_id", p)
            releases = c.rowcount
            # 3 money movements: the buyer's debit, the owners' total share to the attribute's pending account,
            # the platform's fee (balances and entries)
            c.execute("WITH moved AS (UPDATE accounts_moneyaccount SET balance = balance + CASE kind "
                      "WHEN 'platform' THEN %(fee)s WHEN 'owners_pending' THEN %(shares)s ELSE -%(price)s END "
                      "WHERE (user_id = %(buyer)s AND kind = 'buyer_credit') OR kind = 'platform' "
                      "OR (kind = 'owners_pending' AND shard = %(a)s) RETURNING id, kind, balance) "
                      "INSERT INTO accounts_moneyentry (account_id, purchase_id, amount, balance_after, kind, memo, "
                      "created_at) SELECT id, %(purchase)s, CASE kind WHEN 'platform' THEN %(fee)s "
                      "WHEN 'owners_pending' THEN %(shares)s ELSE -%(price)s END, balance, CASE kind "
                      "WHEN 'platform' THEN 'fee' WHEN 'owners_pending' THEN 'earning' ELSE 'purchase' END, CASE kind "
                      "WHEN 'platform' THEN 'platform fee' WHEN 'owners_pending' THEN 'owners'' shares, to settle' "
                      "ELSE 'purchase' END, now() FROM moved", p)
            money = c.rowcount
            c.execute("INSERT INTO market_purchasechunk (purchase_id, attribute_id, seq, count, value_ids, outputs, "
                      "value_key_id) "
                      "SELECT %(purchase)s, %(a)s, k, count(*), string_agg(int8send(id), ''::bytea ORDER BY id), "
                      "string_agg('\\x0000'::bytea, ''::bytea), %(key_id)s "
                      f"FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / %(chunk)s AS k FROM ({values}) v) t "
                      "GROUP BY k", p)
            checks = time.perf_counter()
            c.execute("SET CONSTRAINTS ALL IMMEDIATE")
            end = time.perf_counter()
            # untimed: what was written
            c.execute("SELECT count(*), coalesce(sum(count), 0), coalesce(sum(cardinality(owner_ids)), 0) "
                      "FROM accounts_ledgerrelease WHERE purchase_id = %s", [purchase.id])
            _, released, owners = c.fetchone()
            c.execute("SELECT a.kind, e.amount FROM accounts_moneyentry e JOIN accounts_moneyaccount a "
                      "ON a.id = e.account_id WHERE e.purchase_id = %s", [purchase.id])
            moves = dict(c.fetchall())
            blocks = -(-n // settings.LDP_CHAIN_BLOCK)
            want = {"buyer_credit": -p["price"], "owners_pending": p["shares"], "platform": p["fee"]}
            if (chains, releases, released, owners, money) != (blocks, blocks, n, n, 3) or moves != want:
                raise RuntimeError(f"writes alone: {chains} chain points, {releases} release rows of {released} "
                                   f"values and {owners} owners, {money} money entries {moves}; expected {blocks} "
                                   f"points, {blocks} release rows of {n} values and owners, 3 money entries {want}")
            raise _RollBack(end - start, end - checks)
    except _RollBack as done:
        return done.seconds, done.fk_seconds


class _RollBack(Exception):
    """Leaves the writes-alone transaction (rolled back) carrying its timings."""

    def __init__(self, seconds: float, fk_seconds: float):
        self.seconds, self.fk_seconds = seconds, fk_seconds


# --------------------------------------------------------------------------- the purchase, in phases

#: (module, class or None, function, label): what purchase_execute calls, in the order it calls them.
PROBES = [
    ("market.purchases.releases", None, "candidates", "lock + read budgets (candidates)"),
    ("market.chains.store", None, "lock", "chain lock (chainstore.lock)"),
    ("market.chains.store", None, "read", "read blocks + bitmaps (chainstore.read)"),
    ("market.chains.store", None, "neighbours", "open neighbours of e (chainstore.neighbours)"),
    ("market.purchases.releases", None, "_inputs_for_extension", "inputs for extension"),
    ("market.chains.sets", None, "at", "bridge (chainsets.at)"),
    ("market.purchases.releases", None, "held_epsilons", "holdings derived (held_epsilons)"),
    ("accounts.money.purchase", None, "_lock_money", "money accounts (_lock_money)"),
    ("market.chains.store", None, "store", "seal + write points (chainstore.store)"),
    ("market.purchases.releases", None, "_raise_chain_loss", "update budgets (_raise_chain_loss)"),
    ("market.purchases.execution", None, "move_money", "money movements (move_money)"),
    ("market.purchases.execution", None, "_write_chunks", "write outputs (_write_chunks)"),
    ("accounts.ledger.hashchain", None, "append", "ledger block + compact rows (ledger.append)"),
    ("ldpmarket.storage", None, "check_deferred_constraints", "deferred row checks (check_deferred_constraints)"),
    ("market.purchases.execution", None, "credit_platform", "platform fee (credit_platform)"),
]
#: Names of the gaps between consecutive probes (inline code of purchase_execute), by the probe that follows.
GAPS = {
    "lock + read budgets (candidates)": "lock purchase row",
}


class _Probes:
    """perf_counter probes around the functions ``purchase_execute`` calls (outermost calls only)."""

    def __init__(self):
        self.events: list[tuple[str, float, float]] = []
        self._undo = []
        self._depth = 0
        self.current: str | None = None  # the outermost probed function running now

    def _wrap(self, func, label):
        def timed(*args, **kwargs):
            self._depth += 1
            if self._depth == 1:
                self.current = label
            start = time.perf_counter()
            ok = False
            try:
                result = func(*args, **kwargs)
                ok = True
                return result
            finally:
                end = time.perf_counter()
                self._depth -= 1
                if self._depth == 0:
                    self.events.append((label, start, end))
                    if ok:  # an exception (e.g. the watchdog's cancel) leaves the label of where it happened
                        self.current = None
        return timed

    def install(self) -> None:
        import importlib

        for module_name, cls_name, name, label in PROBES:
            owner = importlib.import_module(module_name)
            if cls_name:
                owner = getattr(owner, cls_name)
                original = owner.__dict__[name]  # the classmethod object
                setattr(owner, name, classmethod(self._wrap(original.__func__, label)))
            else:
                original = getattr(owner, name)
                setattr(owner, name, self._wrap(original, label))
            self._undo.append((owner, name, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def phases(self, t_start: float, t_end: float) -> dict[str, float]:
        """Seconds per phase, the gaps between probes named, the tail = save + commit."""
        out: dict[str, float] = {}
        last = t_start
        for label, start, end in self.events:
            gap = start - last
            if gap > 0:
                name = GAPS.get(label, f"inline before {label.split(' (')[0]}")
                out[name] = out.get(name, 0.0) + gap
            out[label] = out.get(label, 0.0) + end - start
            last = end
        out["save purchase + commit"] = t_end - last
        return out


class _Watchdog:
    """Cancels the backend's running statement after ``seconds`` (a time bound on one purchase).

    When it fires it first reads the statement running then (``pg_stat_activity``), so the report can
    say where the purchase was stuck.
    """

    def __init__(self, seconds: float):
        import threading

        from django.db import connection

        connection.ensure_connection()
        self.pid = connection.connection.info.backend_pid
        self.dsn = _dsn()
        self.fired = False
        self.query: str | None = None
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            row = c.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [self.pid]).fetchone()
            self.query = row[0] if row else None
            self.fired = True
            c.execute("SELECT pg_cancel_backend(%s)", [self.pid])

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()
        return False


def _dsn() -> str:
    from django.db import connection

    d = connection.settings_dict
    auth = d["USER"] + (f":{d['PASSWORD']}" if d["PASSWORD"] else "")
    return f"postgresql://{auth}@{d['HOST'] or 'localhost'}:{d['PORT'] or 5432}/{d['NAME']}"


class _HeldSettlements:
    """Holds back the owners' settlement a purchase enqueues on commit (``jobs.SETTLE_EARNINGS``): with this
    set-up's eager Celery it would run in-process, inside ``purchase_execute``'s commit, and be timed as part of
    the purchase, which it is not (owners are paid later, in batches).  Other tasks are sent as usual."""

    def __init__(self):
        self.held: list[tuple] = []
        self._original = None

    def __enter__(self):
        from ldpmarket import jobs

        self._original = original = jobs.enqueue

        def enqueue(task_name, *args):
            if task_name == jobs.SETTLE_EARNINGS:
                self.held.append(args)
                return
            original(task_name, *args)

        jobs.enqueue = enqueue
        return self

    def __exit__(self, *exc):
        from ldpmarket import jobs

        jobs.enqueue = self._original
        return False


def _run_purchase(attribute_id: int, n: int, *, probes: bool = True, profile: cProfile.Profile | None = None,
                  time_bound: float | None = None) -> dict:
    """One purchase, timed; with ``time_bound`` it is cancelled (rolled back) if it runs longer."""
    import psycopg
    from django.db import OperationalError

    from market.models import Attribute, Purchase
    from market.purchases.execution import purchase_claim, purchase_execute

    buyer = _new_buyer(n)
    attribute = Attribute.objects.get(id=attribute_id)
    pr = _Probes()
    settlements = _HeldSettlements()
    if probes:
        pr.install()
    watchdog = _Watchdog(time_bound) if time_bound else None
    try:
        with settlements:
            if watchdog:
                watchdog.__enter__()
            start = time.perf_counter()
            if profile is not None:
                profile.enable()
            claimed, created = purchase_claim(buyer=buyer, attribute=attribute, epsilon=EPSILON, cohort=None,
                                              idempotency_key=f"e3-{buyer.id}")
            claim_end = time.perf_counter()
            try:
                purchase = purchase_execute(purchase_id=claimed.id)
            except (OperationalError, psycopg.OperationalError):  # cancelled: in Django's cursor or a raw COPY
                if watchdog is None or not watchdog.fired:
                    raise
                stuck = pr.current or "inline code of purchase_execute or COMMIT"
                elapsed = time.perf_counter() - start
                return {"timed_out": True, "seconds": elapsed, "stuck_in": stuck, "stuck_query": watchdog.query,
                        "phases": None}
            finally:
                if profile is not None:
                    profile.disable()
            end = time.perf_counter()
    finally:
        if watchdog:
            watchdog.__exit__()
        pr.restore()
    if not created or purchase.status != Purchase.Status.COMPLETED:
        raise RuntimeError(f"purchase not completed: {purchase.status} {purchase.error}")
    if purchase.included != n or purchase.new_points != n:
        raise RuntimeError(f"purchase included {purchase.included} and bridged {purchase.new_points}, expected {n}")
    want_price = PRICE * n
    if purchase.price != want_price:
        raise RuntimeError(f"purchase price {purchase.price}, expected {want_price}")
    if settlements.held != [(attribute_id,)]:
        raise RuntimeError(f"the purchase enqueued the settlements {settlements.held}, expected one of {attribute_id}")
    phases = None
    if probes:
        phases = {"purchase_claim": claim_end - start}
        phases.update(pr.phases(claim_end, end))
    return {"timed_out": False, "seconds": end - start, "claim_seconds": claim_end - start,
            "purchase_id": purchase.id, "phases": phases}


def _check(attribute_id: int, n: int, purchase_id: int) -> None:
    """After a purchase: every budget at 0.35, every chain one point longer, one ledger entry per value (through
    the per-value view) in one compact release row per chain block carrying each owner's share, and 3 money
    entries netting to zero, the attribute's pending account credited the owners' total share."""
    from django.conf import settings
    from django.db import connection

    blocks = -(-n // settings.LDP_CHAIN_BLOCK)
    with connection.cursor() as c:
        c.execute("SELECT count(*), min(chain_loss), max(chain_loss) FROM accounts_budgetaccount b "
                  "JOIN market_value v ON v.id = b.value_id WHERE v.attribute_id = %s", [attribute_id])
        count, lo, hi = c.fetchone()
        assert count == n and lo == hi == Decimal(EPSILON), (count, lo, hi)
        # every chain one point longer: one new row per block at e, every used slot present in it
        c.execute("SELECT count(*), sum(bit_count(p.present)), sum(b.size) FROM market_chainpoint p "
                  "JOIN market_chainblock b ON b.id = p.block_id WHERE b.attribute_id = %s AND p.epsilon = %s",
                  [attribute_id, int(Decimal(EPSILON) * 1_000_000)])
        rows, present, used = c.fetchone()
        assert rows == blocks and present == used == n, (rows, present, used)
        c.execute("SELECT count(*), count(DISTINCT value_id), sum(earning) FROM accounts_ledgerentry "
                  "WHERE purchase_id = %s", [purchase_id])
        entries, distinct, earned = c.fetchone()
        assert entries == distinct == n and earned == OWNER_SHARE * n, (entries, distinct, earned)
        c.execute("SELECT count(*), sum(count) FROM accounts_ledgerrelease WHERE purchase_id = %s", [purchase_id])
        releases, released = c.fetchone()
        assert releases == blocks and released == n, (releases, released)
        c.execute("SELECT count(*), sum(amount), sum(amount) FILTER (WHERE a.kind = 'owners_pending' "
                  "AND a.shard = %s), count(*) FILTER (WHERE a.kind = 'owner_earnings') "
                  "FROM accounts_moneyentry e JOIN accounts_moneyaccount a ON a.id = e.account_id "
                  "WHERE e.purchase_id = %s", [attribute_id, purchase_id])
        money, total, pending, owners = c.fetchone()
        assert money == 3 and total == 0 and pending == OWNER_SHARE * n and owners == 0, (money, total, pending, owners)


# --------------------------------------------------------------------------- profile

DEFERRED_SQL = """
SELECT c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text
  FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
 WHERE c.contype = 'f' AND c.condeferred
   AND c.conrelid::regclass::text IN ('accounts_ledgerrelease', 'accounts_ledgerevent', 'accounts_moneyentry',
                                      'market_purchasechunk')
 ORDER BY 1, 2"""


def _profile(attribute_id: int, n: int, top: int = 18) -> dict:
    """One untimed purchase under cProfile: the functions with the most own time, and key cumulative times.

    The purchase runs its deferred row checks itself after its last row write (``storage.check_deferred_constraints``,
    before crediting the platform); they are timed on their own here as well (wall time, under the profiler).
    """
    from django.db import connection

    from ldpmarket import storage

    _reset()
    prof = cProfile.Profile()
    original = storage.check_deferred_constraints
    deferred = {"seconds": 0.0}

    def timed_check(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            deferred["seconds"] += time.perf_counter() - start

    storage.check_deferred_constraints = timed_check
    try:
        run = _run_purchase(attribute_id, n, probes=False, profile=prof)
    finally:
        storage.check_deferred_constraints = original
    with connection.cursor() as c:
        c.execute(DEFERRED_SQL)
        constraints = [f"{t}.{col} -> {ref}" for t, col, ref in c.fetchall()]
    stats = pstats.Stats(prof)
    total = run["seconds"]
    rows = []
    for (filename, line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():
        rows.append({"function": f"{_short_path(filename)}:{line}({func})", "calls": nc, "tottime": tt,
                     "cumtime": ct})
    by_own = sorted(rows, key=lambda r: -r["tottime"])[:top]
    wanted = ("execution.py", "releases.py", "sets.py", "store.py", "sealing.py", "storage.py", "hashchain.py",
              "pricing.py", "purchase.py")
    by_cum = sorted((r for r in rows if any(w in r["function"] for w in wanted)), key=lambda r: -r["cumtime"])[:top]
    return {"n": n, "seconds_under_profile": total, "top_own_time": by_own, "top_cumulative_in_service": by_cum,
            "deferred_fk_check_seconds": deferred.get("seconds"), "deferred_fk_constraints": constraints}


def _short_path(filename: str) -> str:
    for marker in ("/site-packages/", "/work/main/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.rsplit("/", 1)[-1] if "/" in filename else filename


# --------------------------------------------------------------------------- main

def measure(n: int, rounds: int) -> dict:
    t0 = time.perf_counter()
    attribute_id = _setup(n)
    print(f"  set up n={_common.pow10(n)}: values, budgets, chains extended to {CEILING} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    limit_best, purchase_best, runs = float("inf"), float("inf"), []
    limit_plans = dict.fromkeys(LIMIT_PLANS, float("inf"))
    writes_best = fk_best = float("inf")
    timed_out = None
    for r in range(rounds):
        for plan in LIMIT_PLANS:
            _reset()
            limit_plans[plan] = min(limit_plans[plan], _time_limit(attribute_id, n, plan))
        limit_best = min(limit_plans.values())
        _reset()
        writes, fk = _time_writes_alone(attribute_id, n)
        writes_best, fk_best = min(writes_best, writes), min(fk_best, fk)
        _reset()
        run = _run_purchase(attribute_id, n, time_bound=MAX_SECONDS)
        if run["timed_out"]:
            timed_out = run
            print(f"  n={_common.pow10(n)} round {r + 1}/{rounds}: limit {n / limit_best:,.0f} rows/s best; purchase "
                  f"CANCELLED after {run['seconds']:.0f} s (E3_MAX_SECONDS), stuck in {run['stuck_in']}", flush=True)
            break
        _check(attribute_id, n, run["purchase_id"])
        runs.append(run)
        purchase_best = min(purchase_best, run["seconds"])
        plans = ", ".join(f"{plan.replace('_', ' ')} {n / secs:,.0f}" for plan, secs in limit_plans.items())
        print(f"  n={_common.pow10(n)} round {r + 1}/{rounds}: limit {n / limit_best:,.0f} rows/s best ({plans}), "
              f"writes alone "
              f"{n / writes_best:,.0f} values/s best, purchase {n / run['seconds']:,.0f} values/s "
              f"({run['seconds']:.2f} s)", flush=True)
    out = {"n": n, "rounds": rounds, "attribute_id": attribute_id, "limit_seconds": limit_best,
           "limit_rows_per_second": n / limit_best, "limit_us_per_row": 1e6 * limit_best / n,
           "limit_plan": min(limit_plans, key=limit_plans.get),
           "limit_us_per_row_by_plan": {plan: 1e6 * secs / n for plan, secs in limit_plans.items()},
           "reference_writes_alone_seconds": writes_best,
           "reference_writes_alone_ratio_to_limit": limit_best / writes_best,
           "reference_fk_checks_seconds": fk_best, "reference_fk_checks_ratio_to_limit": limit_best / fk_best}
    if not runs:  # did not finish within the time bound: a lower bound on its time
        secs = timed_out["seconds"]
        out.update({
            "finished": False, "purchase_seconds": None, "purchase_seconds_at_least": secs,
            "purchase_values_per_second": None, "purchase_values_per_second_at_most": n / secs,
            "us_per_value": None, "us_per_value_at_least": 1e6 * secs / n,
            "ratio_to_limit": None, "ratio_to_limit_at_most": limit_best / secs, "pass": False,
            "stuck_in": timed_out["stuck_in"], "stuck_query": timed_out["stuck_query"], "phases_best_round": {}})
        return out
    best = min(runs, key=lambda run: run["seconds"])
    out.update({
        "finished": True, "purchase_seconds": purchase_best, "purchase_values_per_second": n / purchase_best,
        "us_per_value": 1e6 * purchase_best / n, "ratio_to_limit": limit_best / purchase_best,
        "ratio_to_writes_alone": writes_best / purchase_best,
        "pass": limit_best / purchase_best >= TARGET,
        "purchase_seconds_all_rounds": [run["seconds"] for run in runs],
        "phases_best_round": best["phases"],
        "rounds_cancelled": 1 if timed_out else 0,
    })
    return out


def main() -> dict:
    t0 = time.perf_counter()
    info = _common.machine_info()
    _common.print_machine(info)
    server = server_url("E3_POSTGRES_URL", "E2_POSTGRES_URL")

    db_url = with_db(server, DB_NAME)
    print(f"E3 purchase on PostgreSQL (database {DB_NAME} on {urlsplit(server).hostname}): purchase_claim + "
          f"purchase_execute of n values at epsilon {EPSILON} (every value bridged between 0.3 and 0.4; budgets, "
          f"ledger, money, outputs); beside it a set-based UPDATE of the same n budget rows (the "
          f"limit); rounds interleaved, best of {', '.join(f'{_common.pow10(n)}: {ROUNDS[n]}' for n in N_VALUES)}",
          flush=True)
    admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    admin(server, f"CREATE DATABASE {DB_NAME}")
    results, skipped, profile = [], [], None
    try:
        setup_django(db_url, DB_NAME)
        from django.db import connection

        with connection.cursor() as c:
            c.execute("SELECT version()")
            pg_version = c.fetchone()[0]
        for n in N_VALUES:
            rounds = ROUNDS[n]
            if results and not results[-1]["finished"]:
                note = (f"n={_common.pow10(n)} NOT MEASURED: n={_common.pow10(results[-1]['n'])} did not finish within "
                        f"E3_MAX_SECONDS = {MAX_SECONDS:.0f} s")
                print("  " + note, flush=True)
                skipped.append({"n": n, "predicted_seconds": None, "note": note})
                continue
            if results:  # predict from the largest size measured so far (linear in n)
                prev = results[-1]
                predicted = prev["purchase_seconds"] * n / prev["n"]
                if predicted > 2 * MAX_SECONDS:
                    note = (f"n={_common.pow10(n)} NOT MEASURED: a purchase is predicted to take {predicted:.0f} s "
                            f"(> 2 x E3_MAX_SECONDS = {2 * MAX_SECONDS:.0f} s)")
                    print("  " + note, flush=True)
                    skipped.append({"n": n, "predicted_seconds": predicted, "note": note})
                    continue
                if predicted * rounds > MAX_SECONDS and rounds > 1:
                    print(f"  n={_common.pow10(n)}: a purchase is predicted to take {predicted:.0f} s; one round only "
                          f"(E3_MAX_SECONDS = {MAX_SECONDS:.0f} s)", flush=True)
                    rounds = 1
            results.append(measure(n, rounds))
            if n == PROFILE_N:
                profile = _profile(results[-1]["attribute_id"], n)
        if profile is None and results and PROFILE_N > 0:  # the profile size was not run: profile the smallest
            profile = _profile(_setup(results[0]["n"]), results[0]["n"])
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # pragma: no cover - Django never set up
            pass
        admin(server, f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    print(flush=True)

    base_us = results[0]["us_per_value"] or float("nan")  # None if even the smallest did not finish

    def row(r):
        writes = [_common.si(r["n"] / r["reference_writes_alone_seconds"], "/s"),
                  f"{100 * r['reference_writes_alone_ratio_to_limit']:.1f}%",
                  f"{100 * r['reference_fk_checks_ratio_to_limit']:.1f}%"]
        if r["finished"]:
            return [_common.pow10(r["n"]), _common.si(r["purchase_values_per_second"], "/s"),
                    f"{r['purchase_seconds']:.3f}", f"{r['us_per_value']:.2f}", f"{r['us_per_value'] / base_us:.2f}",
                    _common.si(r["limit_rows_per_second"], "/s"), f"{r['limit_seconds']:.3f}",
                    f"{100 * r['ratio_to_limit']:.1f}%", "PASS" if r["pass"] else "FAIL", *writes,
                    f"{100 * r['ratio_to_writes_alone']:.0f}%"]
        return [_common.pow10(r["n"]), "<= " + _common.si(r["purchase_values_per_second_at_most"], "/s"),
                f">= {r['purchase_seconds_at_least']:.0f} (cancelled)", f">= {r['us_per_value_at_least']:.0f}",
                f">= {r['us_per_value_at_least'] / base_us:.2f}", _common.si(r["limit_rows_per_second"], "/s"),
                f"{r['limit_seconds']:.3f}", f"<= {100 * r['ratio_to_limit_at_most']:.2f}%", "FAIL", *writes, "-"]

    _common.print_table(
        ["n", "purchase values/s", "purchase s", "us/value", "x us/value at " + _common.pow10(results[0]["n"]),
         "limit rows/s", "limit s", "of limit", ">= 30%", "writes alone values/s", "writes alone of limit",
         "FK checks alone of limit", "purchase of writes alone"],
        [row(r) for r in results] + [[_common.pow10(s["n"]), s["note"]] for s in skipped],
        title=f"E3 purchase: values per second of purchase_claim + purchase_execute (bridging at {EPSILON}, ledger, "
              f"money) vs a set-based UPDATE of the same budget rows (the limit); reference bound, not a target: "
              f"the rows a purchase writes, written by set-based SQL alone; best of the rounds; PostgreSQL "
              f"{pg_version.split()[1]}")
    finished = [r for r in results if r["finished"]]
    phase_names: list[str] = []
    for r in finished:  # (nothing printed when no size finished)
        for p in r["phases_best_round"]:
            if p not in phase_names:
                phase_names.append(p)
    if finished:
        _common.print_table(
            ["phase (best round)"] + [_common.pow10(r["n"]) for r in finished]
            + ["us/value at " + _common.pow10(finished[-1]["n"])],
            [[p] + [f"{r['phases_best_round'].get(p, 0.0):.3f} s "
                    f"({100 * r['phases_best_round'].get(p, 0.0) / r['purchase_seconds']:.0f}%)" for r in finished]
             + [f"{1e6 * finished[-1]['phases_best_round'].get(p, 0.0) / finished[-1]['n']:.2f}"]
             for p in phase_names],
            title="Where a purchase's time goes (perf_counter probes around the functions purchase_execute calls)")
    if profile:
        _common.print_table(
            ["function (own time)", "calls", "own s", "share", "cum s"],
            [[r["function"], f"{r['calls']:,}", f"{r['tottime']:.3f}",
              f"{100 * r['tottime'] / profile['seconds_under_profile']:.1f}%", f"{r['cumtime']:.3f}"]
             for r in profile["top_own_time"]],
            title=f"cProfile of one purchase at n={_common.pow10(profile['n'])} (untimed run, "
                  f"{profile['seconds_under_profile']:.2f} s under the profiler): most own time")
        _common.print_table(
            ["function in the service (cumulative)", "calls", "cum s", "share"],
            [[r["function"], f"{r['calls']:,}", f"{r['cumtime']:.3f}",
              f"{100 * r['cumtime'] / profile['seconds_under_profile']:.1f}%"]
             for r in profile["top_cumulative_in_service"]],
            title="... and the service's functions by cumulative time")
        print(f"Deferred row checks (storage.check_deferred_constraints: SET CONSTRAINTS ALL IMMEDIATE after the "
              f"purchase's last row write, before the platform's fee; same run): "
              f"{profile['deferred_fk_check_seconds']:.3f} s "
              f"({100 * profile['deferred_fk_check_seconds'] / profile['seconds_under_profile']:.0f}% of the "
              f"profiled purchase); in the timed runs they are the phase 'deferred row checks'.")
        print("Deferred FK constraints checked per inserted row (the ledger's compact release rows, one per chain "
              "block, and its budget events, which budget changes write, not purchases; the purchase's 3 money "
              "entries; its output chunks): "
              + ", ".join(profile["deferred_fk_constraints"]) + "\n", flush=True)

    small, big = results[0], results[-1]
    big_us = big["us_per_value"] if big["finished"] else big["us_per_value_at_least"]
    linear_factor = big_us / (small["us_per_value"] or float("nan"))
    linear = linear_factor <= LINEAR_FACTOR and big["finished"]
    print("Targets (docs/quality-targets.md#performance E3):")
    for r in results:
        if r["finished"]:
            print(f"{'PASS' if r['pass'] else 'FAIL':4}  purchase >= {TARGET:.0%} of the limit  "
                  f"n={_common.pow10(r['n'])}: "
                  f"{100 * r['ratio_to_limit']:.1f}% ({r['purchase_values_per_second']:,.0f} values/s vs "
                  f"{r['limit_rows_per_second']:,.0f} rows/s)")
        else:
            print(f"FAIL  purchase >= {TARGET:.0%} of the limit  n={_common.pow10(r['n'])}: DID NOT FINISH, "
                  f"cancelled after {r['purchase_seconds_at_least']:.0f} s in {r['stuck_in']} (<= "
                  f"{100 * r['ratio_to_limit_at_most']:.2f}%; limit {r['limit_rows_per_second']:,.0f} rows/s)")
    if len(results) > 1:
        print(f"{'PASS' if linear else 'FAIL':4}  linear in n                n={_common.pow10(small['n'])} -> "
              f"{_common.pow10(big['n'])}: time per value x{linear_factor:.2f}{'' if big['finished'] else ' at least'} "
              f"({small['us_per_value']:.2f} -> {'' if big['finished'] else '>= '}{big_us:.2f} us; "
              f"pass if <= x{LINEAR_FACTOR:g})")
    for r in results:
        print(f"REF   n={_common.pow10(r['n'])}: the purchase's writes by set-based SQL alone run at "
              f"{100 * r['reference_writes_alone_ratio_to_limit']:.1f}% of the limit; their foreign-key checks alone "
              f"at {100 * r['reference_fk_checks_ratio_to_limit']:.1f}% (references, not targets)")
    for s in skipped:
        print(f"NOTE  {s['note']}")
    elapsed = time.perf_counter() - t0
    result = {
        "machine": info,
        "config": {
            "n_values": list(N_VALUES), "rounds": {str(k): v for k, v in ROUNDS.items()}, "epsilon": EPSILON,
            "m": 5, "grid": "0.1 step 0.1, chains stored at 0.1 .. 1.0", "ceiling": CEILING,
            "price_policy": "default: points (0, 0), (1, 0.01), (10, 0.05); owner share 0.8",
            "owners": "one owner per value; a purchase records each value's owner share in its compact ledger rows "
                      "and credits their total to the attribute's owners_pending account (3 money entries per "
                      "purchase: buyer, pending, platform); owners are paid later in batches "
                      "(accounts.money.services.earnings_settle), not part of the purchase and not timed (the "
                      "settlement task the purchase enqueues is held back); the platform and pending accounts exist "
                      "beforehand",
            "target_ratio": TARGET, "linear_factor": LINEAR_FACTOR, "postgresql": pg_version,
            "purchase": "purchase_claim + purchase_execute (market.purchases), called directly, secure default "
                        "rng; a fresh buyer per run (no upgrade credit)",
            "limit": "UPDATE accounts_budgetaccount SET chain_loss = GREATEST(chain_loss, 0.35), updated_at = now() "
                     "WHERE value_id IN (SELECT id FROM market_value WHERE attribute_id = %s), with its commit, "
                     "timed twice per round (each after a reset): as PostgreSQL plans it, and planned as index "
                     "probes (storage.index_probes: no hash or merge join, the plan of the purchase's own budget "
                     "update); the limit is the faster (limit_plan, limit_us_per_row_by_plan)",
            "reference_writes_alone": "the purchase's rows written by set-based SQL in one transaction (one "
                                      "chain point row per block, budgets, a ledger block and one compact "
                                      "accounts_ledgerrelease row per chain block (array_agg of the block's values), "
                                      "3 money movements: buyer debit, owners_pending credit, platform fee; output "
                                      "chunks), deferred FK checks forced, then rolled back (the commit's WAL "
                                      "flush not timed)",
            "reset_before_each_timed_run": "market_chainpoint re-filled from a snapshot and market_chainblock heads "
                                           "and revisions put back, chain_loss = 0, VACUUM ANALYZE, "
                                           "CHECKPOINT",
            "max_seconds": MAX_SECONDS,
        },
        "results": results,
        "skipped": skipped,
        "linear_factor": linear_factor,
        "linear": linear,
        "profile": profile,
        "elapsed_seconds": elapsed,
    }
    path = _common.write_results(NAME, result)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return result


if __name__ == "__main__":
    main()
