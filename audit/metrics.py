"""The service's own metrics, computed from the database when scraped (docs/operations.md#metrics).

Purchases complete in Celery workers, on any host, and in web processes; a counter kept in each process would be
summed only over the processes of one host (prometheus-client's multiprocess mode) and lost with a process's
files.  The database holds every purchase, budget, ledger block and witness once, so each figure here is one
set-based query, exact, and the same whichever process answers the scrape: the completed purchases, values
released and revenue are the figures of the console's overview (``audit.overview``), the budget violations the
audit's rule ``0 <= loss <= ceiling`` (``audit.budgets``), the stranded purchases the sweeper's
(``market.sweeper``), the chains behind their ceiling the chain extension's (``market.chains.extension``), the
blocks awaiting a checkpoint the checkpoint task's (``accounts.ledger.checkpoints``).

:data:`SOURCES` names each query's metric families for ``ldpmarket.metrics.Scrape``, which times each one and
reports a failing one (``ldpmarket_collector_up``) without losing the others.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, Min, OuterRef, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from accounts.models import BudgetAccount, LedgerBlock, LedgerCheckpointLeaf, LedgerWitness
from accounts.money.units import money_total
from ldpmarket import storage
from market.models import Attribute, ChainBlock, Purchase, Value

from . import sql

# ------------------------------------------------------------------------------------------- the figures

def purchases_by_status() -> dict[tuple[str, str], dict]:
    """``(status, mechanism) -> {"count", "included", "price"}`` over every purchase, every status and mechanism
    present (absent ones are zero).  One ``GROUP BY``."""
    out = {(s, m): {"count": 0, "included": 0, "price": 0} for s in Purchase.Status.values
           for m in Purchase.Mechanism.values}
    rows = Purchase.objects.order_by().values("status", "mechanism").annotate(
        count=Count("id"), included=Sum("included"), price=Sum("price"))
    for r in rows:
        out[(r["status"], r["mechanism"])] = {"count": r["count"], "included": r["included"] or 0,
                                              "price": money_total(r["price"])}
    return out


def budget_violations() -> int:
    """Budget rows whose loss (``chain_loss + oneshot_loss``) exceeds their ceiling, compared exactly
    (``audit.sql.sum_exceeds``; the audit's rule ``0 <= loss <= ceiling``): the database's CHECK forbids them, so
    this must be 0.  One scan of the budget table."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {BudgetAccount._meta.db_table} "
                    f"WHERE {sql.sum_exceeds(['chain_loss', 'oneshot_loss'], 'ceiling')}")
        return int(cur.fetchone()[0])


def chains_behind_ceiling() -> int:
    """Values whose chain the extension would grow now: a gradual-release value whose input the service holds, with
    a chain (head > 0) below the last grid point within its ceiling (``Grid.last_point_upto``), as
    ``market.chains.extension`` decides.  One query: each value's head is read from its block's ``heads`` in SQL
    (each block's copied into memory once, ``storage.in_memory``), and only the heads travel on to the join with
    the budgets (``storage.unflattened``): 20 s at 10^6 values read naively, 2 s so (docs/operations.md#metrics)."""
    head = storage.int64_le_at("k.heads", "v.slot")
    blocks = storage.unflattened(f"SELECT id, {storage.in_memory('heads')} AS heads "
                                 f"FROM {ChainBlock._meta.db_table}")
    heads = storage.unflattened(f"SELECT v.id, v.attribute_id, {head} AS head FROM {Value._meta.db_table} v "
                                f"JOIN {blocks} k ON k.id = v.block_id WHERE v.input_sealed IS NOT NULL")
    start, step, stop = sql.micro("a.grid_start", None), sql.micro("a.grid_step", None), sql.micro("a.grid_stop", None)
    ceiling = sql.micro("b.ceiling", None)
    limit = f"(CASE WHEN {ceiling} < {stop} THEN {ceiling} ELSE {stop} END)"
    last_point = f"({start} + (({limit} - {start}) / {step}) * {step})"
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*) FROM {heads} x "
            f"JOIN {Attribute._meta.db_table} a ON a.id = x.attribute_id "
            f"JOIN {BudgetAccount._meta.db_table} b ON b.value_id = x.id "
            f"WHERE a.mechanism = %s AND x.head > 0 AND x.head < {last_point}",
            [Attribute.Mechanism.GRADUAL_RR.value])
        return int(cur.fetchone()[0])


def stranded_purchases(now: datetime | None = None) -> int:
    """Purchases the sweeper would send again or fail now (``market.sweeper.sweep_purchases``): pending or
    running, with a heartbeat older than ``LDP_STALE_AFTER_SECONDS``, and not held by a transaction (an executing
    purchase holds its row).  Read without taking a lock (``storage.row_not_held``)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.LDP_STALE_AFTER_SECONDS)
    with connection.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {Purchase._meta.db_table} p WHERE p.status IN (%s, %s) "
                    f"AND p.heartbeat_at < %s AND {storage.row_not_held('p')}",
                    [Purchase.Status.PENDING.value, Purchase.Status.RUNNING.value, cutoff])
        return int(cur.fetchone()[0])


def awaiting_checkpoint(now: datetime | None = None) -> tuple[int, float]:
    """The ledger blocks no checkpoint leaf names yet (``accounts.ledger.checkpoints.blocks_awaiting_checkpoint``)
    and the seconds since the oldest of them was written (0 when there is none)."""
    now = now or timezone.now()
    uncovered = LedgerBlock.objects.filter(~Exists(LedgerCheckpointLeaf.objects.filter(block_id=OuterRef("id"))))
    got = uncovered.order_by().aggregate(n=Count("id"), oldest=Min("created_at"))
    lag = max((now - got["oldest"]).total_seconds(), 0.0) if got["oldest"] else 0.0
    return got["n"], lag


def witnesses() -> list[tuple[str, int, int]]:
    """``(name, failures in a row, status of the latest submission or 0)`` of each witness the log submits to."""
    return [(name, failures, status or 0) for name, failures, status in
            LedgerWitness.objects.order_by("name").values_list("name", "failures", "last_status")]


# ------------------------------------------------------------------------------------------- metric families

def purchase_families() -> Iterable[Metric]:
    rows = purchases_by_status()
    purchases = GaugeMetricFamily(
        "ldpmarket_purchases_total",
        "Purchases (with one-shot purchases and surveys) by status now and mechanism: the purchase table. A "
        "completed purchase stays completed, so the completed series only grows.",
        labels=["status", "mechanism"])
    for (status, mechanism), r in rows.items():
        purchases.add_metric([status, mechanism], float(r["count"]))
    completed = [r for (status, _), r in rows.items() if status == Purchase.Status.COMPLETED]
    released = CounterMetricFamily("ldpmarket_values_released", "Values released by completed purchases (the sum "
                                   "of their included values; a survey's values too).",
                                   value=float(sum(r["included"] for r in completed)))
    revenue = CounterMetricFamily("ldpmarket_revenue", "What buyers paid for completed purchases, in the currency.",
                                  labels=["currency"])
    revenue.add_metric([settings.LDP_CURRENCY], float(sum(r["price"] for r in completed)))
    return [purchases, released, revenue]


def budget_families() -> Iterable[Metric]:
    return [GaugeMetricFamily("ldpmarket_budget_violations",
                              "Values whose loss (chain + one-shot) exceeds their ceiling. Must be 0.",
                              value=float(budget_violations()))]


def chain_families() -> Iterable[Metric]:
    return [GaugeMetricFamily("ldpmarket_chains_behind_ceiling",
                              "Values whose chain head is below the last grid point within their ceiling (the "
                              "chain extension would grow them now).", value=float(chains_behind_ceiling()))]


def stranded_families() -> Iterable[Metric]:
    return [GaugeMetricFamily("ldpmarket_stranded_purchases",
                              "Pending or running purchases nobody executes, heartbeat older than "
                              "LDP_STALE_AFTER_SECONDS: what the sweeper sends again.",
                              value=float(stranded_purchases()))]


def checkpoint_families() -> Iterable[Metric]:
    blocks, lag = awaiting_checkpoint()
    return [GaugeMetricFamily("ldpmarket_checkpoint_lag_seconds",
                              "Age of the oldest ledger block no signed checkpoint covers yet (0: none).", value=lag),
            GaugeMetricFamily("ldpmarket_blocks_awaiting_checkpoint",
                              "Ledger blocks no signed checkpoint covers yet.", value=float(blocks))]


def witness_families() -> Iterable[Metric]:
    failures = GaugeMetricFamily("ldpmarket_witness_failures_total",
                                 "Submissions to each witness that failed in a row (0 after one it cosigned).",
                                 labels=["witness"])
    status = GaugeMetricFamily("ldpmarket_witness_last_status",
                               "HTTP status of the latest submission to each witness (0: none, or no answer).",
                               labels=["witness"])
    for name, fails, last in witnesses():
        failures.add_metric([name], float(fails))
        status.add_metric([name], float(last))
    return [failures, status]


#: The collectors that scan every value (a budget row, a value and its block each): computed at most once per
#: ``LDP_METRICS_SCAN_INTERVAL_SECONDS`` and shared through the cache (``ldpmarket.metrics.Scrape``).
SCANS = ("budgets", "chains")

#: The database's figures, by collector name (``ldpmarket_collector_up{collector}``).
SOURCES = {
    "purchases": purchase_families,
    "budgets": budget_families,
    "chains": chain_families,
    "stranded": stranded_families,
    "checkpoints": checkpoint_families,
    "witnesses": witness_families,
}
