"""``market.values.owner_rows.oneshot_releases`` and ``pum_tag``: what an owner is shown of the one-shot releases and
surveys of their values (mechanism, charged epsilon, guarantee label -- improved Christofides with its distinct one --,
buyer organisation, date, earnings), and only theirs."""
from __future__ import annotations

import numpy as np
import pytest
from django.http import Http404

from market.values import owner_rows
from market.values.services import value_set_pum_tag
from tests.factories import BinaryAttributeFactory, BuyerFactory, GraphAttributeFactory, OwnerFactory
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values
from tests.portal.conftest import contribute_one

pytestmark = pytest.mark.django_db


def test_an_owner_sees_each_oneshot_release_with_its_guarantee(owner, other_owner):
    graph = GraphAttributeFactory(price_policy=POLICY)
    binary = BinaryAttributeFactory(price_policy=POLICY)
    mine = contribute_one(owner, graph, '{"0": 0.5}', ceiling="5")
    contribute_one(owner, binary, "yes", ceiling="5")
    contribute_one(other_owner, binary, "no", ceiling="5")
    values(binary, ["yes"] * 20 + ["no"] * 30, ceiling="5")
    lab = funded_buyer()
    lab.organisation = "Survey Institute"
    lab.save()
    rng = np.random.default_rng(0)
    lpp = run(lab, graph, eps1="1", eps2="1", rng=rng)
    warner = run(lab, binary, mechanism="warner", epsilon="0.5", rng=rng)
    ic = run(lab, binary, mechanism="improved_christofides", epsilon="1", p2="0.1", rng=rng)
    rows = owner_rows.oneshot_releases(owner)
    assert [r.purchase_id for r in rows] == [ic.id, warner.id, lpp.id]  # newest first
    by_purchase = {r.purchase_id: r for r in rows}
    r = by_purchase[ic.id]
    assert (r.mechanism, r.survey, r.epsilon, r.guarantee) == ("improved_christofides", True, ic.charged_epsilon,
                                                               "per_report_non_collusion")
    assert r.guarantee_label == "per-report eps, non-collusion assumption"
    assert r.organisation == "Survey Institute" and r.earned > 0 and r.at == ic.ledger_entries.first().created_at
    assert (by_purchase[warner.id].guarantee_label, by_purchase[warner.id].epsilon) == ("epsilon-LDP", warner.epsilon)
    lpp_row = by_purchase[lpp.id]
    assert (lpp_row.value_id, lpp_row.mechanism, lpp_row.survey, str(lpp_row.epsilon)) == (
        mine.id, "lpp", False, "1.379886")
    assert lab.username not in repr(rows)
    assert [r.purchase_id for r in owner_rows.oneshot_releases(owner, value_id=mine.id)] == [lpp.id]
    assert len(owner_rows.oneshot_releases(owner, limit=2)) == 2
    assert {r.purchase_id for r in owner_rows.oneshot_releases(other_owner)} == {warner.id, ic.id}
    assert owner_rows.oneshot_releases(OwnerFactory()) == []
    # the dashboard rows of one-shot values have no chain
    rows = {row.value.id: row for row in owner_rows.owner_values(owner)}
    assert rows[mine.id].head == 0 and rows[mine.id].length == 0


def test_pum_tag_is_read_for_its_owner_only(owner, other_owner):
    from tests.factories import UrrAttributeFactory

    attribute = UrrAttributeFactory(price_policy=POLICY)
    v = contribute_one(owner, attribute, "c", ceiling="1")
    assert owner_rows.pum_tag(owner, v.id) is None
    value_set_pum_tag(value_id=v.id, tag="work", owner=owner)
    assert owner_rows.pum_tag(owner, v.id) == "work"
    with pytest.raises(Http404):
        owner_rows.pum_tag(other_owner, v.id)
    assert BuyerFactory().role == "buyer"
