"""Utility-optimized LDP: uRR, uRAP, PUM, post-processing
(docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum).

Exact checks build every mechanism matrix from the paper's definitions (independently of the code
under test: Def. 3 and Def. 4 with the paper's own, non-stable formulas) and enumerate it.  Monte
Carlo checks use fixed seeds; each tolerance is derived from the sampling distribution (4 standard
errors, or chi-square p-values above 1e-4 seeded / 1e-7 through the secure default), and the comment
beside it names the bug it would catch.  Each place where the spec says the paper is wrong has a test
showing the paper's form fails and the corrected one holds.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mechanisms import rr_matrix, uldp
from tests.mechanisms.test_sampling import SECURE_ALPHA, SEEDED_ALPHA, chi_square_p

Z = 4.0  # standard errors allowed by every Monte Carlo check


def rng(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# independent constructions from the paper's definitions
# ---------------------------------------------------------------------------------------------

def paper_urr(k, S, eps):
    """Def. 3 (Eq. 6) verbatim, with the paper's c1, c2, c3."""
    e, s = math.exp(eps), len(S)
    c1, c2, c3 = e / (s + e - 1), 1 / (s + e - 1), (e - 1) / (s + e - 1)
    Q = np.zeros((k, k))
    for x in range(k):
        for y in range(k):
            if x in S:
                Q[x, y] = c1 if y == x else (c2 if y in S else 0.0)
            else:
                Q[x, y] = c2 if y in S else (c3 if y == x else 0.0)
    return Q


def patterns(k):
    """All 2^k bit vectors, row r = binary digits of r (bit j = (r >> j) & 1)."""
    return ((np.arange(2 ** k)[:, None] >> np.arange(k)) & 1).astype(bool)


def pattern_index(bits):
    return (np.asarray(bits, dtype=np.int64) << np.arange(bits.shape[1])).sum(axis=1)


def paper_urap(k, S, eps, theta=None):
    """Def. 4 (Eqs. 8-10) verbatim: Q[x, y] = prod_j Pr(y_j | x) over all 2^k bit vectors y."""
    e = math.exp(eps)
    theta = math.exp(eps / 2) / (math.exp(eps / 2) + 1) if theta is None else theta
    d1 = theta / ((1 - theta) * e + theta)
    d2 = ((1 - theta) * e + theta) / e
    Y = patterns(k)
    Q = np.ones((k, Y.shape[0]))
    for x in range(k):
        for j in range(k):
            yj = Y[:, j]
            if j in S:
                p1 = theta if j == x else d1
            else:
                p1 = (1 - d2) if j == x else 0.0
            Q[x] *= np.where(yj, p1, 1 - p1)
    return Q


def urap_protected(k, S):
    """Eq. 7: the protected outputs are the bit vectors with every non-sensitive bit 0."""
    non = [j for j in range(k) if j not in S]
    return ~patterns(k)[:, non].any(axis=1)


URR_CASES = [(2, [1], 0.7), (3, [0], 0.1), (5, [1, 3], 1.0), (6, [0, 2, 5], 2.5), (7, [4], 5.0),
             (6, [0, 1, 2, 3, 4], 0.01), (8, [2, 7], 30.0)]


# ---------------------------------------------------------------------------------------------
# matrices: exact ULDP levels
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k,S,eps", URR_CASES)
def test_urr_matrix_is_definition_3_and_exactly_eps_uldp(k, S, eps):
    Q = uldp.urr_matrix(k, S, eps)
    np.testing.assert_allclose(Q, paper_urr(k, S, eps), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=1e-13)
    # the level on Y_P = S is eps exactly (attained: c1/c2 = e^eps), with Y_P inferred or given
    assert uldp.check_uldp(Q, S) == pytest.approx(eps, rel=1e-9, abs=1e-12)
    assert uldp.check_uldp(Q, S, protected=S) == pytest.approx(eps, rel=1e-9, abs=1e-12)
    # protecting fewer outputs breaks condition (1) (an output in S is reachable from every input)
    assert uldp.check_uldp(Q, S, protected=S[1:]) == math.inf
    # declaring a non-sensitive value sensitive: it reaches its own (invertible) output -> no ULDP
    extra = sorted(set(S) | {next(v for v in range(k) if v not in S)})
    assert uldp.check_uldp(Q, extra) == math.inf
    # and uRR is not eps'-LDP for any eps' (zeros in the invertible columns)
    assert uldp.check_uldp(Q, S, protected=np.ones(k, dtype=bool)) == math.inf


@pytest.mark.parametrize("k,S", [(3, [0]), (4, [1, 2]), (5, [0, 4]), (6, [1, 3, 5]), (4, [0, 1, 2, 3])])
@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("theta", [None, 0.2, 0.5, 0.9])
def test_urap_enumerated_matrix_is_exactly_eps_uldp_for_every_theta(k, S, eps, theta):
    """Prop. 3 for all 2^k outputs: the worst ratio over Y_P (Eq. 7) is e^eps, for any theta."""
    Q = paper_urap(k, S, eps, theta)
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, rtol=1e-12)
    assert uldp.check_uldp(Q, S, protected=urap_protected(k, S)) == pytest.approx(eps, rel=1e-9)
    assert uldp.check_uldp(Q, S) == pytest.approx(eps, rel=1e-9)


def test_check_uldp_finds_the_invertible_outputs_of_urap():
    """The inferred Y_I of uRAP is exactly the vectors with one non-sensitive bit (condition (1))."""
    k, S, eps = 5, [1, 3], 1.2
    Q = paper_urap(k, S, eps)
    Y = patterns(k)
    one_non = Y[:, [0, 2, 4]].sum(axis=1) == 1
    support = (Q > 0).sum(axis=0)
    assert (support[one_non] == 1).all()  # each is produced by exactly one (non-sensitive) input
    assert np.isin(np.argmax(Q[:, one_non] > 0, axis=0), [0, 2, 4]).all()
    assert (Q[:, Y[:, [0, 2, 4]].sum(axis=1) >= 2] == 0).all()  # malformed vectors never occur
    prot = urap_protected(k, S)
    # giving a protected output to Y_I or an invertible one to Y_P both fail
    worse = prot.copy()
    worse[np.flatnonzero(prot)[3]] = False
    assert uldp.check_uldp(Q, S, protected=worse) == math.inf
    assert uldp.check_uldp(Q, S, protected=prot | one_non) == math.inf


def test_reductions_krr_identity_mangat_and_rappor():
    for k, eps in [(2, 0.4), (5, 1.3), (9, 3.0)]:
        np.testing.assert_allclose(uldp.urr_matrix(k, range(k), eps), rr_matrix(eps, k), rtol=1e-13)
        np.testing.assert_array_equal(uldp.urr_matrix(k, [], eps), np.eye(k))
    x = rng(0).integers(0, 7, 500)
    np.testing.assert_array_equal(uldp.urr_perturb(x, 7, [], 0.5, rng(1)), x)
    # Mangat: X = {0, 1}, 1 sensitive: 1 -> 1 always; 0 -> 1 w.p. p = e^-eps; (S, S, ln 1/p)-ULDP
    for eps in (0.2, 1.0, 3.0):
        p = math.exp(-eps)
        np.testing.assert_allclose(uldp.urr_matrix(2, [1], eps), [[1 - p, p], [0.0, 1.0]], rtol=1e-13)
        assert uldp.check_uldp(uldp.urr_matrix(2, [1], eps), [1]) == pytest.approx(math.log(1 / p))
    # uRAP with S = X is RAPPOR: independent bits, own bit theta = h/(h+1), every other bit 1 - theta
    k, eps = 4, 1.5
    theta = math.exp(eps / 2) / (math.exp(eps / 2) + 1)
    Y = patterns(k)
    rappor = np.array([np.prod(np.where(Y, np.where(np.arange(k) == x, theta, 1 - theta),
                                        np.where(np.arange(k) == x, 1 - theta, theta)), axis=1)
                       for x in range(k)])
    Q = paper_urap(k, list(range(k)), eps)
    np.testing.assert_allclose(Q, rappor, rtol=1e-12)
    assert uldp.check_uldp(Q, list(range(k)), protected=np.ones(2 ** k, bool)) == pytest.approx(eps)


def test_ldp_implies_uldp_and_sequential_composition_adds_epsilons():
    for eps in (0.3, 2.0):
        assert uldp.check_uldp(rr_matrix(eps, 5), [0, 3]) == pytest.approx(eps)  # Y_P = Y
    # Prop. 1: uRR(eps0) then uRR(eps1), independently: (S, S x S, eps0 + eps1)-ULDP, attained
    k, S, e0, e1 = 5, [0, 2], 0.4, 1.1
    Q0, Q1 = uldp.urr_matrix(k, S, e0), uldp.urr_matrix(k, S, e1)
    joint = (Q0[:, :, None] * Q1[:, None, :]).reshape(k, k * k)
    both = np.isin(np.arange(k * k) // k, S) & np.isin(np.arange(k * k) % k, S)
    assert uldp.check_uldp(joint, S, protected=both) == pytest.approx(e0 + e1, rel=1e-9)
    assert uldp.check_uldp(joint, S) == pytest.approx(e0 + e1, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# PUM privacy (Props. 9 and 10)
# ---------------------------------------------------------------------------------------------

def pum_matrix(common, k, S, kappa, user_tags):
    """Q^(i) = Q_cmn o f_pre^(i): rows of the common matrix picked by the pre-processed values."""
    x = np.arange(k)
    tags = np.full(k, -1)
    for value, tag in user_tags.items():
        tags[value] = tag
    pre = uldp.pum_preprocess(x, k, S, tags, kappa)
    return common[pre.values]


@pytest.mark.parametrize("mechanism", ["urr", "urap"])
def test_pum_is_uldp_for_each_user_and_hides_the_tagged_sets(mechanism):
    k, S, kappa, eps = 5, [0], 2, 0.9
    ext_S = [0, 5, 6]
    users = [{}, {2: 0}, {3: 1}, {2: 0, 4: 1}, {1: 1, 3: 0}]
    if mechanism == "urr":
        common = uldp.urr_matrix(k + kappa, ext_S, eps)
        prot = np.isin(np.arange(k + kappa), ext_S)
    else:
        common = paper_urap(k + kappa, ext_S, eps)
        prot = urap_protected(k + kappa, ext_S)
    mats = [pum_matrix(common, k, S, kappa, u) for u in users]
    for Q, u in zip(mats, users):
        # Prop. 9: (S ∪ X_S^(i), Y_P, eps)-ULDP, exactly
        assert uldp.check_uldp(Q, sorted(set(S) | set(u)), protected=prot) == pytest.approx(eps, rel=1e-9)
        # and it stays (S, Y_P, eps)-ULDP for the common sensitive set
        if u:
            assert uldp.check_uldp(Q, S, protected=prot) == pytest.approx(eps, rel=1e-9)
    # without the pre-processor a user's tagged value would be released invertibly
    assert uldp.check_uldp(uldp.urr_matrix(k, S, eps), [0, 2], protected=[0]) == math.inf
    # Prop. 10: a protected output tells little about whose pre-processor was used
    worst = max(np.max(A[:, prot] / B[:, prot]) for A in mats for B in mats)
    assert worst <= math.exp(eps) * (1 + 1e-12)
    assert worst == pytest.approx(math.exp(eps), rel=1e-9)  # and the bound is attained


# ---------------------------------------------------------------------------------------------
# classification of reports
# ---------------------------------------------------------------------------------------------

def test_invertible_reports_decode_to_their_input_and_sensitive_inputs_never_produce_them():
    k, S, eps = 12, [0, 5, 7], 2.0
    x = np.repeat(np.arange(k), 3000)
    for reports in (uldp.urr_perturb(x, k, S, eps, rng(2)), uldp.urap_perturb(x, k, S, eps, rng(3))):
        kind, value = uldp.classify_report(reports, k, S)
        inv = kind == uldp.INVERTIBLE
        np.testing.assert_array_equal(value[inv], x[inv])
        assert not inv[np.isin(x, S)].any()
        assert (kind != uldp.MALFORMED).all()
        assert (value[~inv] == -1).all()
        # a non-sensitive input is revealed with probability c3 (uRR) or 1 - d2 (uRAP): many are
        assert 0.3 < inv[~np.isin(x, S)].mean() < 0.95
    crafted = np.zeros((4, k), dtype=bool)
    crafted[1, 3] = True  # one non-sensitive bit: invertible, decodes to 3
    crafted[2, [0, 5]] = True  # sensitive bits only: protected
    crafted[3, [1, 2]] = True  # two non-sensitive bits: malformed
    kind, value = uldp.classify_report(crafted, k, S)
    assert kind.tolist() == [uldp.PROTECTED, uldp.INVERTIBLE, uldp.PROTECTED, uldp.MALFORMED]
    assert value.tolist() == [-1, 3, -1, -1]
    with pytest.raises(ValueError, match="malformed"):
        uldp.urap_estimate(crafted, S, eps)


# ---------------------------------------------------------------------------------------------
# estimators: exact unbiasedness, Monte Carlo against the closed forms
# ---------------------------------------------------------------------------------------------

def test_urr_estimate_is_exactly_unbiased_by_enumeration():
    """Every output sequence of 3 users, weighted by its exact probability (Eq. 35 is unbiased)."""
    k, S, eps = 4, [1, 2], 0.8
    Q = paper_urr(k, S, eps)
    for x in ([0, 1, 3], [1, 1, 2], [3, 3, 0]):
        mean = np.zeros(k)
        for ys in itertools.product(range(k), repeat=len(x)):
            prob = np.prod([Q[a, b] for a, b in zip(x, ys)])
            if prob:
                mean += prob * uldp.urr_estimate(list(ys), k, S, eps)
        np.testing.assert_allclose(mean, np.bincount(x, minlength=k) / len(x), atol=1e-12)


def test_urap_estimate_is_exactly_unbiased_by_enumeration():
    k, S = 3, [0]
    for eps, theta in [(1.0, None), (0.5, 0.3)]:
        Q = paper_urap(k, S, eps, theta)
        Y = patterns(k)
        for x in ([0, 2], [1, 2], [0, 0]):
            mean = np.zeros(k)
            for ys in itertools.product(range(Y.shape[0]), repeat=len(x)):
                prob = np.prod([Q[a, b] for a, b in zip(x, ys)])
                if prob:
                    mean += prob * uldp.urap_estimate(Y[list(ys)], S, eps, theta=theta)
            np.testing.assert_allclose(mean, np.bincount(x, minlength=k) / len(x), atol=1e-12)


def coordinate_variance(p, S, eps, n, mechanism):
    """Var[p_hat(x)] from the paper's output shares (Eqs. 34 and 40): v^2 m(1-m)/n."""
    k, e, h = p.size, math.exp(eps), math.exp(eps / 2)
    sens = np.isin(np.arange(k), S)
    if mechanism == "urr":
        s = len(S)
        m = np.where(sens, (e - 1) / (s + e - 1) * p + 1 / (s + e - 1), (e - 1) / (s + e - 1) * p)
        v = np.full(k, (s + e - 1) / (e - 1))
    else:
        m = np.where(sens, (h - 1) / (h + 1) * p + 1 / (h + 1), (h - 1) / h * p)
        v = np.where(sens, (h + 1) / (h - 1), h / (h - 1))
    return v * v * m * (1 - m) / n


def simulate(mechanism, p, S, eps, n, reps, seed):
    """``reps`` estimates from n users drawn iid from p (the model of Props. 15/18)."""
    g = rng(seed)
    k = p.size
    x = g.choice(k, size=(reps, n), p=p)
    out = np.empty((reps, k))
    for r in range(reps):
        if mechanism == "urr":
            out[r] = uldp.urr_estimate(uldp.urr_perturb(x[r], k, S, eps, g), k, S, eps)
        else:
            out[r] = uldp.urap_estimate(uldp.urap_perturb(x[r], k, S, eps, g), S, eps)
    return out


P20 = np.array([12, 9, 7, 6, 6, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 1], float)
P20 /= P20.sum()


@pytest.mark.parametrize("mechanism", ["urr", "urap"])
@pytest.mark.parametrize("S,eps", [([0, 3, 11, 19], 0.5), ([0, 3, 11, 19], 2.5), (list(range(20)), 1.5)])
def test_monte_carlo_unbiased_with_the_l2_loss_of_props_15_and_18(mechanism, S, eps):
    """1000 runs of 2000 iid users.  Each coordinate's mean is within 4 SE (SE from the variance
    formula) of p: a wrong offset (1/(e-1) vs 1/(e+1)) or scale (v vs 1/c1) is off by many SE.  The
    mean squared l2 loss is within 4 SE (from the sample) and 5% of Prop. 15/18: a wrong variance
    (c2 for c3, theta for d1, a missing p(S) term) moves it by more."""
    n, reps = 2000, 1000
    est = simulate(mechanism, P20, S, eps, n, reps, seed=100 * len(S) + int(10 * eps) + len(mechanism))
    var = coordinate_variance(P20, S, eps, n, mechanism)
    z = (est.mean(axis=0) - P20) / np.sqrt(var / reps)
    assert np.abs(z).max() < Z, z
    l2 = ((est - P20) ** 2).sum(axis=1)
    theory = uldp.expected_l2(P20, S, eps, n, mechanism)
    assert abs(l2.mean() - theory) < Z * l2.std(ddof=1) / math.sqrt(reps)
    assert l2.mean() == pytest.approx(theory, rel=0.05)
    # per-coordinate variances too (sample variance within 4 relative SE sqrt(2/(R-1)))
    rel = est.var(axis=0, ddof=1) / var - 1
    assert np.abs(rel).max() < Z * math.sqrt(2 / (reps - 1)) + 0.05


@pytest.mark.parametrize("mechanism", ["urr", "urap"])
def test_expected_l2_closed_forms_equal_the_sum_of_coordinate_variances(mechanism):
    g = rng(4)
    for k, s in [(2, 1), (5, 0), (5, 5), (10, 3), (40, 7)]:
        for eps in (0.05, 0.7, 3.0, 12.0):
            p = g.dirichlet(np.ones(k) * 0.7)
            S = sorted(g.choice(k, s, replace=False).tolist())
            n = 1000
            closed = uldp.expected_l2(p, S, eps, n, mechanism)
            assert closed == pytest.approx(coordinate_variance(p, S, eps, n, mechanism).sum(), rel=1e-9)
    # no privacy: (1 - sum p^2)/n; the default theta given explicitly goes through the general path
    p = g.dirichlet(np.ones(6))
    assert uldp.expected_l2(p, [0], 1.0, 50, "none") == pytest.approx((1 - (p ** 2).sum()) / 50)
    theta = math.exp(0.5) / (math.exp(0.5) + 1)
    assert uldp.expected_l2(p, [0, 2], 1.0, 50, "urap", theta) == pytest.approx(
        uldp.expected_l2(p, [0, 2], 1.0, 50, "urap"), rel=1e-12)


def test_urap_with_another_theta_is_unbiased_with_the_general_variance():
    k, S, eps, theta, n, reps = 8, [1, 6], 1.2, 0.35, 1500, 300
    p = np.array([0.3, 0.05, 0.1, 0.2, 0.05, 0.1, 0.1, 0.1])
    g = rng(21)
    x = g.choice(k, size=(reps, n), p=p)
    est = np.array([uldp.urap_estimate(uldp.urap_perturb(x[r], k, S, eps, g, theta=theta), S, eps,
                                       theta=theta) for r in range(reps)])
    sens = np.isin(np.arange(k), S)
    d1 = theta / ((1 - theta) * math.exp(eps) + theta)
    one_minus_d2 = 1 - ((1 - theta) * math.exp(eps) + theta) / math.exp(eps)
    a, b = np.where(sens, d1, 0.0), np.where(sens, theta - d1, one_minus_d2)
    var = (a + b * p) * (1 - a - b * p) / (n * b * b)
    assert np.abs((est.mean(axis=0) - p) / np.sqrt(var / reps)).max() < Z
    l2 = ((est - p) ** 2).sum(axis=1)
    theory = uldp.expected_l2(p, S, eps, n, "urap", theta)
    assert theory == pytest.approx(var.sum(), rel=1e-12)
    assert abs(l2.mean() - theory) < Z * l2.std(ddof=1) / math.sqrt(reps)


# ---------------------------------------------------------------------------------------------
# the paper's hand-worked values and worst cases (Props. 5, 6, 8)
# ---------------------------------------------------------------------------------------------

FOURSQUARE = dict(k=625, s=15, n=179_527)


def worst_cases(k, s, eps):
    """p_UN (uniform over N) and p* of Prop. 6 (Eq. 13)."""
    e, N = math.exp(eps), k - s
    p_un = np.r_[np.zeros(s), np.full(N, 1 / N)]
    p_star = np.r_[np.full(s, (1 - N / (e - 1)) / k), np.full(N, (1 + s / (e - 1)) / k)]
    return p_un, p_star


def test_foursquare_worst_case_total_variation_at_eps_ln_k():
    """Spec: TV bounds at eps = ln k: uRR 0.0241 (Prop. 6), uRAP 0.0267 (Prop. 8), no privacy 0.0235."""
    k, s, n = FOURSQUARE["k"], FOURSQUARE["s"], FOURSQUARE["n"]
    eps = math.log(k)
    S = list(range(s))
    p_un, p_star = worst_cases(k, s, eps)
    assert eps >= math.log(k - s + 1)  # Prop. 6's regime for uRR
    assert eps < 2 * math.log((k - s) / 2 + 1)  # Prop. 8's regime for uRAP
    tv_urr = uldp.expected_l1(p_star, S, eps, n, "urr") / 2
    tv_urap = uldp.expected_l1(p_un, S, eps, n, "urap") / 2
    tv_none = uldp.expected_l1(np.full(k, 1 / k), S, eps, n, "none") / 2
    assert round(tv_urr, 4) == 0.0241 and round(tv_urap, 4) == 0.0267 and round(tv_none, 4) == 0.0235
    # the closed forms of Eqs. 14 and 17 and the non-private bound sqrt(2(k-1)/(n pi))
    c = math.sqrt(2 / (n * math.pi))
    e, h = math.exp(eps), math.exp(eps / 2)
    non_private = math.sqrt(2 * (k - 1) / (n * math.pi))
    assert 2 * tv_urr == pytest.approx(non_private * (s + e - 1) / (e - 1), rel=1e-10)
    eq17 = c * (math.exp(eps / 4) * s / (h - 1) + math.sqrt(h * (k - s) / (h - 1) - 1))
    assert 2 * tv_urap == pytest.approx(eq17, rel=1e-10)
    assert 2 * tv_none == pytest.approx(math.sqrt(2 * (k - 1) / (n * math.pi)), rel=1e-10)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_worst_case_l1_is_attained_by_the_uniform_distribution_over_n(eps):
    """Props. 5 and 8 (eps below ln(N+1) and 2 ln(N/2+1)): no distribution beats p_UN, which has
    the closed forms of Eqs. 12 and 17."""
    k, s, n = 60, 6, 10_000
    S = list(range(s))
    p_un, _ = worst_cases(k, s, eps)
    e, h, N = math.exp(eps), math.exp(eps / 2), k - s
    c = math.sqrt(2 / (n * math.pi))
    urr = uldp.expected_l1(p_un, S, eps, n, "urr")
    urap = uldp.expected_l1(p_un, S, eps, n, "urap")
    assert urr == pytest.approx(c * (s * math.sqrt(s + e - 2) / (e - 1) + math.sqrt(s * N / (e - 1) + N - 1)),
                                rel=1e-10)
    eq17 = c * (math.exp(eps / 4) * s / (h - 1) + math.sqrt(h * N / (h - 1) - 1))
    assert urap == pytest.approx(eq17, rel=1e-10)
    g = rng(5)
    for _ in range(200):
        p = g.dirichlet(np.full(k, g.choice([0.1, 1.0, 10.0])))
        assert uldp.expected_l1(p, S, eps, n, "urr") <= urr * (1 + 1e-12)
        assert uldp.expected_l1(p, S, eps, n, "urap") <= urap * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------
# errata (spec "Errata found")
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [100, 400, 625, 10_000])
def test_erratum_rappor_l1_at_eps_ln_k_is_k_to_the_quarter_not_sqrt_k_times_non_private(k):
    """Sec. 4.3 says RAPPOR's l1 at eps = ln k is sqrt(k) times the non-private loss; its Table 3 (and
    the exact asymptotics) give k^(1/4).  sqrt(k) is the l2 ratio (Table 4), which the text borrowed."""
    eps, n = math.log(k), 100_000
    uniform = np.full(k, 1 / k)  # the worst case of RAPPOR (a concave function of p, symmetric)
    rappor = list(range(k))  # uRAP with S = X is RAPPOR
    ratio_l1 = (uldp.expected_l1(uniform, rappor, eps, n, "urap")
                / uldp.expected_l1(uniform, [], eps, n, "none"))
    ratio_l2 = (uldp.expected_l2(uniform, rappor, eps, n, "urap")
                / uldp.expected_l2(uniform, [], eps, n, "none"))
    assert 0.9 * k ** 0.25 < ratio_l1 < 1.5 * k ** 0.25  # the corrected claim
    assert ratio_l1 < 0.5 * math.sqrt(k)  # the text's claim fails by far
    assert 0.9 * math.sqrt(k) < ratio_l2 < 1.4 * math.sqrt(k)  # Table 4's l2 ratio is the sqrt(k) one


def test_erratum_high_privacy_urap_uses_e_to_the_eps_over_2_minus_1():
    """App. D.2.2 writes u' = e^eps - 1 ≈ eps/2; u' is e^(eps/2) - 1.  Eq. 17 with the right u'
    tends to Eq. 18, sqrt(2/(n pi)) 2|S|/eps; the misprint would halve it."""
    k, s, n, eps = 200, 10, 10_000, 1e-5
    p_un, _ = worst_cases(k, s, eps)
    exact = uldp.expected_l1(p_un, list(range(s)), eps, n, "urap")
    c = math.sqrt(2 / (n * math.pi))
    assert exact == pytest.approx(c * 2 * s / eps, rel=0.01)
    assert math.expm1(eps / 2) == pytest.approx(eps / 2, rel=1e-3)  # the right approximation
    assert math.expm1(eps) == pytest.approx(2 * (eps / 2), rel=1e-3)  # e^eps - 1 is eps, not eps/2
    wrong_u = math.expm1(eps)  # the misprinted u'
    misprint = c * (math.exp(eps / 4) * s / wrong_u + math.sqrt(math.exp(eps / 2) * (k - s) / wrong_u - 1))
    assert misprint / exact < 0.75  # the misprinted u' underestimates the dominant S term by half


def test_erratum_eps_must_be_positive_everywhere():
    """The estimators divide by e^eps - 1 (and e^(eps/2) - 1): eps = 0 is refused with a clear message."""
    x = np.array([0, 1, 2])
    calls = [
        lambda: uldp.urr_matrix(3, [0], 0.0), lambda: uldp.urr_perturb(x, 3, [0], 0.0),
        lambda: uldp.urr_estimate(x, 3, [0], 0.0), lambda: uldp.urap_perturb(x, 3, [0], 0.0),
        lambda: uldp.urap_estimate(np.zeros((2, 3), bool), [0], 0.0),
        lambda: uldp.expected_l2(np.full(3, 1 / 3), [0], 0.0, 10),
        lambda: uldp.expected_l1(np.full(3, 1 / 3), [0], 0, 10),
        lambda: uldp.threshold_estimate(np.full(3, 1 / 3), 10, [0], 0.0),
        lambda: uldp.em_estimate(x, 3, [0], 0.0),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="eps must be > 0"):
            call()


def test_theorem_1_needs_the_absolute_value_of_negative_bot_estimates():
    """Theorem 1 bounds l1(p_hat, p) by l1(r_hat, r) + sum_t r_hat(⊥t) l1(pi_hat_t, pi_t).  With an
    unbiased (possibly negative) r_hat(⊥t) the bound needs |r_hat(⊥t)|: a counterexample."""
    k, S = 3, []
    r = np.array([0.4, 0.4, 0.0, 0.2])  # the last entry is the bot
    pi, pi_hat = np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0])
    p = r[:k] + r[k] * pi
    r_hat = np.array([0.4, 0.4, 0.0, -0.2])
    p_hat = uldp.pum_estimate(r_hat, k, S, [pi_hat])
    l1 = np.abs(p_hat - p).sum()
    paper = np.abs(r_hat - r).sum() + r_hat[k] * np.abs(pi_hat - pi).sum()
    fixed = np.abs(r_hat - r).sum() + abs(r_hat[k]) * np.abs(pi_hat - pi).sum()
    assert l1 > paper + 0.3  # the paper's form fails
    assert l1 <= fixed + 1e-12


# ---------------------------------------------------------------------------------------------
# post-processing: emp+thr and EM
# ---------------------------------------------------------------------------------------------

def test_threshold_estimate_keeps_significant_values_and_spreads_the_rest():
    k, S, eps, n = 6, [0, 1, 2], 1.0, 1000
    e = math.exp(eps)
    s = len(S)
    c2, c3 = 1 / (s + e - 1), (e - 1) / (s + e - 1)
    sd0 = math.sqrt(c2 * (1 - c2) / n) / c3
    from statistics import NormalDist
    t = NormalDist().inv_cdf(1 - 0.05 / k) * sd0
    p_hat = np.array([t * 1.01, t * 0.99, -0.05, 0.3, 0.0, 1e-9])
    out = uldp.threshold_estimate(p_hat, n, S, eps)
    kept = np.array([True, False, False, True, False, True])  # N: any positive estimate is kept
    np.testing.assert_allclose(out[kept], p_hat[kept])
    np.testing.assert_allclose(out[~kept], (1 - p_hat[kept].sum()) / 3)
    assert out.sum() == pytest.approx(1.0) and (out >= 0).all()
    # the kept estimates exceed 1: rescaled, the others 0
    out = uldp.threshold_estimate(np.array([0.9, 0.5, 0.0, 0.2, -0.1, 0.0]), n, S, eps)
    np.testing.assert_allclose(out, [0.9 / 1.6, 0.5 / 1.6, 0, 0.2 / 1.6, 0, 0])
    # uRAP's null variance: d1(1-d1)/(n (theta - d1)^2)
    h = math.exp(eps / 2)
    d1, theta = 1 / (h + 1), h / (h + 1)
    t_urap = NormalDist().inv_cdf(1 - 0.05 / k) * math.sqrt(d1 * (1 - d1) / n) / (theta - d1)
    out = uldp.threshold_estimate(np.array([t_urap * 1.01, t_urap * 0.99, 0, 0, 0, 0.5]), n, S, eps,
                                  mechanism="urap")
    assert out[0] == pytest.approx(t_urap * 1.01) and out[1] == pytest.approx(out[2])


def brute_force_log_likelihood(reports, k, S, eps, p):
    if reports.ndim == 1:
        return float(np.sum(np.log((p @ paper_urr(k, S, eps))[reports])))
    return float(np.sum(np.log((p @ paper_urap(k, S, eps))[pattern_index(reports)])))


@pytest.mark.parametrize("mechanism", ["urr", "urap"])
def test_em_stays_on_the_simplex_with_non_decreasing_likelihood(mechanism):
    k, S, eps, n = 6, [0, 4], 0.7, 3000
    p = np.array([0.02, 0.4, 0.0, 0.3, 0.08, 0.2])
    x = rng(6).choice(k, n, p=p)
    reports = (uldp.urr_perturb if mechanism == "urr" else uldp.urap_perturb)(x, k, S, eps, rng(7))
    res = uldp.em_estimate(reports, k, S, eps, tol=1e-12)
    assert res.converged and (res.p >= 0).all() and res.p.sum() == pytest.approx(1.0, abs=1e-12)
    ll = res.log_likelihood
    assert (np.diff(ll) >= -1e-9 * abs(ll[0])).all()  # EM never decreases the likelihood
    assert ll.size == res.iterations + 1
    # the reported log-likelihood is the true one (checked against the enumerated matrix)
    assert ll[-1] == pytest.approx(brute_force_log_likelihood(reports, k, S, eps, res.p), rel=1e-10)
    # a maximum: no better than the truth, emp+thr, or small moves along the simplex
    emp = uldp.urr_estimate(reports, k, S, eps) if mechanism == "urr" else uldp.urap_estimate(reports, S, eps)
    for q in (p, uldp.threshold_estimate(emp, n, S, eps, mechanism=mechanism)):
        q = np.clip(q, 1e-12, None)
        assert brute_force_log_likelihood(reports, k, S, eps, q / q.sum()) <= ll[-1] + 1e-7
    g = rng(8)
    for _ in range(30):
        q = np.clip(res.p + g.normal(0, 1e-3, k), 1e-12, None)
        assert brute_force_log_likelihood(reports, k, S, eps, q / q.sum()) <= ll[-1] + 1e-7
    assert np.abs(res.p - p).sum() < 0.15


def test_em_equals_the_empirical_estimate_when_it_lies_inside_the_simplex():
    """uRR's outputs are a saturated multinomial model: the MLE is m_hat Q^-1 whenever that is a
    distribution, so EM must converge to Eq. 35's estimate."""
    k, S, eps, n = 5, [1, 2], 2.0, 50_000
    x = rng(9).choice(k, n, p=[0.3, 0.2, 0.2, 0.15, 0.15])
    y = uldp.urr_perturb(x, k, S, eps, rng(10))
    emp = uldp.urr_estimate(y, k, S, eps)
    assert (emp > 0).all()
    res = uldp.em_estimate(y, k, S, eps, tol=1e-13, max_iter=100_000)
    np.testing.assert_allclose(res.p, emp, atol=1e-8)
    capped = uldp.em_estimate(y, k, S, eps, max_iter=2)
    assert not capped.converged and capped.iterations == 2


def test_em_for_krr_and_rappor_reductions():
    k, eps, n = 5, 1.0, 4000
    p = np.array([0.5, 0.3, 0.2, 0.0, 0.0])
    x = rng(11).choice(k, n, p=p)
    everything = list(range(k))
    for reports in (uldp.urr_perturb(x, k, everything, eps, rng(12)),
                    uldp.urap_perturb(x, k, everything, eps, rng(13))):
        res = uldp.em_estimate(reports, k, list(range(k)), eps)
        assert res.converged and np.abs(res.p - p).sum() < 0.12
        assert (np.diff(res.log_likelihood) >= -1e-9 * abs(res.log_likelihood[0])).all()
        assert res.log_likelihood[-1] == pytest.approx(
            brute_force_log_likelihood(reports, k, list(range(k)), eps, res.p), rel=1e-10)


def test_em_dense_pattern_path_agrees_with_the_table_path(monkeypatch):
    """Many sensitive values use a dense matrix of distinct patterns instead of the 2^s table."""
    k, S, eps, n = 8, [0, 1, 2, 4, 5, 7], 0.9, 3000
    x = rng(17).choice(k, n, p=[0.2, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1])
    bits = uldp.urap_perturb(x, k, S, eps, rng(18))
    table = uldp.em_estimate(bits, k, S, eps, max_iter=300)
    monkeypatch.setattr(uldp, "_TABLE_BITS", 3)
    dense = uldp.em_estimate(bits, k, S, eps, max_iter=300)
    np.testing.assert_allclose(dense.p, table.p, atol=1e-12)
    np.testing.assert_allclose(dense.log_likelihood, table.log_likelihood, rtol=1e-12)
    assert dense.log_likelihood[-1] == pytest.approx(brute_force_log_likelihood(bits, k, S, eps, dense.p), rel=1e-10)


def test_em_without_sensitive_values_is_the_share_of_invertible_reports():
    k, eps = 4, 1.0
    x = rng(19).choice(k, 2000, p=[0.4, 0.3, 0.2, 0.1])
    y = uldp.urr_perturb(x, k, [], eps, rng(20))
    np.testing.assert_allclose(uldp.em_estimate(y, k, [], eps).p, np.bincount(x, minlength=k) / x.size)
    bits = uldp.urap_perturb(x, k, [], eps, rng(21))
    kind, value = uldp.classify_report(bits, k, [])
    shares = np.bincount(value[kind == uldp.INVERTIBLE], minlength=k) / (kind == uldp.INVERTIBLE).sum()
    np.testing.assert_allclose(uldp.em_estimate(bits, k, [], eps, tol=1e-12).p, shares, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# PUM end to end
# ---------------------------------------------------------------------------------------------

def test_pum_preprocess_forms_agree_and_keep_common_sensitive_values():
    k, S, kappa = 6, [0], 2
    values = np.array([2, 3, 0, 5, 2, 4])
    per_value = np.array([0, -1, 1, 1, -1, -1])  # user 2 tagged her (common sensitive) 0: kept as 0
    triples = (np.array([0, 0, 2, 3, 4, 5]), np.array([2, 4, 0, 5, 3, 1]), np.array([0, 1, 1, 1, 0, 0]))
    a = uldp.pum_preprocess(values, k, S, per_value, kappa)
    b = uldp.pum_preprocess(values, k, S, triples, kappa)
    np.testing.assert_array_equal(a.values, [6, 3, 0, 7, 2, 4])
    np.testing.assert_array_equal(b.values, a.values)
    assert a.k == 8 and a.sensitive.tolist() == [0, 6, 7]
    with pytest.raises(ValueError, match="at most one tag"):
        uldp.pum_preprocess(values, k, S, (np.array([0, 0]), np.array([2, 2]), np.array([0, 1])), kappa)
    with pytest.raises(ValueError, match="tags must lie"):
        uldp.pum_preprocess(values, k, S, np.array([0, 2, 0, 0, 0, 0]), kappa)
    with pytest.raises(ValueError, match="one entry per value"):
        uldp.pum_preprocess(values, k, S, np.array([0, 1]), kappa)


@pytest.mark.parametrize("mechanism", ["urr", "urap"])
def test_pum_estimation_and_theorem_1(mechanism):
    """Users tag home/work; uRR/uRAP on the extended domain; EM then Eq. 21.  With the true pi_t the
    estimate is close to p; every run satisfies Theorem 1 (r_hat from EM is non-negative)."""
    g = rng(14)
    k, S, kappa, eps, n = 10, [0, 1], 2, 2.0, 20_000
    p = np.array([0.05, 0.05, 0.2, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05])
    x = g.choice(k, n, p=p)
    home = g.integers(2, k, n)  # each user's home (tag 0) and workplace (tag 1), in N
    work = g.integers(2, k, n)
    tags = np.where(x == home, 0, np.where(x == work, 1, -1))
    pre = uldp.pum_preprocess(x, k, S, tags, kappa)
    r = np.bincount(pre.values, minlength=k + kappa) / n
    pi = np.array([np.bincount(x[pre.values == k + t], minlength=k) / max((pre.values == k + t).sum(), 1)
                   for t in range(kappa)])
    p_emp = np.bincount(x, minlength=k) / n
    np.testing.assert_allclose(r[:k] + r[k:] @ pi, p_emp, atol=1e-12)  # p = r|X + sum_t r(⊥t) pi_t
    perturb = uldp.urr_perturb if mechanism == "urr" else uldp.urap_perturb
    y = perturb(pre.values, pre.k, pre.sensitive, eps, g)
    r_hat = uldp.em_estimate(y, pre.k, pre.sensitive, eps).p
    spread = np.where(np.isin(np.arange(k), S), 0.0, np.maximum(r_hat[:k], 0.0))
    spread /= spread.sum()  # what an unknown pi_t becomes: r_hat over N, normalised
    for pi_hat in (pi, None, [pi[0], None]):
        used = [spread if pi_hat is None or pi_hat[t] is None else pi_hat[t] for t in range(kappa)]
        p_hat = uldp.pum_estimate(r_hat, k, S, pi_hat)
        np.testing.assert_allclose(p_hat, r_hat[:k] + sum(r_hat[k + t] * used[t] for t in range(kappa)))
        assert p_hat.sum() == pytest.approx(1.0) and (p_hat >= 0).all()
        bound = np.abs(r_hat - r).sum() + sum(r_hat[k + t] * np.abs(used[t] - pi[t]).sum()
                                              for t in range(kappa))
        assert np.abs(p_hat - p_emp).sum() <= bound + 1e-12  # Theorem 1
    assert np.abs(uldp.pum_estimate(r_hat, k, S, pi) - p_emp).sum() < 0.08
    # without knowledge the bots' mass goes to N in proportion to r_hat (never to S)
    spread = uldp.pum_estimate(r_hat, k, S, None) - r_hat[:k]
    assert (spread[S] == 0).all()
    np.testing.assert_allclose(spread[2:] / spread[2:].sum(), r_hat[2:k] / r_hat[2:k].sum())


# ---------------------------------------------------------------------------------------------
# the production sampling code path against the exact laws (chi-square)
# ---------------------------------------------------------------------------------------------

PER_CELL = 200_000  # draws per input: a 1% error in one probability is rejected


def rngs():
    return [pytest.param(lambda: rng(20261122), SEEDED_ALPHA, id="seeded"),
            pytest.param(lambda: None, SECURE_ALPHA, id="secure-default")]


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("k,S,eps", [(6, [1, 4], 1.0), (5, [0], 0.3), (4, [0, 1, 2, 3], 2.0),
                                     (7, [2, 3, 6], 0.05)])
def test_urr_perturb_matches_the_matrix(make_rng, alpha, k, S, eps):
    x = np.repeat(np.arange(k), PER_CELL)
    y = uldp.urr_perturb(x, k, S, eps, make_rng())
    Q = paper_urr(k, S, eps)
    assert chi_square_p([(y[x == a], Q[a]) for a in range(k)]) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("k,S,eps,theta", [(4, [1, 2], 1.0, None), (5, [0], 0.4, 0.3),
                                           (3, [0, 1, 2], 2.0, None)])
def test_urap_perturb_matches_the_joint_law_of_all_bits(make_rng, alpha, k, S, eps, theta):
    x = np.repeat(np.arange(k), PER_CELL)
    bits = uldp.urap_perturb(x, k, S, eps, make_rng(), theta=theta)
    idx = pattern_index(bits)
    Q = paper_urap(k, S, eps, theta)
    assert chi_square_p([(idx[x == a], Q[a]) for a in range(k)]) > alpha


def test_chi_square_detects_a_small_epsilon_error():
    """Power: with these sample sizes, perturbing at 1.05 eps instead of eps is rejected."""
    k, S, eps = 6, [1, 4], 1.0
    x = np.repeat(np.arange(k), PER_CELL)
    Q = paper_urr(k, S, eps)
    y = uldp.urr_perturb(x, k, S, eps * 1.05, rng(15))
    assert chi_square_p([(y[x == a], Q[a]) for a in range(k)]) < 1e-12
    Qb = paper_urap(4, [1, 2], eps)
    x4 = np.repeat(np.arange(4), PER_CELL)
    idx = pattern_index(uldp.urap_perturb(x4, 4, [1, 2], eps * 1.05, rng(16)))
    assert chi_square_p([(idx[x4 == a], Qb[a]) for a in range(4)]) < 1e-12


def test_seeded_runs_are_reproducible_and_the_default_is_secure():
    x = np.arange(8).repeat(100)
    for f in (uldp.urr_perturb, uldp.urap_perturb):
        np.testing.assert_array_equal(f(x, 8, [0, 3], 1.0, rng(3)), f(x, 8, [0, 3], 1.0, rng(3)))
        np.random.seed(0)
        a = f(x, 8, [0, 3], 1.0)
        np.random.seed(0)
        assert (a != f(x, 8, [0, 3], 1.0)).any()  # the secure default ignores numpy's global seed
    with pytest.raises(ValueError, match="rng must be"):
        uldp.urr_perturb(x, 8, [0], 1.0, rng=7)


def test_large_epsilon_is_finite_and_exact():
    """The formulas stay finite up to eps = 700; the samplers refuse, naming the limit, an eps whose cells
    would need a probability below 2^-64 (uRR above 44.361419, uRAP above 88.029691: docs/mechanisms.md)."""
    k, S = 5, [0, 2]
    x = np.arange(k).repeat(50)
    for eps in (50.0, 700.0):
        Q = uldp.urr_matrix(k, S, eps)
        assert np.all(np.isfinite(Q)) and uldp.check_uldp(Q, S) == pytest.approx(eps, rel=1e-9)
        with pytest.raises(ValueError, match="largest epsilon is 44.361419"):
            uldp.urr_perturb(x, k, S, eps, rng(1))
        assert np.isfinite(uldp.expected_l2(np.full(k, 0.2), S, eps, 10, "urap"))
    assert (uldp.urr_perturb(x, k, S, 44.0, rng(1)) == x).all()   # moves with probability ~ 2^-63.5
    bits = uldp.urap_perturb(x, k, S, 50.0, rng(1))
    assert np.all(np.isfinite(uldp.urap_estimate(bits, S, 50.0)))
    with pytest.raises(ValueError, match="largest epsilon for this theta is 88.029691"):
        uldp.urap_perturb(x, k, S, 700.0, rng(1))


# ---------------------------------------------------------------------------------------------
# input validation
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call,match", [
    (lambda: uldp.urr_matrix(5, [0, 0], 1.0), "duplicates"),
    (lambda: uldp.urr_matrix(5, [5], 1.0), "domain 0..4"),
    (lambda: uldp.urr_matrix(5, [[0, 1]], 1.0), "one-dimensional"),
    (lambda: uldp.urr_matrix(5, None, 1.0), "use \\[\\] for none"),
    (lambda: uldp.urr_matrix(5, np.array([True, False]), 1.0), "boolean sensitive mask"),
    (lambda: uldp.urr_matrix(1, [0], 1.0), "at least 2"),
    (lambda: uldp.urr_matrix(5, [0], float("nan")), "NaN"),
    (lambda: uldp.urr_matrix(5, [0], -1.0), ">= 0"),
    (lambda: uldp.urr_perturb([0, 7], 5, [0], 1.0), "domain 0..4"),
    (lambda: uldp.urr_estimate([], 5, [0], 1.0), "must not be empty"),
    (lambda: uldp.urap_perturb([0, 1], 5, [0], 1.0, theta=1.0), "strictly between 0 and 1"),
    (lambda: uldp.urap_perturb([0, 1], 5, [0], 1.0, theta="a"), "theta must be a real"),
    (lambda: uldp.urap_estimate(np.zeros(5, bool), [0], 1.0), "two-dimensional"),
    (lambda: uldp.urap_estimate(np.full((2, 5), 2), [0], 1.0), "booleans or 0/1"),
    (lambda: uldp.classify_report(np.zeros((2, 4), bool), 5, [0]), "k = 5 columns"),
    (lambda: uldp.expected_l2([0.5, 0.6], [0], 1.0, 10), "sum to 1"),
    (lambda: uldp.expected_l2([0.5, 0.5], [0], 1.0, 0), "positive integer"),
    (lambda: uldp.expected_l2([0.5, 0.5], [0], 1.0, 10, "rr"), "mechanism must be one of"),
    (lambda: uldp.expected_l2([0.5, 0.5], [0], 1.0, 10, "urr", 0.5), "theta applies"),
    (lambda: uldp.threshold_estimate([0.5, 0.5], 10, [0], 1.0, alpha=1.5), "alpha"),
    (lambda: uldp.em_estimate([0, 1], 5, [0], 1.0, tol=0), "tol"),
    (lambda: uldp.em_estimate([0, 1], 5, [0], 1.0, init=[1.0, 0, 0, 0]), "init must have"),
    (lambda: uldp.check_uldp([[0.5, 0.6], [0.5, 0.5]], [0]), "row-stochastic"),
    (lambda: uldp.pum_estimate([0.5, 0.5, 0.0], 2, [], [[0.7, 0.7]]), "sum to 1"),
    (lambda: uldp.pum_estimate([0.5, 0.5, 0.0], 2, [], [None, None]), "one row per tag"),
])
def test_invalid_inputs_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
