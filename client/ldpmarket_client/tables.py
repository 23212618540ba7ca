"""What the command line prints for people (docs/client.md#command-line): aligned tables and labelled fields.

``--json`` prints the API's JSON instead, unchanged, for scripts.  Amounts are shown with their currency by
:func:`ldpmarket_client.money.format_money_text` (docs/money.md#how-amounts-are-shown): never rounded.
Standard library only.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

from .money import format_money_text


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, right: Iterable[int] = ()) -> str:
    """``rows`` under ``headers`` in columns two spaces apart, each as wide as its widest cell; the columns whose
    index is in ``right`` (numbers, amounts) aligned right.  ``None`` is shown as an empty cell."""
    right = set(right)
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def fields(pairs: Iterable[tuple[str, object]]) -> str:
    """``label  value`` lines, the values aligned; pairs whose value is ``None`` are left out."""
    pairs = [(label, str(value)) for label, value in pairs if value is not None]
    width = max((len(label) for label, _ in pairs), default=0)
    return "\n".join(f"{label + ':':<{width + 1}}  {value}".rstrip() for label, value in pairs)


def money(amount, currency: str | None) -> str | None:
    """An amount as people read it (``"15.04 EUR"``); ``None`` for no amount."""
    if amount is None:
        return None
    try:
        text = format_money_text(amount, currency or "")
    except ValueError:  # not an amount of the API's form: shown as it came, never rounded
        text = f"{amount} {currency or ''}"
    return text.rstrip()


def number(x, digits: int = 4) -> str | None:
    """A float from the API (a standard error, say) with ``digits`` significant digits."""
    return None if x is None else f"{float(x):.{digits}g}"


def epsilon(e) -> str | None:
    """An epsilon from the API (``"0.500000"``) without its trailing zeros: ``"0.5"``; exact, never rounded."""
    if e is None:
        return None
    try:
        d = Decimal(str(e))
    except InvalidOperation:
        return str(e)
    return f"{d.normalize():f}" if d.is_finite() else str(e)


def when(text) -> str | None:
    """An ISO 8601 date-time from the API as ``2026-11-28 07:00:21 UTC`` (to the second)."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return str(text)
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if t.tzinfo is not None else "")


def _excluded(excluded: dict | None) -> str:
    parts = [f"{n} {reason.replace('_', ' ')}" for reason, n in (excluded or {}).items() if n]
    return ", ".join(parts) if parts else "none"


def datasets_table(datasets: list[dict], currency: str | None) -> str:
    """The catalog: one row per attribute."""
    rows = []
    for dataset in datasets:
        for a in dataset.get("attributes") or []:
            availability = a.get("availability") or {}
            points = ((a.get("price_policy") or {}).get("points")) or []
            if not a.get("price_policy"):
                price = "not for sale"
            elif not points:
                price = ""
            else:
                low, high = money(points[0]["price"], currency), money(points[-1]["price"], currency)
                price = low if low == high else f"{low} to {high}"
            rows.append((a.get("id"), dataset.get("title"), a.get("name"), a.get("kind"), a.get("mechanism"),
                         availability.get("values"), epsilon(availability.get("max_epsilon")) or "-", price))
    if not rows:
        return "no attributes for sale"
    return table(("ID", "DATASET", "ATTRIBUTE", "KIND", "MECHANISM", "VALUES", "MAX EPSILON", "PRICE PER VALUE"),
                 rows, right=(0, 5, 6))


def quote_fields(quote: dict, currency: str | None) -> str:
    error = quote.get("predicted_error") or {}
    predicted = number(error.get("standard_error"))
    if predicted is not None and error.get("worst_case_standard_error") is not None:
        predicted += f" (worst case {number(error['worst_case_standard_error'])})"
    title = f"Quote for attribute {quote.get('attribute')} at epsilon {epsilon(quote.get('epsilon'))}"
    if quote.get("cohort") is not None:
        title += f", cohort {quote['cohort']}"
    return title + "\n" + fields([
        ("Included", f"{quote.get('included')} of {quote.get('candidates')} values"),
        ("Excluded", _excluded(quote.get("excluded"))),
        ("Price", money(quote.get("price"), currency)),
        ("List price", money(quote.get("list_price"), currency)),
        ("Upgrade credit", money(quote.get("upgrade_credit"), currency)),
        ("Price per value", money(quote.get("price_per_value"), currency)),
        ("Standard error", predicted),
        ("Mechanism", quote.get("mechanism")),
        ("Charged epsilon", epsilon(quote.get("charged_epsilon"))),
        ("Guarantee", quote.get("guarantee_label") or quote.get("guarantee")),
        ("Expires at", when(quote.get("expires_at"))),
        ("Quote", quote.get("quote")),
    ]) + "\n(buy it: ldpmarket-client buy --quote QUOTE)"


def purchase_fields(purchase: dict, currency: str | None) -> str:
    progress = purchase.get("progress")
    done = purchase.get("status") == "completed"
    return f"Purchase {purchase.get('id')}: {purchase.get('status')}\n" + fields([
        ("Attribute", f"{purchase.get('attribute')} (dataset {purchase.get('dataset')})"),
        ("Mechanism", purchase.get("mechanism")),
        ("Epsilon", epsilon(purchase.get("epsilon"))),
        ("Charged epsilon", epsilon(purchase.get("charged_epsilon"))),
        ("Guarantee", purchase.get("guarantee_label") or purchase.get("guarantee")),
        ("Cohort", purchase.get("cohort")),
        ("Included", None if purchase.get("included") is None
         else f"{purchase['included']} of {purchase.get('candidates')} values"),
        ("Excluded", None if purchase.get("excluded") is None else _excluded(purchase["excluded"])),
        ("New points", purchase.get("new_points")),
        ("Price", money(purchase.get("price"), currency)),
        ("Progress", None if not progress else f"{progress.get('processed')} of {progress.get('total')} values"),
        ("Error", purchase.get("error") or None),
        ("Created at", when(purchase.get("created_at"))),
        ("Completed at", when(purchase.get("completed_at"))),
        ("Idempotency key", purchase.get("idempotency_key")),
    ]) + (f"\n(outputs: ldpmarket-client outputs {purchase.get('id')}; estimate: ldpmarket-client estimate "
          f"{purchase.get('id')})" if done else "")


def account_fields(account: dict) -> str:
    currency = account.get("currency")
    kind = {"buyer_credit": "buyer credit", "owner_earnings": "owner earnings"}.get(account.get("kind"),
                                                                                     account.get("kind"))
    return fields([("Account", kind), ("Balance", money(account.get("balance"), currency)),
                   ("Pending", money(account.get("pending"), currency))])


def statement_table(entries: list[dict], currency: str | None) -> str:
    if not entries:
        return "no movements"
    rows = [(e.get("id"), when(e.get("created_at")), e.get("kind"),
             money(e.get("amount"), e.get("currency") or currency),
             money(e.get("balance_after"), e.get("currency") or currency), e.get("purchase"), e.get("memo"))
            for e in entries]
    return table(("ID", "DATE", "KIND", "AMOUNT", "BALANCE AFTER", "PURCHASE", "MEMO"), rows, right=(0, 3, 4, 5))
