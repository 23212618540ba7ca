"""OUE and OLH as sold (issue 14, item 3): quotes, purchases through the API, outputs (JSON and CSV), estimates
that are unbiased within their standard errors, the exact charge, the sampler's limit, and the audit afterwards.

The mathematics (unbiasedness, variances, exact levels, agreement with pure-ldp) is tested in
tests/mechanisms/test_oue_olh.py; here the mechanisms go through the market's one path
(docs/mechanisms.md#the-mechanism-registry).
"""
from __future__ import annotations

import csv
import io
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.db import IntegrityError, transaction
from scipy.stats import chi2

from accounts.models import BudgetAccount, LedgerEntry
from audit.budget_audit import audit_budgets
from market.models import Attribute, Purchase
from market.selectors import all_outputs
from mechanisms import olh, oue, registry
from tests.factories import CategoricalAttributeFactory
from tests.market.api.conftest import POLICY, assert_problem, client_for, contribute
from tests.market.oneshot_helpers import funded_buyer, run

pytestmark = pytest.mark.django_db

LABELS = [f"l{j}" for j in range(8)]
SHARES = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05])


def _attribute(mechanism: str, n: int, seed: int, ceiling: str = "5"):
    attribute = CategoricalAttributeFactory(mechanism=mechanism, labels=LABELS, price_policy=POLICY)
    counts = np.round(SHARES * n).astype(int)
    raws = [label for label, c in zip(LABELS, counts) for _ in range(c)]
    contribute(attribute, raws, ceiling=ceiling, seed=seed)
    return attribute, counts / counts.sum()


def post(client, path, body):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)


@pytest.mark.parametrize("mechanism", ["oue", "olh"])
def test_quote_purchase_outputs_and_estimate_through_the_api(mechanism):
    attribute, truth = _attribute(mechanism, 400, seed=1)
    buyer = funded_buyer("1000")
    api = client_for(buyer)
    q = post(api, "/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "1.5"})
    assert q.status_code == 200, q.content
    quote = q.json()
    assert (quote["mechanism"], quote["charged_epsilon"], quote["guarantee"], quote["included"]) == (
        mechanism, "1.500000", "ldp", 400)
    predicted = quote["predicted_error"]
    variance = (oue.oue_variance if mechanism == "oue" else olh.olh_variance)
    assert predicted["target"] == "frequency" and len(predicted["per_category"]) == len(LABELS)
    assert predicted["standard_error"] == pytest.approx(float(np.sqrt(variance(Decimal("1.5"), 400, 1 / 8))))
    assert predicted["worst_case_standard_error"] == pytest.approx(float(np.sqrt(variance(Decimal("1.5"), 400, 1.0))))
    r = post(api, "/api/v1/purchases/", {"quote": quote["quote"]})
    assert r.status_code == 201, r.content
    p = r.json()
    assert (p["status"], p["charged_epsilon"], p["included"]) == ("completed", "1.500000", 400)
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("oneshot_loss", flat=True)) == {
        Decimal("1.5")}
    assert LedgerEntry.objects.filter(purchase_id=p["id"], kind="oneshot_release", guarantee="ldp").count() == 400

    rows = api.get(f"/api/v1/purchases/{p['id']}/outputs/?page_size=500").json()["results"]
    outputs = [row["output"] for row in rows]
    assert len(outputs) == 400
    if mechanism == "oue":
        assert all(len(o) == len(LABELS) and set(o) <= {0, 1} for o in outputs)
    else:  # "seed:bucket", the seed a 2^32 + b with a in 1..P-1, b in 0..P-1, the bucket below g
        g = olh.olh_g(Decimal("1.5"))
        seeds = np.array([int(o.split(":")[0]) for o in outputs], dtype=np.uint64)
        buckets = np.array([int(o.split(":")[1]) for o in outputs])
        a, b = olh.split_seed(seeds)
        assert (a >= 1).all() and (a < olh.P).all() and (b < olh.P).all()
        assert buckets.min() >= 0 and buckets.max() < g
        assert np.unique(seeds).size > 390  # a fresh hash per report
    body = b"".join(api.get(f"/api/v1/purchases/{p['id']}/outputs/?format=csv").streaming_content).decode()
    lines = list(csv.reader(io.StringIO(body)))
    assert lines[0] == ["pseudonym", "epsilon", "output"] and len(lines) == 401
    if mechanism == "oue":
        assert all(len(line[2]) == len(LABELS) and set(line[2]) <= {"0", "1"} for line in lines[1:])
    else:
        assert sorted(line[2] for line in lines[1:]) == sorted(outputs)

    e = api.get(f"/api/v1/purchases/{p['id']}/estimate/").json()
    assert e["mechanism"] == mechanism and e["n"] == 400 and e["guarantee"] == "ldp"
    est = np.array([f["estimate"] for f in e["frequencies"]])
    se = np.array([f["standard_error"] for f in e["frequencies"]])
    assert [f["label"] for f in e["frequencies"]] == LABELS
    assert (np.abs(est - truth) < 4 * se).all(), (est, truth, se)
    report = audit_budgets()
    assert report.ok, report.as_text()


@pytest.mark.parametrize("mechanism", ["oue", "olh"])
def test_estimates_are_unbiased_over_purchases_with_the_predicted_spread(mechanism):
    """20 purchases of 300 values each at epsilon 1 (fixed seeds): the mean estimate of every label is within 4
    standard errors of its true share, and the spread of the estimates matches the closed-form variance (19 times
    the ratio of the sample variance of 20 draws to it lies between the chi-square(19) quantiles at 1e-4 and
    1 - 1e-4)."""
    attribute, truth = _attribute(mechanism, 300, seed=2)
    buyer = funded_buyer("100000")
    variance = oue.oue_variance if mechanism == "oue" else olh.olh_variance
    rounds = 20
    estimates = []
    for k in range(rounds):
        BudgetAccount.objects.filter(value__attribute=attribute).update(oneshot_loss=Decimal(0))
        p = run(buyer, attribute, epsilon="1", rng=np.random.default_rng(100 + k))
        _, out = all_outputs(p)
        estimates.append(registry.get(mechanism).estimate(attribute.shape, out, p.charged_epsilon, p.parameters))
    est = np.array([[f["estimate"] for f in e["frequencies"]] for e in estimates])
    var = variance(Decimal(1), 300, truth)
    assert (np.abs(est.mean(axis=0) - truth) < 4 * np.sqrt(var / rounds)).all()
    statistic = (rounds - 1) * est.var(axis=0, ddof=1) / var
    low, high = chi2.ppf([1e-4, 1 - 1e-4], rounds - 1)
    assert ((statistic > low) & (statistic < high)).all(), (statistic, low, high)


def test_the_charge_is_the_requested_epsilon_and_the_samplers_realise_at_most_it():
    for mechanism, level in (("oue", oue.oue_level), ("olh", olh.olh_level)):
        attribute, _ = _attribute(mechanism, 40, seed=3)
        p = run(funded_buyer(), attribute, epsilon="0.7", rng=np.random.default_rng(0))
        assert (p.charged_epsilon, p.guarantee, p.mechanism) == (Decimal("0.7"), "ldp", mechanism)
        assert level(p.charged_epsilon).at_most(p.charged_epsilon)


def test_olh_refuses_an_epsilon_whose_buckets_do_not_fit_the_stored_outputs():
    attribute, _ = _attribute("olh", 40, seed=4, ceiling="11")
    api = client_for(funded_buyer())
    body = assert_problem(post(api, "/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "10.5"}), 400)
    assert "epsilon" in body["errors"] and "10.397" in str(body["errors"]["epsilon"]), body
    ok = post(api, "/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "10.39"})
    assert ok.status_code == 200, ok.content


def test_oue_and_olh_take_only_epsilon():
    attribute, _ = _attribute("oue", 40, seed=5)
    api = client_for(funded_buyer())
    body = assert_problem(post(api, "/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "1", "theta": "0.5"}),
                          400)
    assert "theta" in body["errors"], body


def test_the_database_keeps_oue_and_olh_on_categorical_attributes_with_the_ldp_guarantee():
    attribute, _ = _attribute("olh", 5, seed=6)
    with pytest.raises(IntegrityError), transaction.atomic():
        Attribute.objects.filter(id=attribute.id).update(kind="ternary")
    p = run(funded_buyer(), attribute, epsilon="1", rng=np.random.default_rng(0))
    with pytest.raises(IntegrityError), transaction.atomic():
        Purchase.objects.filter(id=p.id).update(guarantee="uldp")
