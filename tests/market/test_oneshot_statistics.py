"""The released outputs follow each mechanism's law, through the service path (purchase -> stored chunks).

Fixed seeds (a numpy Generator passed to ``oneshot_execute``), so every test is reproducible; each test also
states, by a power computation on its own group sizes, a wrong law it would detect (so none of them is a test
that cannot fail).  Chi-square tests pool the groups (one group per distinct true input) against the exact
output probabilities of the mechanism; cells of probability 0 must stay empty.  Surveys: the mean of seeded
repetitions is within 4 standard errors of the true proportion, and the spread of the estimates matches the
closed-form variance (a chi-square interval on the sample variance).
"""
from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from scipy import stats as sps

from audit.budget_audit import audit_budgets
from market.models import Value
from market.purchases import oneshot_specs
from market.selectors import all_outputs
from market.values import inputs, sealing
from market.values.services import value_set_pum_tag
from mechanisms import private_sampling, registry, rr3, surveys, uldp
from tests.factories import (
    BinaryAttributeFactory,
    DistributionAttributeFactory,
    GraphAttributeFactory,
    TernaryAttributeFactory,
    UrapAttributeFactory,
    UrrAttributeFactory,
)
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values
from tests.market.stats import chi_square, power, table

pytestmark = pytest.mark.django_db
ALPHA = 1e-3  # with a fixed seed the outcome is fixed; the level sets how far off a law must be to fail


def _released(purchase):
    ids, out = all_outputs(purchase)
    order = np.argsort(ids)
    return ids[order], out[order]


def _inputs(attribute, ids):
    rows = list(Value.objects.filter(id__in=ids.tolist()).order_by("id").values_list("owner_id", "input_sealed"))
    payload = sealing.open_inputs([bytes(r[1]) for r in rows], [r[0] for r in rows], [attribute.id] * len(rows),
                                  inputs.payload_bytes(attribute))
    return payload


def test_urr_with_pum_outputs_follow_the_extended_matrix():
    attribute = UrrAttributeFactory(price_policy=POLICY)  # a..e, S = {a, b}, tags home, work -> bots 5, 6
    raws = ["a", "b", "c", "d", "e"] * 160
    vs = values(attribute, raws, ceiling="2")
    for v in vs[2:300:5]:   # 60 values "c" tagged home: released as bot 5
        value_set_pum_tag(value_id=v.id, tag="home")
    for v in vs[0:300:5]:   # 60 values "a" tagged work: a is sensitive already and stays a
        value_set_pum_tag(value_id=v.id, tag="work")
    eps = 1.0
    purchase = run(funded_buyer(), attribute, epsilon="1", rng=np.random.default_rng(11))
    ids, out = _released(purchase)
    payload = _inputs(attribute, ids)
    z = registry._pum_inputs(attribute.shape, inputs.oneshot_inputs(attribute, payload), inputs.pum_tags_of(payload))
    assert np.bincount(z.values, minlength=7).tolist() == [160, 160, 100, 160, 160, 60, 0]
    Q = uldp.urr_matrix(7, z.sensitive, eps)
    counts = table(z.values, out[:, 0], 7, 7)
    stat, df, p = chi_square(counts[:6], Q[:6])
    assert p > ALPHA, (stat, df, p)
    # detects a mechanism that ignored the tags: a tagged "c" released as c (a cell of probability 0 here)
    sizes = counts[:6].sum(axis=1)
    assert (1 - Q[2, 2]) ** sizes[5] < 1e-6
    assert counts[5, 2] == 0 and counts[5, 5] > 0
    # ... and one that used uRR without extending S by the bots (the bot then a non-sensitive value)
    from mechanisms import rr_matrix
    plain = uldp.urr_matrix(7, z.sensitive[:2], eps)
    assert power(sizes[:5], Q[:5], plain[:5], ALPHA) > 0.99
    assert power(sizes, Q[:6], rr_matrix(eps, 7)[:6], ALPHA) > 0.99


def test_urap_bits_follow_their_bernoulli_laws():
    attribute = UrapAttributeFactory(price_policy=POLICY)
    vs = values(attribute, ["a", "b", "c", "d", "e"] * 200, ceiling="2")
    for v in vs[3:200:5]:  # "d" tagged work
        value_set_pum_tag(value_id=v.id, tag="work")
    eps = 1.2
    purchase = run(funded_buyer(), attribute, epsilon="1.2", rng=np.random.default_rng(12))
    ids, bits = _released(purchase)
    payload = _inputs(attribute, ids)
    z = registry._pum_inputs(attribute.shape, inputs.oneshot_inputs(attribute, payload), inputs.pum_tags_of(payload))
    assert np.bincount(z.values, minlength=7).tolist() == [200, 200, 200, 160, 200, 0, 40]
    # Def. 4 (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum), independently of the service's helpers
    h, e = math.exp(eps / 2), math.exp(eps)
    theta = h / (h + 1)
    d1, d2 = theta / ((1 - theta) * e + theta), ((1 - theta) * e + theta) / e
    S = set(z.sensitive.tolist())
    # the probability of each bit for each true (extended) input
    prob = np.zeros((7, 7))
    for x in range(7):
        for j in range(7):
            prob[x, j] = (theta if j == x else d1) if j in S else ((1 - d2) if j == x else 0.0)
    n = np.bincount(z.values, minlength=7)
    ones = np.array([bits[z.values == x].sum(axis=0) for x in range(7)])
    assert ones[prob == 0].sum() == 0  # a non-sensitive bit other than the input's own is never set
    live = (prob > 0) & (n[:, None] > 0)
    expected = (n[:, None] * prob)[live]
    var = (n[:, None] * prob * (1 - prob))[live]
    stat = float((((ones[live] - expected) ** 2) / var).sum())
    p = float(sps.chi2.sf(stat, live.sum()))
    assert p > ALPHA, (stat, p)
    # keeping a non-sensitive value's own bit w.p. theta (RAPPOR's rule) instead of 1 - d2 would be detected
    lam = float(sum(n[x] * (theta - (1 - d2)) ** 2 / ((1 - d2) * d2) for x in range(7) if x not in S and n[x]))
    assert sps.ncx2.sf(sps.chi2.isf(ALPHA, live.sum()), live.sum(), lam) > 0.99


@pytest.mark.parametrize("request_", [{"epsilon": "0.8"}, {"family": "rr3_ddagger", "eps1": "1", "eps2": "0.5"}])
def test_rr3_outputs_follow_the_matrix(request_):
    attribute = TernaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["none"] * 500 + ["plus"] * 400 + ["minus"] * 300, ceiling="2")
    purchase = run(funded_buyer(), attribute, rng=np.random.default_rng(13), **request_)
    ids, out = _released(purchase)
    x = inputs.oneshot_inputs(attribute, _inputs(attribute, ids))
    keep = lambda e: math.exp(float(e)) / (math.exp(float(e)) + 1)  # noqa: E731
    # the law, from the spec (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp), independently of the
    # service's own matrix
    if "eps1" in request_:
        P = rr3.rr3_ddagger(keep(request_["eps1"]), keep(request_["eps2"]))
    else:
        e = math.exp(float(request_["epsilon"]))
        P = rr3.ewrr_matrix(3, e / (e + 2))
    counts = table(x, out[:, 0], 3, 3)
    stat, df, p = chi_square(counts, P)
    assert p > ALPHA, (stat, df, p)
    # the low branch p = 1/(2 e^eps + 1) (as eps-LDP, but always worse) and RR3† would be detected
    eps = float(purchase.charged_epsilon)
    assert power(counts.sum(axis=1), P, rr3.ewrr_matrix(3, 1 / (2 * math.exp(eps) + 1)), ALPHA) > 0.99
    if "eps1" in request_:  # RR3† and RR3‡ with eps1 and eps2 swapped would be detected
        dagger = rr3.rr3_dagger(keep(request_["eps1"]), keep(request_["eps2"]))
        assert power(counts.sum(axis=1), P, dagger, ALPHA) > 0.99
        swapped = rr3.rr3_ddagger(keep(request_["eps2"]), keep(request_["eps1"]))
        assert power(counts.sum(axis=1), P, swapped, ALPHA) > 0.99


def test_private_samples_follow_p_times_the_optimal_kernel():
    attribute = DistributionAttributeFactory(price_policy=POLICY)  # prior (0.2, 0.3, 0.5)
    dists = [[1, 0, 0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [0, 0.5, 0.5]]
    values(attribute, [d for d in dists for _ in range(300)], ceiling="2")
    purchase = run(funded_buyer(), attribute, epsilon="1", rng=np.random.default_rng(14))
    ids, out = _released(purchase)
    p = inputs.oneshot_inputs(attribute, _inputs(attribute, ids))
    group = np.array([dists.index([round(v, 6) for v in row]) if [round(v, 6) for v in row] in dists else -1
                      for row in p.tolist()])
    assert (group >= 0).all()
    law = private_sampling.output_distribution(np.array(dists, dtype=float), np.array([0.2, 0.3, 0.5]), 1.0)
    counts = table(group, out[:, 0], 4, 3)
    stat, df, pv = chi_square(counts, law)
    assert pv > ALPHA, (stat, df, pv)
    # releasing p itself (no privacy) would be detected
    assert power(counts.sum(axis=1), law, np.array(dists, dtype=float) * 0.98 + 0.02 / 3, ALPHA) > 0.99


def test_lpp_reports_follow_the_protocol():
    attribute = GraphAttributeFactory(price_policy=POLICY, num_items=3)
    owners = [{"0": 1.0, "1": -0.5}, {}, [0.2, 0.2, 0.2]]
    values(attribute, [o for o in owners for _ in range(600)], ceiling="5")
    eps1, eps2 = 1.0, 0.7
    purchase = run(funded_buyer(), attribute, eps1="1", eps2="0.7", rng=np.random.default_rng(15))
    ids, out = _released(purchase)
    w = inputs.oneshot_inputs(attribute, _inputs(attribute, ids))
    configs = [np.array([1.0, -0.5, np.nan]), np.full(3, np.nan), np.full(3, 0.2)]
    group = np.array([next(k for k, c in enumerate(configs) if np.allclose(row, c, equal_nan=True, atol=1e-6))
                      for row in w])
    P = rr3.rr3_ddagger(1 / (1 + math.exp(-eps1)), 1 / (1 + math.exp(-eps2)))
    law = np.zeros((3, 9))
    for k, c in enumerate(configs):
        for j in range(3):
            if np.isnan(c[j]):
                row = P[0]
            else:
                row = (1 + c[j]) / 2 * P[1] + (1 - c[j]) / 2 * P[2]
            law[k, 3 * j:3 * j + 3] = row / 3
    counts = table(group, out[:, 0] * 3 + out[:, 1], 3, 9)
    stat, df, pv = chi_square(counts, law)
    assert pv > ALPHA, (stat, df, pv)
    wrong = law.copy()  # an edge's sign not randomized by eps2 (always kept)
    for k, c in enumerate(configs):
        for j in range(3):
            if not np.isnan(c[j]):
                keep = rr3.rr3_ddagger(1 / (1 + math.exp(-eps1)), 1.0)
                wrong[k, 3 * j:3 * j + 3] = ((1 + c[j]) / 2 * keep[1] + (1 - c[j]) / 2 * keep[2]) / 3
    assert power(counts.sum(axis=1), law, wrong, ALPHA) > 0.99


SURVEYS = [("warner", {}), ("simmons", {"pi_b": "0.3"}), ("christofides", {"p2": "0.1"}),
           ("improved_christofides", {"p2": "0.1"})]


@pytest.mark.parametrize("mechanism, extra", SURVEYS)
def test_survey_estimates_are_unbiased_and_their_variance_is_the_closed_form(mechanism, extra):
    N, yes, R, eps = 200, 60, 40, 1.0
    pi = yes / N
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes"] * yes + ["no"] * (N - yes), ceiling="45")
    buyer = funded_buyer("100000")
    estimates, reported = [], []
    for r in range(R):
        p = run(buyer, attribute, mechanism=mechanism, epsilon="1", rng=np.random.default_rng(1000 + r), **extra)
        assert p.included == N
        estimates.append(p.result["estimate"])
        reported.append(p.result["variance"])
    spec = oneshot_specs.parse_spec(attribute, mechanism=mechanism, epsilon="1", **extra)
    from market.purchases.oneshot_stats import survey_variance

    var = survey_variance(spec, N, pi)  # the closed form at the true proportion
    est = np.array(estimates)
    assert abs(est.mean() - pi) <= 4 * math.sqrt(var / R), (est.mean(), pi, var)
    s2 = est.var(ddof=1)
    lo, hi = sps.chi2.ppf(1e-4, R - 1) / (R - 1), sps.chi2.isf(1e-4, R - 1) / (R - 1)
    assert lo <= s2 / var <= hi, (s2, var)
    if mechanism in ("warner", "christofides"):  # the reported variance does not depend on pi
        assert np.allclose(reported, var)
    # a biased estimator (off by one standard error of a single survey) would fail the mean check
    assert math.sqrt(var) > 4 * math.sqrt(var / R)
    if mechanism == "improved_christofides":
        mc = surveys.christofides_variance(np.array([c / N for c in oneshot_specs.ic_deck(N, Decimal(1), 0.1)]), N)
        assert var < mc  # IC's advantage at pi = 0.3 (outside the no-advantage interval)
    assert eps == 1.0
    report = audit_budgets()
    assert report.ok, report.as_text()
