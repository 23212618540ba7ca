"""GET /api/v1/datasets/: attributes with their domain, grid, price policy and a histogram of ceilings."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from accounts.models import BudgetAccount
from market import selectors
from market.models import Value
from market.values import services
from tests.factories import CategoricalAttributeFactory, DatasetFactory
from tests.market.api.conftest import POLICY, contribute

pytestmark = pytest.mark.django_db


def test_catalog_lists_datasets_with_every_kind_of_attribute(api, categorical, binary, numeric, string):
    page = api.get("/api/v1/datasets/?histogram=full")
    assert page.status_code == 200 and page["Content-Type"] == "application/json"
    body = page.json()
    assert body["next"] is None and body["previous"] is None
    by_kind = {a["kind"]: a for d in body["results"] for a in d["attributes"]}
    assert set(by_kind) == {"categorical", "binary", "numeric", "string"}
    assert by_kind["categorical"]["labels"] == ["red", "green", "blue"]
    assert by_kind["binary"]["labels"] == ["no", "yes"]
    assert by_kind["numeric"]["bounds"] == {"low": "0.000000", "high": "100.000000"}
    assert by_kind["numeric"]["labels"] == [] and by_kind["numeric"]["bloom"] is None
    assert by_kind["string"]["bloom"] == {"num_bits": 16, "num_hashes": 2, "num_cohorts": 2}
    cat = by_kind["categorical"]
    assert cat["mechanism"] == "gradual_rr"
    assert cat["grid"] == {"start": "0.100000", "step": "0.100000", "stop": "10.000000"}
    assert cat["price_policy"] == {"points": [{"epsilon": "0.000000", "price": "0.0000"},
                                              {"epsilon": "1.000000", "price": "0.0100"},
                                              {"epsilon": "10.000000", "price": "0.0500"}], "owner_share": "0.8000",
                                   "currency": "EUR"}
    hist = {h["epsilon"]: h["available"] for h in cat["histogram"]}
    assert len(hist) == 100 and hist["0.100000"] == hist["2.000000"] == 60 and hist["2.100000"] == 0
    detail = api.get(f"/api/v1/datasets/{categorical.dataset_id}/?histogram=full").json()
    assert detail["attributes"][0] == cat


def test_histogram_counts_what_a_purchase_would_include(api, categorical):
    values = list(Value.objects.filter(attribute=categorical).order_by("id"))
    BudgetAccount.objects.filter(value__in=values[:10]).update(ceiling=Decimal("0.55"))
    BudgetAccount.objects.filter(value__in=values[10:20]).update(ceiling=Decimal("5"))
    BudgetAccount.objects.filter(value__in=values[20:25]).update(paused=True)
    Value.objects.filter(id__in=[v.id for v in values[25:28]]).update(withdrawn_at=timezone.now())
    for v in values[15:20]:
        services.value_delete_raw(value_id=v.id)  # ceiling 5 but chains stop at 2: no extension possible
    response = api.get(f"/api/v1/datasets/{categorical.dataset_id}/?histogram=full")
    hist = {h["epsilon"]: h["available"] for h in response.json()["attributes"][0]["histogram"]}
    assert hist["0.500000"] == 60 - 5 - 3
    assert hist["0.600000"] == 60 - 5 - 3 - 10
    assert hist["2.000000"] == 60 - 5 - 3 - 10
    assert hist["2.100000"] == 5 and hist["5.000000"] == 5 and hist["5.100000"] == 0
    for eps in ("0.5", "0.6", "2", "2.1", "5"):
        q = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": eps}, format="json").json()
        assert q["included"] == hist[f"{Decimal(eps):.6f}"], eps


def test_long_grids_are_thinned_to_100_buckets(api):
    attribute = CategoricalAttributeFactory(grid_start=Decimal("0"), grid_step=Decimal("0.001"),
                                            grid_stop=Decimal("30"), price_policy=POLICY)
    points = selectors.grid_points(attribute)
    assert 0 < points.size <= selectors.MAX_BUCKETS and points[0] > 0
    hist = api.get(f"/api/v1/datasets/{attribute.dataset_id}/?histogram=full").json()["attributes"][0]["histogram"]
    assert len(hist) == points.size and all(h["available"] == 0 for h in hist)


def test_the_catalog_names_the_epsilon_limit(api):
    attribute = CategoricalAttributeFactory(price_policy=POLICY)
    body = api.get(f"/api/v1/datasets/{attribute.dataset_id}/?histogram=full").json()
    assert body["attributes"][0]["max_epsilon"] == "30"


def test_datasets_page_with_cursors(api):
    for _ in range(5):
        DatasetFactory()
    seen, url = [], "/api/v1/datasets/?page_size=2"
    while url:
        body = api.get(url).json()
        seen += [d["id"] for d in body["results"]]
        url = body["next"]
    assert len(seen) == 5 and seen == sorted(seen, reverse=True)


def test_unknown_dataset_is_404_problem(api):
    r = api.get("/api/v1/datasets/999999/")
    assert r.status_code == 404 and r["Content-Type"] == "application/problem+json"


def test_a_single_owner_shows_only_as_a_count(api, owner):
    attribute = CategoricalAttributeFactory(price_policy=POLICY)
    (value,) = contribute(attribute, ["green"], ceiling="1")
    body = api.get(f"/api/v1/datasets/{attribute.dataset_id}/?histogram=full").json()
    hist = {h["epsilon"]: h["available"] for h in body["attributes"][0]["histogram"]}
    assert hist["1.000000"] == 1 and hist["1.100000"] == 0
    text = str(body)
    assert value.owner.username not in text and "curator" not in text


def test_the_catalog_is_a_summary_by_default_and_the_full_histogram_on_request(api, categorical, binary, numeric,
                                                                                string):
    """Issue 13: the catalog was 77 KB for six attributes, because every attribute carried its whole histogram (up
    to 100 buckets).  By default it carries a summary (at most 5 buckets, and what is available in two numbers);
    ``?histogram=full`` gives every bucket."""
    summary = api.get("/api/v1/datasets/")
    full = api.get("/api/v1/datasets/?histogram=full")
    assert summary.status_code == full.status_code == 200
    assert len(summary.content) * 3 < len(full.content), (len(summary.content), len(full.content))
    small = {a["id"]: a for d in summary.json()["results"] for a in d["attributes"]}
    large = {a["id"]: a for d in full.json()["results"] for a in d["attributes"]}
    cat = categorical.id
    assert len(large[cat]["histogram"]) == 100 and len(small[cat]["histogram"]) == 5
    assert small[cat]["histogram"][0] == large[cat]["histogram"][0]
    assert small[cat]["histogram"][-1] == large[cat]["histogram"][-1]
    assert all(bucket in large[cat]["histogram"] for bucket in small[cat]["histogram"])
    for attribute in (small[cat], large[cat]):  # the same summary either way
        top = [b for b in large[cat]["histogram"] if b["available"] > 0][-1]
        assert attribute["availability"] == {"values": large[cat]["histogram"][0]["available"],
                                             "max_epsilon": top["epsilon"], "at_max_epsilon": top["available"]}
    detail = api.get(f"/api/v1/datasets/{categorical.dataset_id}/").json()
    assert len(detail["attributes"][0]["histogram"]) == 5
    assert api.get(f"/api/v1/datasets/{categorical.dataset_id}/?histogram=full").json() \
        ["attributes"][0]["histogram"] == large[cat]["histogram"]
    bad = api.get("/api/v1/datasets/?histogram=everything")
    assert bad.status_code == 400 and bad["Content-Type"].startswith("application/problem+json")
    assert "histogram" in bad.json()["detail"]
