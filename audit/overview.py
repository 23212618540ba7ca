"""The console's overview page: counts, loss and ceiling histograms, purchases and revenue by day."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.db.models import Count, Sum
from django.db.models.functions import TruncDate

from accounts.epsilon import MICRO
from accounts.models import LedgerEntry
from accounts.money.units import money_total
from market.models import Attribute, Dataset, Purchase, Value

from .charts import budget_histograms_png, sales_png
from .tables import read_budgets


@dataclass
class Overview:
    stats: dict
    loss_png: bytes | None
    sales_png: bytes | None
    utilisation: list[tuple[str, int]]


def overview() -> Overview:
    """Figures for the console's overview page: counts, loss and ceiling histograms, purchases and revenue by day
    (``stats["revenue"]``: the exact Decimal with 4 places; the page shows it with its currency)."""
    b = read_budgets()
    loss = (b["chain"] + b["oneshot"]) / MICRO
    ceiling = b["ceiling"] / MICRO
    completed = Purchase.objects.filter(status=Purchase.Status.COMPLETED)
    totals = completed.aggregate(n=Count("id"), revenue=Sum("price"), released=Sum("included"))
    stats = {
        "datasets": Dataset.objects.count(), "attributes": Attribute.objects.count(),
        "values": Value.objects.count(),
        # the raw datum the service holds: never an owner-held value's, which stays on its device (docs/custody.md)
        "values with raw datum": Value.objects.filter(custody=Value.Custody.SERVICE,
                                                      raw_deleted_at__isnull=True).count(),
        "values held on their owners' devices": Value.objects.filter(custody=Value.Custody.OWNER).count(),
        "paused values": int(b["paused"].sum()), "completed purchases": totals["n"] or 0,
        "values released": totals["released"] or 0, "revenue": money_total(totals["revenue"]),
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
    daily = [{**d, "revenue": money_total(d["revenue"])}  # exact, 4 places (a SUM of decimals can carry 13)
             for d in completed.exclude(completed_at=None).annotate(day=TruncDate("completed_at")).values("day")
             .annotate(n=Count("id"), revenue=Sum("price")).order_by("day")]
    return Overview(stats, budget_histograms_png(ceiling, loss, used), sales_png(daily), utilisation)
