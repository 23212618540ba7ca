"""The data migrations to chains in blocks (market/migrations/0012_chains_in_blocks.py,
docs/architecture.md#chains-in-blocks) and to the compact ledger (accounts/migrations/0013_compact_ledger.py).

A market built with today's code (contributions, extension, purchases that bridge, tighten and extend, a
deleted raw value, a one-shot attribute) passes the audit; migrated back to per-value chains and per-value ledger
entries, every chain is there, point for point, and every entry; migrated forward again, every chain is its slot
again, the releases are compact rows again, and the audit passes again (its Chains section re-checks that every
sold output is the stored point at its epsilon, its Hash chain section every block's hash over the entries).
"""
from __future__ import annotations

from decimal import Decimal

import numpy as np
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.models import LedgerEntry, LedgerEvent, LedgerRelease
from accounts.services import budget_set_ceiling
from audit.budget_audit import audit_budgets
from market.chains.extension import chains_extend
from market.models import ChainBlock, ChainPoint, Value
from market.values.services import value_delete_raw
from tests.audit.conftest import buy
from tests.factories import BuyerFactory, CategoricalAttributeFactory, chain_heads, contribute, fund, stored_chains

BEFORE = [("market", "0011_oue_olh")]


def _build(settings):
    settings.LDP_CHAIN_BLOCK = 16
    rng = np.random.default_rng(11)
    # Free: the migration back to per-value chains also undoes settlements (accounts 0014), which is possible only
    # while no owner's earnings went through one (docs/money.md#settlement); money is not what this test is about.
    attribute = CategoricalAttributeFactory(price_policy={"points": [["0", "0"], ["10", "0"]], "owner_share": "0.8"})
    values = contribute(attribute, list(rng.choice(["red", "green", "blue"], size=40)), ceiling="0.6", rng=rng)
    for v in values[:10]:
        budget_set_ceiling(value_id=v.id, ceiling="1.2")
    chains_extend(attribute_id=attribute.id, rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "100")
    for e in ("0.45", "0.05", "1.15"):
        buy(buyer, attribute, e, rng)
    value_delete_raw(value_id=values[3].id)
    oneshot = CategoricalAttributeFactory(mechanism="urr", sensitive=["red"])
    contribute(oneshot, ["red", "blue"], ceiling="1", rng=rng)
    return attribute


def test_chains_survive_the_migration_back_and_forth_and_the_audit_passes_before_and_after(transactional_db,
                                                                                              settings):
    attribute = _build(settings)
    report = audit_budgets()
    assert report.ok, report.as_text()
    before = stored_chains(attribute)
    heads = chain_heads(Value.objects.filter(attribute=attribute))
    assert len(before) == 40 and any(e.size > 10 for e, _ in before.values())

    entries = list(LedgerEntry.objects.order_by("id").values_list("block_id", "value_id", "kind", "epsilon",
                                                                  "chain_loss_before", "chain_loss_after", "ceiling"))
    assert LedgerRelease.objects.count() > 0
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    OldEntry = old.get_model("accounts", "LedgerEntry")  # the table, one row per value, in the hashed order
    assert list(OldEntry.objects.order_by("block_id", "id").values_list("block_id", "value_id", "kind", "epsilon",
                                                           "chain_loss_before", "chain_loss_after",
                                                           "ceiling")) == entries
    Chain = old.get_model("market", "Chain")
    assert Chain.objects.count() == 40
    for value_id, eps, outputs, length, head in Chain.objects.values_list("value_id", "epsilons", "outputs",
                                                                          "length", "head"):
        want_eps, want_out = before[value_id]
        assert np.frombuffer(bytes(eps), dtype="<i8").tolist() == want_eps.tolist()
        assert np.frombuffer(bytes(outputs), dtype="<i2").tolist() == want_out.reshape(-1).tolist()
        assert (length, head) == (want_eps.size, Decimal(int(want_eps[-1])) / 10**6)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert not LedgerEvent.objects.filter(kind__in=LedgerEntry.RELEASE_KINDS).exists()
    assert LedgerRelease.objects.count() > 0
    assert list(LedgerEntry.objects.order_by("id").values_list("block_id", "value_id", "kind", "epsilon",
                                                               "chain_loss_before", "chain_loss_after",
                                                               "ceiling")) == entries
    after = stored_chains(attribute)
    assert after.keys() == before.keys()
    for v in before:
        assert after[v][0].tolist() == before[v][0].tolist() and after[v][1].tolist() == before[v][1].tolist()
    assert chain_heads(Value.objects.filter(attribute=attribute)) == heads
    assert ChainBlock.objects.filter(attribute=attribute).count() == 3  # 40 values in blocks of 16 (the setting)
    assert ChainPoint.objects.filter(attribute=attribute).count() > 0
    report = audit_budgets()
    assert report.ok, report.as_text()
