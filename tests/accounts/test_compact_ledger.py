"""The compact ledger (docs/budget-rules.md#the-ledger): a purchase's releases are one ``LedgerRelease`` row per
chain block, and the view ``LedgerEntry`` gives back exactly one row per released value, with the losses, the
ceiling and the owner's earnings; lookups by value read only the rows holding the values."""
from __future__ import annotations

import csv
import io
from decimal import Decimal as D

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection

from accounts.ledger import hashchain as ledger
from accounts.models import BudgetAccount, LedgerEntry, LedgerEvent, LedgerRelease, MoneyAccount, MoneyEntry
from market.purchases.pricing import PricePolicy
from tests.audit.conftest import buy
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund

POLICY = {"points": [["0", "0"], ["10", "0.01"]], "owner_share": "0.7"}


@pytest.fixture
def sold(db, settings):
    """45 values in blocks of 16 (three chain blocks), one purchase of all of them at 0.5."""
    settings.LDP_CHAIN_BLOCK = 16
    rng = np.random.default_rng(5)
    attribute = CategoricalAttributeFactory(price_policy=POLICY)
    values = contribute(attribute, list(rng.choice(["red", "green", "blue"], size=45)), ceiling="1", rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "100")
    purchase = buy(buyer, attribute, "0.5", rng)
    return attribute, values, purchase


def test_a_purchase_writes_one_row_per_chain_block_and_the_view_one_row_per_value(sold):
    attribute, values, purchase = sold
    rows = list(LedgerRelease.objects.filter(purchase=purchase).order_by("position"))
    assert [r.count for r in rows] == [16, 16, 13]
    assert len({r.chain_block_id for r in rows}) == 3 and all(r.shard == attribute.id for r in rows)
    assert not LedgerEvent.objects.filter(purchase=purchase).exists()
    entries = list(LedgerEntry.objects.filter(purchase=purchase).order_by("id"))
    assert [e.value_id for e in entries] == sorted(v.id for v in values)
    assert [e.id % ledger.ID_SHIFT for e in entries] == list(range(45))  # positions 0..44 of the block
    budgets = {b.value_id: b for b in BudgetAccount.objects.filter(value__attribute=attribute)}
    unit = PricePolicy.parse(POLICY).owner_units(PricePolicy.parse(POLICY).charge_units(500_000, np.zeros(1)))[0]
    for e in entries:
        assert (e.kind, e.epsilon, e.chain_loss_before, e.chain_loss_after) == ("chain_release", D("0.5"), 0, D("0.5"))
        assert e.oneshot_loss_before == e.oneshot_loss_after == 0 and e.ceiling == budgets[e.value_id].ceiling
        assert e.earning == D(int(unit)) / 10_000
    pending = MoneyAccount.objects.get(kind="owners_pending", shard=attribute.id)
    assert pending.balance == sum(e.earning for e in entries) > 0
    assert MoneyEntry.objects.filter(purchase=purchase).count() == 3  # buyer, pending, platform: no owner touched


def test_lookups_by_value_return_exactly_that_values_entries(sold):
    attribute, values, _ = sold
    everything = list(LedgerEntry.objects.order_by("id").values_list("id", "value_id", "kind"))
    for chosen in ([values[0].id], [values[17].id, values[44].id], [v.id for v in values[::7]], [10**12]):
        got = list(LedgerEntry.objects.of_values(chosen).order_by("id").values_list("id", "value_id", "kind"))
        assert got == [row for row in everything if row[1] in chosen]


@pytest.mark.postgres
def test_a_lookup_by_value_uses_the_value_range_index(sold):
    attribute, values, _ = sold
    sql, params = LedgerEntry.objects.of_values([values[3].id]).query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # a 3-row table: make the planner show what it can use
        cur.execute("EXPLAIN " + sql, params)
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "ledger_release_value_range" in plan, plan


def test_the_csv_export_and_the_api_carry_each_values_earnings(sold):
    attribute, values, purchase = sold
    out = io.StringIO()
    call_command("export_ledger", "--attribute", str(attribute.id), stdout=out)
    rows = [r for r in csv.DictReader(io.StringIO(out.getvalue())) if r["kind"] == "chain_release"]
    assert len(rows) == 45
    want = {e.value_id: e.earning for e in LedgerEntry.objects.filter(purchase=purchase)}
    assert {int(r["value_id"]): D(r["earning"]) for r in rows} == want


def test_the_view_refuses_writes(sold):
    from django.db import DatabaseError, transaction

    for write in (lambda: LedgerEntry.objects.all().update(ceiling=D("9")), lambda: LedgerEntry.objects.all().delete()):
        with pytest.raises(DatabaseError), transaction.atomic():
            write()


def test_a_release_without_its_purchase_is_refused(sold):
    attribute, values, _ = sold
    rows = ledger.Rows.empty(1)
    r = rows.records
    r["value"], r["kind"], r["epsilon"] = values[0].id, ledger.KINDS.index("chain_release"), 600_000
    r["chain_before"], r["chain_after"] = 0, 600_000
    r["oneshot_before"], r["oneshot_after"], r["ceiling"] = 0, 0, 1_000_000
    from django.db import transaction

    with pytest.raises(ValueError, match="names the purchase"), transaction.atomic():
        ledger.append(rows, shard=attribute.id)


def test_release_runs_split_at_chain_blocks_purchases_and_the_cap():
    rows = ledger.Rows.empty(7)
    rows.records["value"] = [1, 2, 3, 4, 5, 6, 7]
    rows.records["reference"] = [9, 9, 9, 9, 9, 9, 10]
    rows.chain_block = np.array([1, 1, 1, 2, 2, 2, 2])
    assert ledger.release_runs(rows, cap=2).tolist() == [0, 2, 3, 5, 6]
    assert ledger.release_runs(rows, cap=100).tolist() == [0, 3, 6]

