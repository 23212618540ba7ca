"""The distribution columns of docs/architecture.md#scaling-out: every table the section lists has the column it
names, and on PostgreSQL the copied columns (a budget's attribute, a purchase chunk's attribute, a budget event's
shard) cannot disagree with their parent's."""
from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, transaction

from accounts.models import BudgetAccount, LedgerBlock, LedgerEvent
from market.models import Purchase, PurchaseChunk
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute

ROOT = Path(__file__).resolve().parent.parent
#: A table whose distribution column is its own key (the account is the row).
OWN_KEY = {("accounts_moneyaccount", "account_id"): "id"}


def scaling_out_rows() -> list[tuple[list[str], str]]:
    """``(tables, column)`` of each row of the section's table that names a column."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Scaling out", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("table", "---"):
            continue
        tables = re.findall(r"`([a-z]+_[a-z_]+)`", cells[0])
        column = re.match(r"`([a-z_]+)`", cells[2])
        if tables and column:
            rows.append((tables, column.group(1)))
    return rows


def columns_of(table: str) -> set[str]:
    model = next(m for m in apps.get_models() if m._meta.db_table == table)
    return {f.column for f in model._meta.concrete_fields}


def test_every_table_the_doc_lists_has_its_distribution_column():
    rows = scaling_out_rows()
    listed = {t for tables, _ in rows for t in tables}
    assert {"accounts_budgetaccount", "market_purchasechunk", "accounts_ledgerevent", "market_value"} <= listed
    models = {m._meta.db_table for m in apps.get_models()}
    checked = 0
    for tables, column in rows:
        for table in tables:
            if table not in models:
                continue  # a phrase in backticks that is not a table (`owners_pending`)
            want = OWN_KEY.get((table, column), column)
            assert want in columns_of(table), f"{table} lacks its distribution column {want}"
            checked += 1
    assert checked >= 12


def test_the_services_fill_the_copied_columns(db):
    attribute = CategoricalAttributeFactory()
    values = contribute(attribute, ["red", "blue"], ceiling="1")
    assert set(BudgetAccount.objects.filter(value__in=values).values_list("attribute_id", flat=True)) == {attribute.id}
    events = LedgerEvent.objects.filter(value__in=values)
    assert events.exists()
    assert all(shard == block_shard for shard, block_shard in events.values_list("shard", "block__shard"))


def refused(action) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        action()


@pytest.mark.django_db(transaction=True)
def test_postgresql_refuses_a_copied_column_that_disagrees():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set DATABASE_URL (CI runs these)")
    a, b = CategoricalAttributeFactory(), CategoricalAttributeFactory()
    (value,) = contribute(a, ["red"], ceiling="1")
    refused(lambda: BudgetAccount.objects.filter(value=value).update(attribute=b))
    (other,) = contribute(a, ["blue"], ceiling="1", prefix=f"dist{a.id}")
    BudgetAccount.objects.filter(value=other).delete()
    refused(lambda: BudgetAccount.objects.create(value=other, attribute=b, ceiling=1))
    BudgetAccount.objects.create(value=other, attribute=a, ceiling=1)  # the right one is taken
    event = LedgerEvent.objects.filter(value=value).values().first()
    block = LedgerBlock.objects.get(pk=event["block_id"])
    fields = {k: v for k, v in event.items() if k not in ("id", "position", "shard")}
    # an event inserted around the services (the table refuses updates and deletes, not inserts)
    refused(lambda: LedgerEvent.objects.create(**fields, position=999, shard=block.shard + 1))
    buyer = BuyerFactory()
    purchase = Purchase.objects.create(buyer=buyer, attribute=a, epsilon=Decimal("0.5"), idempotency_key="dist")
    chunk = dict(purchase=purchase, seq=0, count=0, value_ids=b"", outputs=b"")
    refused(lambda: PurchaseChunk.objects.create(attribute=b, **chunk))
    PurchaseChunk.objects.create(attribute=a, **chunk)
    refused(lambda: PurchaseChunk.objects.filter(purchase=purchase).update(attribute=b))
