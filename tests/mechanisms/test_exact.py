"""Exact proofs of gradual release by enumerating every output sequence
(docs/mechanisms-reference.md#gradual-release-of-randomized-response).

For m = 2..5 and chains of up to four epsilons, the joint law of a chain is
built as a tensor ``J[a][o_1, ..., o_L] = rr(eps_1)[a, o_1] prod_i T_i(a)[o_{i-1}, o_i]``
from ``step_matrix``; every property is then checked on every sequence.
"""
from __future__ import annotations

import itertools
import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

from mechanisms import bridge_matrix, keep_probability, rr_matrix, step_matrix, step_probabilities, tighten_matrix
from mechanisms.relaxation import step_terms

CHAINS = [
    (0.1,),
    (0.1, 0.5),
    (0.0, 0.3, 1.0),
    (0.1, 0.5, 1.0, 2.0),
    (0.5, 0.5 + 1e-9, 2.0, 7.0),
    (0.0, 1e-6, 0.4, 3.0),
]
DOMAINS = [2, 3, 4, 5]


def joint_law(epsilons, m, a) -> np.ndarray:
    """``J[o_1, ..., o_L] = Pr(o_1..o_L | X = a)`` for a forward chain."""
    J = rr_matrix(epsilons[0], m)[a]
    for e_prev, e_next in zip(epsilons, epsilons[1:]):
        T = step_matrix(e_prev, e_next, m, a)
        J = J[..., :, None] * T  # T indexed [o_prev, o_next]; broadcast over the earlier axes
    return J


@pytest.mark.parametrize("m", DOMAINS)
@pytest.mark.parametrize("epsilons", CHAINS)
def test_each_marginal_is_krr_at_its_epsilon(m, epsilons):
    for a in range(m):
        J = joint_law(epsilons, m, a)
        assert J.sum() == pytest.approx(1.0, abs=1e-12)
        for i, eps in enumerate(epsilons):
            other_axes = tuple(j for j in range(len(epsilons)) if j != i)
            np.testing.assert_allclose(J.sum(axis=other_axes), rr_matrix(eps, m)[a], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("m", DOMAINS)
@pytest.mark.parametrize("epsilons", CHAINS)
def test_chain_likelihood_ratio_is_last_outputs_ratio_and_bounded(m, epsilons):
    """Lemma 3.1 and composition: the whole chain is only eps_L-LDP."""
    laws = [joint_law(epsilons, m, a) for a in range(m)]
    last = rr_matrix(epsilons[-1], m)
    bound = math.exp(epsilons[-1])
    worst = 0.0
    for a, b in itertools.permutations(range(m), 2):
        ratio = laws[a] / laws[b]
        # Lemma 3.1: the ratio depends on the last output only, and equals the k-RR ratio there.
        expected = (last[a] / last[b]).reshape((1,) * (len(epsilons) - 1) + (m,))
        np.testing.assert_allclose(ratio, np.broadcast_to(expected, ratio.shape), rtol=1e-9)
        worst = max(worst, ratio.max())
    assert worst <= bound * (1 + 1e-9)
    assert worst == pytest.approx(bound, rel=1e-9)  # the bound is attained: the level is exactly eps_L


@pytest.mark.parametrize("m", DOMAINS)
@pytest.mark.parametrize("e1,e2,e3", [(0.1, 0.5, 1.0), (0.0, 0.2, 5.0), (1.0, 1.0 + 1e-7, 2.0), (2.0, 10.0, 40.0)])
def test_step_kernels_form_a_semigroup(m, e1, e2, e3):
    for a in range(m):
        direct = step_matrix(e1, e3, m, a)
        composed = step_matrix(e1, e2, m, a) @ step_matrix(e2, e3, m, a)
        np.testing.assert_allclose(direct, composed, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("m", DOMAINS)
def test_step_matrices_are_stochastic_and_single_step_may_exceed_eps2(m):
    for e1, e2 in [(0.0, 0.1), (1.0, 2.0), (0.5, 0.5 + 1e-12), (300.0, 700.0)]:
        for a in range(m):
            T = step_matrix(e1, e2, m, a)
            assert (T >= 0).all()
            np.testing.assert_allclose(T.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    # docs/mechanisms-reference.md#gradual-release-of-randomized-response (errata): for m = 2, eps 1 -> 2, the step
    # alone has ratio e^3.
    T0, T1 = step_matrix(1.0, 2.0, 2, 0), step_matrix(1.0, 2.0, 2, 1)
    assert (T0 / T1).max() == pytest.approx(math.exp(3.0), rel=1e-12)


BRIDGE_CASES = [
    ((0.1, 0.5, 1.0, 2.0), 1, 0.7),  # bridge between the 2nd and 3rd stored steps
    ((0.0, 0.3, 1.0), 0, 0.1),  # bridge above an epsilon-0 start
    ((0.2, 3.0), 0, 2.999999),  # mid arbitrarily close to hi
    ((0.2, 0.4, 3.0, 6.0), 2, 3.0000001),  # mid arbitrarily close to lo
]


@pytest.mark.parametrize("m", DOMAINS)
@pytest.mark.parametrize("epsilons,i,mid", BRIDGE_CASES)
def test_bridged_chain_has_the_forward_chains_law(m, epsilons, i, mid):
    """Insert eps_mid between epsilons[i] and epsilons[i+1] with bridge_matrix: same law as forward."""
    W = bridge_matrix(epsilons[i], mid, epsilons[i + 1], m)  # W[lo, hi, mid]
    L = len(epsilons)
    forward_eps = epsilons[: i + 1] + (mid,) + epsilons[i + 1:]
    for a in range(m):
        J = joint_law(epsilons, m, a)
        # Bridged law with the new axis appended last, then moved into position i + 1.
        shape_w = [1] * L + [m]
        shape_w[i], shape_w[i + 1] = m, m
        bridged = J[..., None] * W.reshape(shape_w)
        bridged = np.moveaxis(bridged, -1, i + 1)
        np.testing.assert_allclose(bridged, joint_law(forward_eps, m, a), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("m", DOMAINS)
@pytest.mark.parametrize("epsilons,lower", [((0.5, 1.0, 2.0), 0.2), ((0.1, 0.4), 0.0),
                                            ((1.0, 1.5, 2.0, 4.0), 1.0 - 1e-8)])
def test_tightened_chain_has_the_forward_chains_law(m, epsilons, lower):
    W = tighten_matrix(epsilons[0], lower, m)  # W[o_first, o_lower]
    for a in range(m):
        J = joint_law(epsilons, m, a)
        shape_w = [m] + [1] * (len(epsilons) - 1) + [m]
        extended = np.moveaxis(J[..., None] * W.reshape(shape_w), -1, 0)
        np.testing.assert_allclose(extended, joint_law((lower,) + epsilons, m, a), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("m", DOMAINS)
def test_bridge_and_tighten_do_not_depend_on_the_true_value(m):
    """Computed from the Bayes formula at every a, the posterior is the same as bridge_matrix's."""
    lo, mid, hi = 0.3, 0.8, 1.7
    W = bridge_matrix(lo, mid, hi, m)
    for a in range(m):
        T1, T2 = step_matrix(lo, mid, m, a), step_matrix(mid, hi, m, a)
        post = T1[:, None, :] * T2.T[None, :, :]  # [lo, hi, mid] ∝ T1[lo, mid] T2[mid, hi]
        post /= post.sum(axis=2, keepdims=True)
        np.testing.assert_allclose(post, W, rtol=1e-12)
        R, T = rr_matrix(lo, m)[a], step_matrix(lo, hi, m, a)
        post_t = (R[:, None] * T).T  # [hi, lo] ∝ rr[a, lo] T[lo, hi]
        post_t /= post_t.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(post_t, tighten_matrix(hi, lo, m), rtol=1e-12)


# Paper Tables I-III: relaxation chain 0.1 -> 0.5 -> 1 -> 2 -> 10, m = 3..10, three decimals.
TABLE_I = {3: (0.584, 0.840, 0.943, 1.000), 4: (0.511, 0.802, 0.922, 1.000), 5: (0.463, 0.775, 0.906, 1.000),
           6: (0.430, 0.755, 0.891, 1.000), 7: (0.405, 0.740, 0.879, 1.000), 8: (0.386, 0.728, 0.869, 1.000),
           9: (0.371, 0.718, 0.860, 1.000), 10: (0.359, 0.710, 0.852, 1.000)}
TABLE_II = {3: (0.392, 0.509, 0.347, 0.000), 4: (0.342, 0.486, 0.339, 0.000), 5: (0.310, 0.470, 0.333, 0.000),
            6: (0.288, 0.458, 0.328, 0.000), 7: (0.272, 0.449, 0.324, 0.000), 8: (0.259, 0.442, 0.320, 0.000),
            9: (0.249, 0.436, 0.316, 0.000), 10: (0.241, 0.431, 0.314, 0.000)}
TABLE_III = {3: (0.379, 0.359, 0.575, 1.000), 4: (0.297, 0.296, 0.520, 1.000), 5: (0.245, 0.252, 0.474, 1.000),
             6: (0.208, 0.219, 0.436, 0.999), 7: (0.181, 0.194, 0.403, 0.999), 8: (0.160, 0.174, 0.375, 0.999),
             9: (0.143, 0.158, 0.351, 0.999), 10: (0.130, 0.144, 0.330, 0.999)}
PATH = (0.1, 0.5, 1.0, 2.0, 10.0)


@pytest.mark.parametrize("m", range(3, 11))
def test_paper_tables_i_to_iii(m):
    steps = [step_probabilities(e1, e2, m) for e1, e2 in zip(PATH, PATH[1:])]
    assert tuple(round(p_aa, 3) for p_aa, _, _ in steps) == TABLE_I[m]
    assert tuple(round(p_bb, 3) + 0.0 for _, _, p_bb in steps) == TABLE_II[m]
    assert tuple(round(p_ba, 3) for _, p_ba, _ in steps) == TABLE_III[m]


def eq54_decimal(e1: float, e2: float, m: int):
    """Paper Eq. (54) in decimal arithmetic with enough digits to resolve every term.

    The differences cancel up to ``e^(2 eps2)``: about ``0.87 eps2`` decimal digits, plus 60 to spare.
    """
    getcontext().prec = 60 + int(0.9 * e2)
    E1, E2 = Decimal(e1).exp(), Decimal(e2).exp()
    D = (E2 - 1) * (E2 + m - 1)
    p_aa = E2 / (E2 - 1) - (Decimal(e2) - Decimal(e1)).exp() * (E1 + m - 1) / D
    p_ba = (E2 * E2 - E1 * E2) / D
    p_bb = E1 / (E2 - 1) - (E1 + m - 1) / D
    return p_aa, p_ba, p_bb


@pytest.mark.parametrize("m", [2, 3, 16, 625])
@pytest.mark.parametrize("e1,e2", [(0.0, 1e-12), (0.0, 0.1), (0.5, 0.5 + 1e-13), (1.0, 2.0), (5.0, 5.000001),
                                   (20.0, 35.0), (300.0, 500.0), (699.0, 700.0), (700.0 - 1e-9, 700.0)])
def test_stable_forms_agree_with_eq54_in_high_precision(m, e1, e2):
    terms = step_terms(e1, e2, m)
    ref = eq54_decimal(e1, e2, m)
    for got, want in zip((terms.p_aa, terms.p_ba, terms.p_bb), ref):
        assert math.isfinite(got)
        # Relative accuracy close to machine precision, absolute where the value underflows.
        assert abs(Decimal(got) - want) <= Decimal(1e-13) * abs(want) + Decimal(1e-300)
    # The "other" masses follow from the rows summing to one.
    r_a = (1 - ref[0]) / (m - 1)
    assert abs(Decimal(terms.r_a) - r_a) <= Decimal(1e-13) * abs(r_a) + Decimal(1e-300)
    if m > 2:
        r_b = (1 - ref[1] - ref[2]) / (m - 2)
        assert abs(Decimal(terms.r_b) - r_b) <= Decimal(1e-12) * abs(r_b) + Decimal(1e-300)


def test_stable_forms_match_float_eq54_where_it_is_defined():
    for m in (2, 3, 7):
        for e1, e2 in [(0.1, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 10.0), (0.0, 3.0)]:
            E1, E2 = math.exp(e1), math.exp(e2)
            D = (E2 - 1) * (E2 + m - 1)
            p_aa = E2 / (E2 - 1) - math.exp(e2 - e1) * (E1 + m - 1) / D
            p_ba = (E2 ** 2 - E1 * E2) / D
            p_bb = E1 / (E2 - 1) - (E1 + m - 1) / D
            assert step_probabilities(e1, e2, m) == pytest.approx((p_aa, p_ba, p_bb), rel=1e-14, abs=1e-15)


def test_binary_case_reduces_to_eq22_23():
    for e1, e2 in [(0.1, 0.5), (1.0, 2.0), (0.0, 1.0)]:
        E1, E2 = math.exp(e1), math.exp(e2)
        p_aa, p_ba, p_bb = step_probabilities(e1, e2, 2)
        assert p_aa == pytest.approx((E2 - 1 / E1) / (E2 - 1 / E2), rel=1e-14)
        # The paper's p_b is Pr(o2 = b | o1 = b, X = a): staying at the wrong value, our p_bb.
        assert p_bb == pytest.approx((E1 * E2 - 1) / (E2 ** 2 - 1), rel=1e-14)
        assert p_ba + p_bb == pytest.approx(1.0, abs=1e-15)


def test_epsilon_zero_start_is_uniform_noise():
    m = 4
    assert keep_probability(0.0, m) == pytest.approx(1 / m)
    p_aa, p_ba, p_bb = step_probabilities(0.0, 1.0, m)
    assert p_aa == pytest.approx(keep_probability(1.0, m)) and p_ba == pytest.approx(p_aa)
