"""The privacy ledger as CSV, streamed (docs/budget-rules.md#the-audit): the console's export and ``export_ledger``.

Owners and buyers appear by id and username; epsilons as exact decimals; times as ISO 8601 UTC with
microseconds.  On PostgreSQL the server writes the rows (``audit.sql.export_csv``: ``COPY``), elsewhere Python
does (:func:`rows_python`); the bytes agree.
"""
from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import datetime
from datetime import timezone as dt_timezone

from django.db.models import F

from . import sql

EXPORT_HEADER = ["entry_id", "block_id", "created_at", "kind", "value_id", "attribute_id", "owner_id", "owner",
                 "purchase_id", "buyer_id", "buyer", "epsilon", "chain_loss_before", "chain_loss_after",
                 "oneshot_loss_before", "oneshot_loss_after", "ceiling", "schedule_start", "schedule_cap",
                 "schedule_start_at", "schedule_end_at", "schedule_shape", "schedule_steps", "guarantee", "mechanism",
                 "earning"]
_EXPORT_SOURCES = ["id", "block_id", "created_at", "kind", "value_id", "value__attribute_id", "value__owner_id",
                   "value__owner__username", "purchase_id", "purchase__buyer_id", "purchase__buyer__username",
                   "epsilon", "chain_loss_before", "chain_loss_after", "oneshot_loss_before", "oneshot_loss_after",
                   "ceiling", "schedule_start", "schedule_cap", "schedule_start_at", "schedule_end_at",
                   "schedule_shape", "schedule_steps", "guarantee", "purchase__mechanism", "earning"]
_EXPORT_TIMES = {"created_at", "schedule_start_at", "schedule_end_at"}
_EXPORT_BLANKS = {"schedule_shape", "guarantee"}  # text columns whose "" the CSV writes as nothing


class _Echo:
    def write(self, value):
        return value


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, datetime):
        return x.astimezone(dt_timezone.utc).isoformat(timespec="microseconds")
    return str(x)


def export_values(queryset, *, server: bool):
    """The export's columns as named annotations, in order; ``server``: formatted in SQL for ``COPY``
    (timestamps as ISO 8601 text, "" as NULL)."""
    exprs = {}
    for j, src in enumerate(_EXPORT_SOURCES):
        expr = F(src)
        if server and src in _EXPORT_TIMES:
            expr = sql.iso_utc(src)
        elif server and src in _EXPORT_BLANKS:
            expr = sql.blank_as_null(src)
        exprs[f"x{j:02d}"] = expr
    return queryset.order_by("id").values(**exprs)


def rows_python(queryset, chunk_size: int) -> Iterator[str]:
    """The rows (no header) written by Python's csv module, in chunks of 512 rows."""
    writer = csv.writer(_Echo(), lineterminator="\n")
    buf = []
    for row in export_values(queryset, server=False).values_list(
            *[f"x{j:02d}" for j in range(len(_EXPORT_SOURCES))]).iterator(chunk_size=chunk_size):
        buf.append(writer.writerow([_cell(x) for x in row]))
        if len(buf) >= 512:
            yield "".join(buf)
            buf = []
    if buf:
        yield "".join(buf)


def rows_server(queryset) -> Iterator[str]:
    """PostgreSQL only: the rows (no header) written by the server (``COPY``)."""
    return sql.copy_csv(export_values(queryset, server=True))


def export_csv_rows(queryset, chunk_size: int = 5000) -> Iterator[str]:
    """CSV text (header first) of the given ledger entries in id order, streamed in chunks (module doc)."""
    yield ",".join(EXPORT_HEADER) + "\n"
    yield from sql.export_csv(lambda: export_values(queryset, server=True),
                              lambda: rows_python(queryset, chunk_size))
