"""The audit's charts: matplotlib, Agg, object API (no global pyplot state, safe in threads), as PNG bytes.

The privacy audit's plot (:func:`privacy_plot_png`) and the overview's budget histograms and sales
(:func:`budget_histograms_png`, :func:`sales_png`); :func:`data_uri` puts a PNG in a page.
"""
from __future__ import annotations

import base64
import io
import math
from datetime import timedelta

import numpy as np

from mechanisms.audit import ATTACKERS, bayes_error_bound


def _figure(w: float, h: float):
    # matplotlib is imported when a chart is drawn, not when the admin is (every process imports the admin).
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
    """A PNG as a ``data:`` URI for an ``<img>`` (the CSP allows data: images; ldpmarket/csp.py)."""
    return "data:image/png;base64," + base64.b64encode(png).decode() if png else ""


def privacy_plot_png(report) -> bytes | None:
    """Each audited attribute's error rates (with standard errors) per epsilon against the Bayes bound.

    ``report``: an ``audit.privacy.PrivacyAuditReport`` (not imported: the privacy audit imports this module).
    """
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
        # the epsilon axis from 0 (where the bound is 1 - 1/m) past the largest audited epsilon: one level is a
        # point on a readable axis, not alone on an axis a hundredth wide
        right = float(eps.max()) * 1.1 if eps.size > 1 else float(eps.max()) * 2
        dense = np.linspace(0.0, right, 200)
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
        ax.set_xlim(0, right)
        ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7)
    return _png(fig)


def budget_histograms_png(ceiling: np.ndarray, loss: np.ndarray, used: np.ndarray) -> bytes | None:
    """Histograms of the ceilings, the losses (epsilon) and loss / ceiling of every value; None without values."""
    if not loss.size:
        return None
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
    return _png(fig)


def sales_png(daily: list[dict]) -> bytes | None:
    """Completed purchases and revenue per day (``daily``: ``{"day", "n", "revenue"}`` rows in day order)."""
    if not daily:
        return None
    # matplotlib is imported when a chart is drawn, not when the admin is (every process imports the admin).
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
    return _png(fig)
