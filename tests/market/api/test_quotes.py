"""POST /api/v1/quotes/: counts, exclusions, price, predicted error; and every bad input is a 400 problem."""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal

import numpy as np
import pytest
from django.utils import timezone

from accounts.models import BudgetAccount
from market.models import Purchase, Value
from market.purchases.pricing import PricePolicy
from market.values import services
from mechanisms import estimators, rr
from tests.factories import CategoricalAttributeFactory
from tests.market.api.conftest import POLICY, assert_problem, buy, contribute

pytestmark = pytest.mark.django_db


def quote(api, attribute_id, epsilon, **extra):
    return api.post("/api/v1/quotes/", {"attribute": attribute_id, "epsilon": epsilon, **extra}, format="json")


def test_quote_counts_prices_and_expires(api, categorical):
    before = timezone.now()
    r = quote(api, categorical.id, "1.5")
    assert r.status_code == 200, r.content
    q = r.json()
    assert q["attribute"] == categorical.id and q["epsilon"] == "1.500000" and q["cohort"] is None
    assert q["candidates"] == q["included"] == 60
    assert q["excluded"] == {"ceiling": 0, "budget": 0, "paused": 0, "withdrawn": 0, "no_raw": 0, "awaiting_owner": 0}
    per_value = PricePolicy.parse(POLICY).price(Decimal("1.5"))
    assert Decimal(q["price_per_value"]) == per_value
    assert Decimal(q["price"]) == Decimal(q["list_price"]) == per_value * 60
    assert Decimal(q["upgrade_credit"]) == 0
    expires = datetime.fromisoformat(q["expires_at"].replace("Z", "+00:00"))
    assert before + timedelta(minutes=14) < expires < timezone.now() + timedelta(minutes=16)
    assert q["quote"]
    assert not Purchase.objects.exists()  # a quote buys nothing


def test_quote_counts_every_kind_of_exclusion(api, categorical):
    values = list(Value.objects.filter(attribute=categorical).order_by("id"))
    BudgetAccount.objects.filter(value__in=values[:5]).update(ceiling=Decimal("0.5"))
    BudgetAccount.objects.filter(value__in=values[5:9]).update(paused=True)
    Value.objects.filter(id__in=[v.id for v in values[9:12]]).update(withdrawn_at=timezone.now())
    for v in values[12:14]:
        services.value_delete_raw(value_id=v.id)  # chains stop at 2: sellable up to 2, not above
    q = quote(api, categorical.id, "1.5").json()
    assert q["excluded"] == {"ceiling": 5, "budget": 0, "paused": 4, "withdrawn": 3, "no_raw": 0, "awaiting_owner": 0}
    assert q["included"] == 60 - 12
    BudgetAccount.objects.filter(value__in=values[12:]).update(ceiling=Decimal("3"))
    q = quote(api, categorical.id, "2.5").json()  # above the raw-deleted values' chain heads (2.0)
    assert q["excluded"] == {"ceiling": 5, "budget": 0, "paused": 4, "withdrawn": 3, "no_raw": 2, "awaiting_owner": 0}
    assert q["included"] == 60 - 14
    r = buy(api, categorical.id, "2.5").json()  # the purchase agrees with its quote
    assert (r["included"], r["excluded"]) == (q["included"], q["excluded"])


def test_quote_for_a_cohort_of_a_string_attribute(api, string):
    total = 0
    for cohort in range(string.num_cohorts):
        q = quote(api, string.id, "1", cohort=cohort).json()
        assert q["cohort"] == cohort
        assert q["candidates"] == Value.objects.filter(attribute=string, cohort=cohort).count()
        total += q["included"]
    assert total == 40
    assert_problem(quote(api, string.id, "1", cohort=string.num_cohorts), 400)


def test_predicted_error_is_data_independent(api, categorical, binary, numeric, string):
    for attribute in (categorical, binary, numeric, string):
        q = quote(api, attribute.id, "1").json()
        p, n = q["predicted_error"], q["included"]
        assert p["standard_error"] > 0 and p["worst_case_standard_error"] >= p["standard_error"] * (1 - 1e-12)
        e, m = 1.0 / attribute.draw_divisor, attribute.domain_size  # strings' bits: epsilon / (2 num_hashes)
        if attribute.kind == "numeric":
            lo, hi = float(attribute.low), float(attribute.high)
            assert p["target"] == "mean"
            assert p["standard_error"] == pytest.approx(math.sqrt(
                estimators.mean_variance((lo + hi) / 2, e, lo, hi, n)))
            continue
        expected = math.sqrt(estimators.frequency_variance_fixed(np.full(m, 1 / m), e, m, n)[0])
        assert p["standard_error"] == pytest.approx(expected)
        if attribute.kind == "string":
            assert p["target"] == "bit_frequency" and p["per_category"] == []
        else:
            assert [c["label"] for c in p["per_category"]] == (["red", "green", "blue"] if m == 3 else ["no", "yes"])
    # the same counts with entirely different data give the same prediction


    other = CategoricalAttributeFactory(labels=["red", "green", "blue"], price_policy=POLICY)
    contribute(other, ["red"] * 60, ceiling="2")
    assert quote(api, other.id, "1").json()["predicted_error"] == quote(api, categorical.id, "1").json()[
        "predicted_error"]


# -------------------------------------------------------------------------------- predicted vs realised

def _chi2_bounds(reps: int, alpha: float) -> tuple[float, float]:
    from scipy.stats import chi2

    return chi2.ppf(alpha / 2, reps) / reps, chi2.ppf(1 - alpha / 2, reps) / reps


@pytest.mark.slow
def test_quoted_standard_error_matches_the_realised_error_of_repeated_purchases(api):
    """200 fresh randomizations of a uniform population: sum(err^2)/SE^2 is chi-square(200) per category.

    The quote's SE is at f = 1/m (uniform); with a population concentrated in one
    category the realised error of that category (f = 1) and the others (f = 0)
    bracket the quoted worst case, which must equal the larger of the two.
    """


    labels = ["a", "b", "c", "d"]
    m, n, eps, reps = 4, 400, 0.8, 200
    attribute = CategoricalAttributeFactory(labels=labels, price_policy=POLICY)
    contribute(attribute, labels * (n // m), ceiling="1")
    p = quote(api, attribute.id, str(eps)).json()["predicted_error"]
    lo, hi = _chi2_bounds(reps, 0.001 / m)
    gen = np.random.default_rng(20250101)

    x = np.repeat(np.arange(m), n // m)
    err = np.array([estimators.frequencies(rr.perturb(x, eps, m, gen), eps, m) - 1 / m for _ in range(reps)])
    ratio = (err ** 2).mean(axis=0) / p["standard_error"] ** 2
    assert np.all((lo < ratio) & (ratio < hi)), (ratio, lo, hi)

    x = np.zeros(n, dtype=np.int64)  # everyone in category 0: f = (1, 0, 0, 0)
    err = np.array([estimators.frequencies(rr.perturb(x, eps, m, gen), eps, m) - np.eye(m)[0] for _ in range(reps)])
    rmse = np.sqrt((err ** 2).mean(axis=0))
    worst = max(rmse[0], rmse[1:].max())
    assert lo < (worst / p["worst_case_standard_error"]) ** 2 < hi


@pytest.mark.slow
def test_quoted_standard_error_of_a_mean_matches_the_realised_error(api, numeric):
    """Numeric: values spread uniformly over [low, high], each discretized and randomized afresh."""
    from mechanisms.numeric import discretize

    eps, reps = 1.0, 200
    n = quote(api, numeric.id, str(eps)).json()["included"]
    se = quote(api, numeric.id, str(eps)).json()["predicted_error"]["standard_error"]
    lo_b, hi_b = float(numeric.low), float(numeric.high)
    gen = np.random.default_rng(7)
    values = np.linspace(lo_b, hi_b, n)
    err = [estimators.mean(rr.perturb(discretize(values, lo_b, hi_b, gen), eps, 2, gen), eps, lo_b, hi_b)
           - values.mean() for _ in range(reps)]
    lo, hi = _chi2_bounds(reps, 0.001)
    assert lo < np.mean(np.square(err)) / se ** 2 < hi


# ------------------------------------------------------------------------------------------- bad input

BAD_EPSILONS = {
    "NaN string": "NaN",
    "nan lower": "nan",
    "inf string": "inf",
    "Infinity string": "Infinity",
    "-inf": "-inf",
    "negative": -1,
    "negative string": "-0.5",
    "zero": 0,
    "zero string": "0",
    "zero float": 0.0,
    "1e308": 1e308,
    "1e308 string": "1e308",
    "huge integer": 10 ** 30,
    "above the limit 30": "30.000001",
    "a word": "abc",
    "empty": "",
    "seven decimals": "0.1234567",
    "seven decimals number": 0.1234567,
    "tiny": 1e-7,
    "true": True,
    "null": None,
    "list": [1],
    "object": {"e": 1},
}


@pytest.mark.parametrize("endpoint", ["quotes", "purchases"])
@pytest.mark.parametrize("name", list(BAD_EPSILONS))
def test_bad_epsilon_is_a_400_problem(api, categorical, endpoint, name):
    body = {"attribute": categorical.id, "epsilon": BAD_EPSILONS[name]}
    r = api.post(f"/api/v1/{endpoint}/", body, format="json", HTTP_IDEMPOTENCY_KEY=name.replace(" ", "-"))
    problem = assert_problem(r, 400)
    assert "epsilon" in problem["errors"], problem
    assert problem["errors"]["epsilon"][0]
    assert not Purchase.objects.exists()


@pytest.mark.parametrize("endpoint", ["quotes", "purchases"])
@pytest.mark.parametrize("epsilon", ["30.000001", "44.4", "700"])
def test_an_epsilon_the_samplers_cannot_honour_is_refused_naming_the_limit(api, categorical, endpoint, epsilon):
    r = api.post(f"/api/v1/{endpoint}/", {"attribute": categorical.id, "epsilon": epsilon}, format="json",
                 HTTP_IDEMPOTENCY_KEY="limit-" + epsilon)
    message = assert_problem(r, 400)["errors"]["epsilon"][0]
    assert "at most 30" in message and "docs/mechanisms.md" in message
    assert not Purchase.objects.exists()


def test_the_limit_itself_is_sold(api):
    attribute = CategoricalAttributeFactory(price_policy=POLICY, grid_stop=Decimal("30"))
    contribute(attribute, ["red", "green", "blue"] * 4, ceiling="30")
    r = api.post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "30"}, format="json",
                 HTTP_IDEMPOTENCY_KEY="at-the-limit")
    assert r.status_code == 201, r.content
    assert r.json()["included"] == 12


@pytest.mark.parametrize("endpoint", ["quotes", "purchases"])
@pytest.mark.parametrize("raw", [b'{"attribute": 1, "epsilon": NaN}', b'{"attribute": 1, "epsilon": Infinity}',
                                 b'{"attribute": 1, "epsilon": -Infinity}', b'{"attribute": 1, "epsilon": 1e99999}',
                                 b'{"attribute": 1, "epsilon": 0.1000000000000000001}', b'{"attribute": 1,',
                                 b'[]', b'"x"', b'null', b'\xff\xfe'])
def test_non_json_numbers_and_malformed_bodies_are_400_problems(api, categorical, endpoint, raw):
    raw = raw.replace(b'"attribute": 1', b'"attribute": %d' % categorical.id)
    r = api.post(f"/api/v1/{endpoint}/", raw, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert_problem(r, 400)


@pytest.mark.parametrize("endpoint", ["quotes", "purchases"])
@pytest.mark.parametrize("body, field", [
    ({"attribute": 999999, "epsilon": "1"}, "attribute"),
    ({"attribute": "abc", "epsilon": "1"}, "attribute"),
    ({"attribute": 1.5, "epsilon": "1"}, "attribute"),
    ({"attribute": 2 ** 70, "epsilon": "1"}, "attribute"),
    ({"attribute": -1, "epsilon": "1"}, "attribute"),
    ({"attribute": True, "epsilon": "1"}, "attribute"),
    ({"epsilon": "1"}, "attribute"),
    ({"attribute": "ATTR"}, "epsilon"),
    ({"attribute": "ATTR", "epsilon": "1", "cohort": -1}, "cohort"),
    ({"attribute": "ATTR", "epsilon": "1", "cohort": "x"}, "cohort"),
    ({"attribute": "ATTR", "epsilon": "1", "cohort": 1.5}, "cohort"),
    ({"attribute": "ATTR", "epsilon": "1", "cohort": 2 ** 40}, "cohort"),
    ({"attribute": "ATTR", "epsilon": "1", "cohort": [0]}, "cohort"),
    ({"attribute": "ATTR", "epsilon": "1", "cohort": 3}, "cohort"),  # categorical attributes have no cohorts
])
def test_unknown_attribute_and_malformed_cohort_are_400_problems(api, categorical, endpoint, body, field):
    body = {k: (categorical.id if v == "ATTR" else v) for k, v in body.items()}
    r = api.post(f"/api/v1/{endpoint}/", body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    problem = assert_problem(r, 400)
    assert field in problem["errors"], problem


def test_form_encoded_requests_work_too(api, categorical):
    r = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "0.5"}, format="multipart")
    assert_problem(r, 415)
    r = api.post("/api/v1/quotes/", f"attribute={categorical.id}&epsilon=0.5",
                 content_type="application/x-www-form-urlencoded")
    assert r.status_code == 200 and r.json()["epsilon"] == "0.500000"


def test_a_spent_budget_is_a_remaining_budget_exclusion_not_a_ceiling_below_the_epsilon(api, categorical):
    """Issue 13: values whose ceiling is above the epsilon but whose remaining budget (ceiling minus one-shot loss
    already spent) is too small were counted and reported as "a ceiling below it"."""
    values = list(Value.objects.filter(attribute=categorical).order_by("id"))
    BudgetAccount.objects.filter(value__in=values[:5]).update(ceiling=Decimal("0.5"))  # below 1.5
    BudgetAccount.objects.filter(value__in=values[5:12]).update(ceiling=Decimal("2"), oneshot_loss=Decimal("1"))
    q = quote(api, categorical.id, "1.5").json()  # 1.5 + 1 > 2, though 2 >= 1.5
    assert q["excluded"] == {"ceiling": 5, "budget": 7, "paused": 0, "withdrawn": 0, "no_raw": 0, "awaiting_owner": 0}
    assert q["included"] == 60 - 12
    r = buy(api, categorical.id, "1.5").json()
    assert r["excluded"] == q["excluded"]


def test_a_refusal_for_spent_budget_says_remaining_budget(api, categorical):
    BudgetAccount.objects.filter(value__attribute=categorical).update(ceiling=Decimal("2"), oneshot_loss=Decimal("1"))
    problem = assert_problem(buy(api, categorical.id, "1.5"), 400)
    assert (problem["excluded"]["ceiling"], problem["excluded"]["budget"]) == (0, 60)
    assert "0 have a ceiling below it, 60 have too little budget remaining" in problem["detail"]
