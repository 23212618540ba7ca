"""GET /api/v1/purchases/{id}/outputs/ (JSON pages, streamed CSV, pseudonyms) and /estimate/."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from market import selectors
from market.models import Purchase, PurchaseChunk, Value
from market.purchases import execution as purchases
from market.purchases.pseudonyms import pseudonym, pseudonyms
from mechanisms import estimators
from tests.market.api.conftest import assert_problem, buy, client_for

pytestmark = pytest.mark.django_db


def all_pages(api, url):
    rows = []
    while url:
        page = api.get(url)
        assert page.status_code == 200, page.content
        body = page.json()
        rows += body["results"]
        url = body["next"]
    return rows, body["count"]


def csv_rows(response):
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response.streaming
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def stored(purchase_id):
    """(value ids, outputs) exactly as the purchase stored them."""
    return selectors.all_outputs(Purchase.objects.get(id=purchase_id))


@pytest.fixture
def small_chunks(monkeypatch):
    """Store outputs in chunks of 7 rows so that pages and the CSV stream cross chunk boundaries."""
    monkeypatch.setattr(purchases, "CHUNK", 7)


def test_json_pages_and_csv_hold_every_output_once(api, buyer, categorical, small_chunks):
    p = buy(api, categorical.id, "1.3").json()
    assert PurchaseChunk.objects.filter(purchase_id=p["id"]).count() == 9  # 60 rows in chunks of 7
    ids, out = stored(p["id"])
    rows, count = all_pages(api, f"/api/v1/purchases/{p['id']}/outputs/?page_size=8")
    assert count == len(rows) == 60
    labels = categorical.labels
    assert [r["output"] for r in rows] == [labels[o] for o in out[:, 0]]
    assert [r["pseudonym"] for r in rows] == pseudonyms(buyer.id, ids)
    assert {r["epsilon"] for r in rows} == {"1.300000"}
    page = api.get(f"/api/v1/purchases/{p['id']}/outputs/?page_size=8").json()
    second = api.get(page["next"]).json()
    assert api.get(second["previous"]).json() == page
    for source in (api.get(f"/api/v1/purchases/{p['id']}/outputs/?format=csv"),
                   api.get(f"/api/v1/purchases/{p['id']}/outputs/", HTTP_ACCEPT="text/csv")):
        assert "attachment" in source["Content-Disposition"]
        assert csv_rows(source) == rows


def test_outputs_of_every_kind(api, binary, numeric, string):
    for attribute in (binary, numeric, string):
        p = buy(api, attribute.id, "1").json()
        ids, out = stored(p["id"])
        rows, _ = all_pages(api, f"/api/v1/purchases/{p['id']}/outputs/")
        table = csv_rows(api.get(f"/api/v1/purchases/{p['id']}/outputs/?format=csv"))
        if attribute.kind == "binary":
            assert [r["output"] for r in rows] == [["no", "yes"][o] for o in out[:, 0]]
        elif attribute.kind == "numeric":
            assert [r["output"] for r in rows] == [["low", "high"][o] for o in out[:, 0]]
        else:
            assert [r["output"] for r in rows] == out.tolist() and out.shape[1] == attribute.num_bits
            assert [t["output"] for t in table] == ["".join(map(str, bits)) for bits in out.tolist()]
            continue
        assert [t["output"] for t in table] == [r["output"] for r in rows]


def test_bad_pagination_parameters_are_400_problems(api, categorical):
    p = buy(api, categorical.id, "1").json()
    for bad in ("cursor=%%%", "cursor=abc", "cursor=bzotMQ", "page_size=0", "page_size=10001", "page_size=x"):
        assert_problem(api.get(f"/api/v1/purchases/{p['id']}/outputs/?{bad}"), 400)
    assert_problem(api.get(f"/api/v1/purchases/{p['id']}/outputs/?format=xml"), 404)  # DRF: unknown format
    assert_problem(api.get(f"/api/v1/purchases/{p['id']}/outputs/", HTTP_ACCEPT="image/png"), 406)
    past_the_end = api.get(f"/api/v1/purchases/{p['id']}/outputs/?cursor=bzo5OTk").json()  # "o:999"
    assert past_the_end["results"] == [] and past_the_end["next"] is None


def test_pseudonyms_are_stable_per_buyer_and_unlinkable_across_buyers(api, buyer, buyer_b, categorical):
    first = buy(api, categorical.id, "0.5").json()
    upgrade = buy(api, categorical.id, "1.5").json()
    theirs = buy(client_for(buyer_b), categorical.id, "0.5").json()

    def by_pseudonym(client, pid):
        rows, _ = all_pages(client, f"/api/v1/purchases/{pid}/outputs/")
        return {r["pseudonym"]: r["output"] for r in rows}

    a1, a2 = by_pseudonym(api, first["id"]), by_pseudonym(api, upgrade["id"])
    b = by_pseudonym(client_for(buyer_b), theirs["id"])
    assert set(a1) == set(a2) and len(a1) == 60  # the same values under the same names: upgrades line up
    assert not set(a1) & set(b) and len(b) == 60  # another buyer's names share nothing with mine
    assert a1 == b or sorted(a1.values()) == sorted(b.values())  # same epsilon, same chains: same outputs
    value_ids = list(Value.objects.filter(attribute=categorical).values_list("id", flat=True))
    mine = {pseudonym(buyer.id, v) for v in value_ids}
    assert mine == set(a1)
    assert not {str(v) for v in value_ids} & set(a1)  # a pseudonym is not a value id
    assert len({pseudonym(buyer.id, v) for v in range(1, 5001)}) == 5000


def test_pseudonyms_depend_on_the_key(settings, buyer):
    before = pseudonyms(buyer.id, [1, 2, 3])
    settings.LDP_PSEUDONYM_KEY = "another-key"
    after = pseudonyms(buyer.id, [1, 2, 3])
    assert not set(before) & set(after)
    assert all(len(p) == 32 and int(p, 16) >= 0 for p in before + after)


# ------------------------------------------------------------------------------------------ estimates

def test_categorical_estimate_matches_the_estimators(api, categorical, small_chunks):
    p = buy(api, categorical.id, "1.2").json()
    _, out = stored(p["id"])
    est = api.get(f"/api/v1/purchases/{p['id']}/estimate/").json()
    y = out[:, 0]
    f_hat, low, high = estimators.confidence_intervals(y, 1.2, 3)
    se = np.sqrt(estimators.frequency_variance(f_hat, 1.2, 3, y.size))
    assert est["kind"] == "categorical" and est["n"] == 60 and est["epsilons"] == [{"epsilon": 1.2, "count": 60}]
    assert [f["label"] for f in est["frequencies"]] == ["red", "green", "blue"]
    assert np.allclose([f["estimate"] for f in est["frequencies"]], f_hat, rtol=0, atol=1e-12)
    assert np.allclose([f["standard_error"] for f in est["frequencies"]], se, rtol=0, atol=1e-12)
    assert np.allclose([f["ci95_low"] for f in est["frequencies"]], low, rtol=0, atol=1e-12)
    assert np.allclose([f["ci95_high"] for f in est["frequencies"]], high, rtol=0, atol=1e-12)
    assert np.allclose([f["projected"] for f in est["frequencies"]], estimators.project_simplex(f_hat), atol=1e-12)
    assert np.allclose([f["maximum_likelihood"] for f in est["frequencies"]],
                       estimators.em_frequencies(y, 1.2, 3), atol=1e-9)
    assert est["mean"] is None and est["bits"] == []
    assert api.get(f"/api/v1/purchases/{p['id']}/estimate/").json() == est  # cached, unchanged


def test_binary_and_numeric_means_match_the_estimators(api, binary, numeric):
    p = buy(api, binary.id, "2").json()
    _, out = stored(p["id"])
    est = api.get(f"/api/v1/purchases/{p['id']}/estimate/").json()
    f_hat, low, high = estimators.confidence_intervals(out[:, 0], 2.0, 2)
    assert est["mean"]["estimate"] == pytest.approx(f_hat[1], abs=1e-12)
    assert est["mean"]["ci95_low"] == pytest.approx(low[1], abs=1e-12)
    assert est["mean"]["ci95_high"] == pytest.approx(high[1], abs=1e-12)

    p = buy(api, numeric.id, "2").json()
    _, out = stored(p["id"])
    est = api.get(f"/api/v1/purchases/{p['id']}/estimate/").json()
    mean = estimators.mean(out[:, 0], 2.0, 0.0, 100.0)
    se = np.sqrt(estimators.mean_variance(float(np.clip(mean, 0, 100)), 2.0, 0.0, 100.0, out.shape[0]))
    assert est["mean"]["estimate"] == pytest.approx(mean, abs=1e-9)
    assert est["mean"]["standard_error"] == pytest.approx(se, rel=1e-9)
    assert est["mean"]["ci95_low"] == pytest.approx(mean - 1.959963984540054 * se, rel=1e-9)
    assert [f["label"] for f in est["frequencies"]] == ["low", "high"]


def test_string_estimate_is_per_bit(api, string):
    p = buy(api, string.id, "1.5").json()
    _, out = stored(p["id"])
    est = api.get(f"/api/v1/purchases/{p['id']}/estimate/").json()
    assert [b["bit"] for b in est["bits"]] == list(range(string.num_bits))
    bit_eps = 1.5 / (2 * string.num_hashes)  # each bit is drawn at epsilon / (2 num_hashes)
    expected = [estimators.frequencies(out[:, j], bit_eps, 2)[1] for j in range(string.num_bits)]
    assert np.allclose([b["estimate"] for b in est["bits"]], expected, atol=1e-12)
    assert est["frequencies"] == [] and est["mean"] is None


def test_estimates_with_heterogeneous_epsilons_match_the_estimators(categorical, numeric):
    """Outputs pooled from purchases at different epsilons (per-output epsilons), as combining would give."""
    gen = np.random.default_rng(3)
    y = gen.integers(0, 3, 500)
    eps = np.where(np.arange(500) < 200, 0.5, 2.0)
    est = selectors.estimate_outputs(categorical, y.reshape(-1, 1), eps)
    f_hat, low, high = estimators.confidence_intervals(y, eps, 3)
    assert np.allclose([f["estimate"] for f in est["frequencies"]], f_hat, atol=1e-12)
    assert np.allclose([f["ci95_low"] for f in est["frequencies"]], low, atol=1e-12)
    assert np.allclose([f["standard_error"] for f in est["frequencies"]],
                       np.sqrt(estimators.frequency_variance(f_hat, eps, 3)), atol=1e-12)
    assert est["epsilons"] == [{"epsilon": 0.5, "count": 200}, {"epsilon": 2.0, "count": 300}]
    z = gen.integers(0, 2, 500)
    est = selectors.estimate_outputs(numeric, z.reshape(-1, 1), eps)
    assert est["mean"]["estimate"] == pytest.approx(estimators.mean(z, eps, 0.0, 100.0), abs=1e-9)
    same = selectors.estimate_outputs(categorical, y.reshape(-1, 1), np.full(500, 0.5))
    assert same == selectors.estimate_outputs(categorical, y.reshape(-1, 1), 0.5)


@pytest.mark.parametrize("key", ["short", "k" * 64, "a much longer key than one SHA-256 block " * 3])
def test_pseudonyms_are_hmac_sha256_of_buyer_and_value(settings, key):
    import hashlib
    import hmac

    settings.LDP_PSEUDONYM_KEY = key
    ids = [1, 2, 10 ** 12, 2 ** 62]
    want = [hmac.new(key.encode(), b"ldpmarket/pseudonym/v1\x00" + (5).to_bytes(8, "little") + v.to_bytes(8, "little"),
                     hashlib.sha256).hexdigest()[:32] for v in ids]
    assert pseudonyms(5, np.array(ids)) == want == [pseudonym(5, v) for v in ids]
    assert pseudonyms(5, []) == []
