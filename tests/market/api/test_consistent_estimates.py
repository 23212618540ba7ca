"""``GET /api/v1/purchases/<id>/estimate/?method=unbiased|norm_sub|ibu`` (issue 32, item 2;
docs/mechanisms-reference.md#consistent-estimates): every frequency mechanism sold gives consistent frequencies
(non-negative, summing to one) by both methods, each equal to an independent computation from the stored outputs
under the mechanism's exact law; the unbiased default is unchanged; what has no frequencies is refused."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from market.models import Purchase
from market.selectors import all_outputs
from mechanisms import consistency, estimators, olh, oue, registry, uldp
from mechanisms.exactness import krr_cells
from tests.factories import CategoricalAttributeFactory
from tests.market.api.conftest import POLICY, assert_problem, buy, client_for, contribute
from tests.market.oneshot_helpers import funded_buyer

pytestmark = pytest.mark.django_db

LABELS = ["l0", "l1", "l2", "l3", "l4"]
# one category nobody holds: where the unbiased estimate goes negative and consistency matters
RAWS = ["l0"] * 30 + ["l1"] * 20 + ["l2"] * 6 + ["l3"] * 4


def _estimate(api, purchase_id, method=None):
    url = f"/api/v1/purchases/{purchase_id}/estimate/" + (f"?method={method}" if method else "")
    r = api.get(url)
    assert r.status_code == 200, r.content
    return r.json()


def _consistent(freqs):
    f = np.array([row["estimate"] for row in freqs])
    assert (f >= 0).all() and f.sum() == pytest.approx(1.0, abs=1e-9)
    assert all(row["standard_error"] is None and row["ci95_low"] is None for row in freqs)
    return f


def _buy_oneshot(api, attribute, epsilon="1.5"):
    q = api.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": epsilon}, format="json")
    assert q.status_code == 200, q.content
    r = api.post("/api/v1/purchases/", {"quote": q.json()["quote"]}, format="json",
                 HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code == 201, r.content
    return r.json()["id"]


def test_chain_purchase_by_every_method(api):
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=POLICY)
    contribute(attribute, RAWS, ceiling="2", seed=4)
    p = buy(api, attribute.id, "0.5").json()
    _, out = all_outputs(Purchase.objects.get(id=p["id"]))
    y = out[:, 0]
    unbiased = _estimate(api, p["id"])
    assert unbiased["method"] == "unbiased" and unbiased["iterations"] is None
    assert np.allclose([r["estimate"] for r in unbiased["frequencies"]], estimators.frequencies(y, 0.5, 5), atol=1e-12)
    assert unbiased == _estimate(api, p["id"], "unbiased")

    norm = _estimate(api, p["id"], "norm_sub")
    assert norm["method"] == "norm_sub"
    f = _consistent(norm["frequencies"])
    assert np.allclose(f, estimators.project_simplex(estimators.frequencies(y, 0.5, 5)), atol=1e-12)

    ibu = _estimate(api, p["id"], "ibu")
    assert ibu["method"] == "ibu" and ibu["converged"] is True and ibu["iterations"] >= 1
    f = _consistent(ibu["frequencies"])
    # the chain's exact law at 0.5 from the sampler's integer cells; the KKT solution of the same likelihood
    cells = krr_cells(0.5, 5)
    law = (cells.keep / cells.total, cells.flip / cells.total, np.bincount(y, minlength=5))
    L, w = consistency.krr_likelihood([law])
    assert np.allclose(f, consistency.ibu(L, w).frequencies, atol=1e-12)
    # the maximum itself (the KKT solution, estimators.em_frequencies): the API's IBU stops once its
    # log-likelihood is provably within 1e-3 nats of it (mechanisms.consistency.IBU_TOLERANCE)
    best = estimators.em_frequencies(y, 0.5, 5)
    dense = L.dense()
    gap = float((w * np.log(dense @ best)).sum() - (w * np.log(dense @ f)).sum())
    assert -1e-9 <= gap <= consistency.IBU_TOLERANCE
    assert np.allclose(f, best, atol=1e-3)
    # the unbiased columns are unchanged beside the consistent estimate
    assert [r["projected"] for r in ibu["frequencies"]] == [r["projected"] for r in unbiased["frequencies"]]


def test_binary_mean_and_string_bits_follow_the_consistent_frequencies(api, binary, string):
    p = buy(api, binary.id, "0.3").json()
    est = _estimate(api, p["id"], "ibu")
    f = _consistent(est["frequencies"])
    assert est["mean"] == {"estimate": pytest.approx(f[1]), "standard_error": None, "ci95_low": None,
                           "ci95_high": None}
    p = buy(api, string.id, "1.5").json()
    unbiased = _estimate(api, p["id"])
    for method in ("norm_sub", "ibu"):
        bits = _estimate(api, p["id"], method)["bits"]
        assert all(0.0 <= b["estimate"] <= 1.0 and b["standard_error"] is None for b in bits)
    clipped = [min(max(b["estimate"], 0.0), 1.0) for b in unbiased["bits"]]
    assert [b["estimate"] for b in _estimate(api, p["id"], "norm_sub")["bits"]] == pytest.approx(clipped)


@pytest.mark.parametrize("mechanism", ["oue", "olh"])
def test_oue_and_olh_ibu_is_computed_under_the_exact_law_when_asked(mechanism):
    attribute = CategoricalAttributeFactory(mechanism=mechanism, labels=LABELS, price_policy=POLICY)
    contribute(attribute, RAWS * 3, ceiling="5", seed=9)
    api = client_for(funded_buyer("1000"))
    pid = _buy_oneshot(api, attribute)
    unbiased = _estimate(api, pid)
    assert all(r["maximum_likelihood"] is None for r in unbiased["frequencies"])  # not computed unless asked
    ibu = _estimate(api, pid, "ibu")
    f = _consistent(ibu["frequencies"])
    assert [r["maximum_likelihood"] for r in ibu["frequencies"]] == pytest.approx(list(f))
    _, out = all_outputs(Purchase.objects.get(id=pid))
    if mechanism == "oue":
        p, q = oue.probabilities(1.5)
        exact = np.array([[np.prod([(p if j == v else q) if bit else (1 - p if j == v else 1 - q)
                                    for j, bit in enumerate(row)]) for v in range(5)] for row in out])
    else:
        seeds, buckets = registry.olh_unpack(out)
        g = olh.olh_g(1.5)
        p, _ = olh.probabilities(1.5)
        hashed = olh.hash_values(seeds[:, None], np.arange(5, dtype=np.uint64)[None, :], g)
        exact = np.where(hashed == buckets[:, None], p, (1 - p) / (g - 1))
    reference = consistency.ibu(exact, tolerance=1e-9, max_iterations=1_000_000, accelerate=False)
    gap = float(np.log(exact @ reference.frequencies).sum() - np.log(exact @ f).sum())
    assert -1e-6 <= gap <= consistency.IBU_TOLERANCE  # the stopping rule's promise, under the exact law
    assert np.allclose(f, reference.frequencies, atol=1e-3)
    norm = _estimate(api, pid, "norm_sub")
    assert np.allclose(_consistent(norm["frequencies"]),
                       consistency.norm_sub([r["estimate"] for r in unbiased["frequencies"]]), atol=1e-12)


def test_urr_ibu_is_its_em_and_graph_purchases_are_refused():
    from tests.factories import GraphAttributeFactory, UrrAttributeFactory
    urr = UrrAttributeFactory(price_policy=POLICY)
    contribute(urr, ["a", "b", "c", "d", "e"] * 8, ceiling="5", seed=1)
    api = client_for(funded_buyer("1000"))
    pid = _buy_oneshot(api, urr, "1")
    unbiased = _estimate(api, pid)
    ibu = _estimate(api, pid, "ibu")
    f = _consistent(ibu["frequencies"])
    assert list(f) == pytest.approx([r["maximum_likelihood"] for r in unbiased["frequencies"]])
    shape = Purchase.objects.get(id=pid).attribute.shape
    _, out = all_outputs(Purchase.objects.get(id=pid))
    em = uldp.em_estimate(out[:, 0], len(shape.extended_labels), shape.extended_sensitive, 1.0, max_iter=2000).p
    assert np.allclose(f, em, atol=1e-9)

    lpp = GraphAttributeFactory(price_policy=POLICY, labels=["w", "x", "y", "z"])
    contribute(lpp, [{"w": 0.5, "z": -1}, {}, {"x": 1}] * 8, ceiling="5", seed=4)
    q = api.post("/api/v1/quotes/", {"attribute": lpp.id, "eps1": "1", "eps2": "2"}, format="json")
    assert q.status_code == 200, q.content
    r = api.post("/api/v1/purchases/", {"quote": q.json()["quote"]}, format="json",
                 HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code == 201, r.content
    gid = r.json()["id"]
    assert _estimate(api, gid)["method"] == "unbiased"
    for method in ("norm_sub", "ibu"):
        body = assert_problem(api.get(f"/api/v1/purchases/{gid}/estimate/?method={method}"), 400)
        assert body["type"].endswith("/estimate-method-unavailable")


def test_an_unknown_method_is_a_clear_400(api, categorical):
    p = buy(api, categorical.id, "1").json()
    body = assert_problem(api.get(f"/api/v1/purchases/{p['id']}/estimate/?method=mle"), 400)
    assert "method" in str(body)
