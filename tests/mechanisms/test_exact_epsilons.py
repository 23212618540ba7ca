"""Exact epsilons stay exact: the gradual-release samplers compare epsilons at the exact values they realise,
never as floats, and refuse an epsilon their 64-bit cells cannot honour (docs/mechanisms.md, "k-RR").

* ``Decimal("30.00000000000000001")`` is 30.0 as a float but above ``SAMPLER_EPS_MAX``: refused.
* Two distinct Decimals equal as floats are a valid, increasing pair: the realised level, computed from the
  integer cells, is at most the charged (last) epsilon.
* An eps so small that k-RR's rounded-up cells give the true value fewer units than the others (``K < R``,
  level ``ln(R/K) > eps``) is refused, exactly when ``E_lo < 1 + r/q`` with ``q, r = divmod(2^64, m)``.
"""
from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import audit, bridge, chain, perturb, relax, tighten
from mechanisms._exact import exp_lower, ratio_at_most
from mechanisms._validation import check_increasing
from mechanisms.exactness import (
    SAMPLER_EPS_MAX,
    TOTAL,
    bridge_weights_exact,
    chain_level,
    check_sampler_eps,
    krr_cells,
    krr_level,
    step_weights,
    tighten_weights_exact,
)
from mechanisms.rappor import gradual_release

#: Distinct Decimals that are the same float.
LO, HI = Decimal("0.1"), Decimal("0.10000000000000000001")
JUST_ABOVE_LIMIT = Decimal("30.00000000000000001")
SEED = 20261101
#: Decimal sums without rounding (the default context keeps 28 digits).
EXACT = Context(prec=100)
#: Hypothesis runs are derandomized (a fixed seed) and keep no example database.
FIXED = settings(max_examples=80, deadline=None, derandomize=True, database=None)


def realised_ratio(eps, m) -> Fraction:
    """The level of k-RR's integer cells computed independently of ``krr_level``: the largest ratio between
    two entries of one column, ``max(K, R) / min(K, R)`` (whichever of K and R is larger)."""
    c = krr_cells(eps, m)
    return Fraction(max(c.keep, c.flip), min(c.keep, c.flip))


def must_refuse(eps: Decimal, m: int) -> bool:
    """The refusal rule in closed form: ``K < R  <=>  E_lo < 1 + r/q`` (``q, r = divmod(2^64, m)``)."""
    if eps == 0:
        return False
    q, r = divmod(TOTAL, m)
    return exp_lower(eps, 60) < 1 + Fraction(r, q)


# ---------------------------------------------------------------- the limit, compared exactly

def test_an_epsilon_above_the_limit_only_beyond_float_precision_is_refused():
    assert float(JUST_ABOVE_LIMIT) == SAMPLER_EPS_MAX and JUST_ABOVE_LIMIT > SAMPLER_EPS_MAX
    for call in (lambda: check_sampler_eps(JUST_ABOVE_LIMIT),
                 lambda: krr_cells(JUST_ABOVE_LIMIT, 2),
                 lambda: krr_level(JUST_ABOVE_LIMIT, 16),
                 lambda: step_weights(Decimal(29), JUST_ABOVE_LIMIT, 2),
                 lambda: tighten_weights_exact(JUST_ABOVE_LIMIT, Decimal(29), 3),
                 lambda: bridge_weights_exact(Decimal(1), Decimal(2), JUST_ABOVE_LIMIT, 3),
                 lambda: perturb([0, 1], JUST_ABOVE_LIMIT, 2, np.random.default_rng(SEED)),
                 lambda: chain([0, 1], [Decimal(1), JUST_ABOVE_LIMIT], 2, np.random.default_rng(SEED))):
        with pytest.raises(ValueError, match="at most 30") as exc:
            call()
        assert "30.00000000000000001" in str(exc.value)  # the exact value is named, not its float
    # the limit itself, however it is written, is accepted
    for eps in (Decimal(30), Decimal("30.000000000000000000"), 30, 30.0):
        assert check_sampler_eps(eps) == 30.0
        assert krr_level(eps, 2).at_most(eps)


def test_a_negative_decimal_that_is_zero_as_a_float_is_refused():
    tiny_negative = Decimal("-1e-400")
    assert float(tiny_negative) == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        krr_cells(tiny_negative, 2)


# ---------------------------------------------------------------- distinct Decimals equal as floats

def test_distinct_decimals_equal_as_floats_are_increasing_and_realise_at_most_the_last():
    assert float(LO) == float(HI) and LO < HI
    assert check_increasing([LO, HI]).tolist() == [0.1, 0.1]
    assert check_increasing(np.array([LO, HI], dtype=object)).shape == (2,)
    for m in (2, 3, 5, 16, 1000):
        kept, moved = step_weights(LO, HI, m)
        assert kept.total > 0 and moved.total > 0
        level = chain_level([LO, HI], m)
        # the realised level, from the integer cells, is at most the charged epsilon (and the first one)
        assert level.ratio == krr_level(HI, m).ratio == realised_ratio(HI, m)
        assert ratio_at_most(level.ratio, HI) and level.at_most(HI) and level.at_most(LO)
        # a bridge and a tightening between them are defined too
        bridge_weights_exact(LO, Decimal("0.100000000000000000005"), HI, m)
        tighten_weights_exact(HI, LO, m)


def test_when_the_cells_coincide_the_step_is_the_identity_and_draws_nothing_new():
    m = 5
    assert krr_cells(LO, m) == krr_cells(HI, m)  # 10^-20 moves no cell of 2^-64 here
    rng = np.random.default_rng(SEED)
    values = np.arange(m).repeat(200)
    for eps in ([LO, HI], np.array([LO, HI], dtype=object)):
        out = chain(values, eps, m, rng)
        assert np.array_equal(out[:, 1], out[:, 0])
    o = perturb(values, LO, m, rng)
    assert np.array_equal(relax(o, values, LO, HI, m, rng), o)
    assert np.array_equal(tighten(o, HI, LO, m, rng), o)
    assert np.array_equal(bridge(o, o, LO, Decimal("0.100000000000000000005"), HI, m, rng), o)
    # the Bloom-filter bits' chains and the audit accept the same path
    bits = gradual_release(np.array([[True, False]] * 50), [LO, HI], rng)
    assert bits.shape == (50, 2, 2)
    report = audit.run_attacks(values, out, [LO, HI], m, rng)
    assert report["epsilon"] == 0.1 and report["n"] == values.shape[0]


@pytest.mark.parametrize("eps", [[LO, LO], [LO, Decimal("0.10")], [HI, LO], [LO, 0.1], [0.1, LO]])
def test_equal_or_decreasing_exact_epsilons_are_still_refused(eps):
    # Decimal("0.1") and the float 0.1 are the same epsilon to the sampler (a float is read as the smaller of
    # its binary value and its shortest decimal)
    with pytest.raises(ValueError, match="strictly increasing"):
        check_increasing(eps)
    with pytest.raises(ValueError, match="greater than eps_from"):
        step_weights(eps[0], eps[1], 3)


def test_the_float_order_is_unchanged_without_decimals():
    with pytest.raises(ValueError, match=r"epsilons\[2\] = 0.5 does not exceed epsilons\[1\] = 0.5"):
        check_increasing([0.1, 0.5, 0.5])
    assert check_increasing([0, 0.5, 1, 2.5]).tolist() == [0, 0.5, 1, 2.5]


@FIXED
@given(m=st.sampled_from([2, 3, 5, 16, 1000]),
       base=st.integers(min_value=1, max_value=SAMPLER_EPS_MAX * 10**6 - 1),
       steps=st.lists(st.integers(min_value=17, max_value=40), min_size=1, max_size=6))
def test_any_sequence_with_steps_below_float_precision_realises_at_most_its_last_epsilon(m, base, steps):
    eps = [Decimal(base) / 10**6]
    for k in steps:
        eps.append(EXACT.add(eps[-1], Decimal(1).scaleb(-k)))  # 10^-k, invisible to a float for k >= 17
    check_increasing(eps)
    level = chain_level(eps, m)
    assert level.ratio == krr_level(eps[-1], m).ratio == realised_ratio(eps[-1], m)
    assert ratio_at_most(level.ratio, eps[-1])


# ---------------------------------------------------------------- epsilons too small for the cells

def test_krr_at_an_eps_too_small_for_its_cells_is_refused():
    # at eps = 1e-19 over 1000 values, R = ceil(2^64 / (E_lo + 999)) rounds past 2^64 / 1000: the true value
    # would get 384 units fewer than each other value, a level ln(R/K) ~ 2.1e-14 far above 1e-19
    q, r = divmod(TOTAL, 1000)
    assert (q + 1) - (TOTAL - 999 * (q + 1)) == 384
    for eps in (Decimal("1e-19"), 1e-19, Decimal("3.3e-14")):
        with pytest.raises(ValueError, match="too small for k-RR over 1000 values"):
            krr_cells(eps, 1000)
        with pytest.raises(ValueError, match="too small"):
            krr_level(eps, 1000)
        with pytest.raises(ValueError, match="too small"):
            step_weights(eps, 1, 1000)
        with pytest.raises(ValueError, match="too small"):
            perturb([0, 1], eps, 1000, np.random.default_rng(SEED))
    # just above the threshold ln(1 + r/q) ~ 3.34e-14 the cells separate and honour eps
    assert krr_level(Decimal("3.4e-14"), 1000).at_most(Decimal("3.4e-14"))
    # a power of two divides 2^64: a tiny eps gives K = R (uniform, level 0 <= eps) ...
    c = krr_cells(Decimal("1e-19"), 2)
    assert c.keep == c.flip and krr_level(Decimal("1e-19"), 2).at_most(Decimal("1e-19"))
    # ... until the 60-digit lower bound of e^eps drops below 1, and R > 2^63 > K
    with pytest.raises(ValueError, match="too small"):
        krr_cells(Decimal("1e-60"), 2)
    with pytest.raises(ValueError, match="too small"):
        krr_cells(5e-324, 2)
    assert krr_cells(0, 1000).keep == krr_cells(0, 1000).flip  # eps = 0 is exactly uniform, as before


@FIXED
@given(m=st.one_of(st.integers(min_value=2, max_value=64), st.integers(min_value=2, max_value=10**7),
                   st.sampled_from([1000, 1 << 20, 3 * (1 << 20), 10**7])),
       digits=st.integers(min_value=1, max_value=999), exponent=st.integers(min_value=8, max_value=62))
def test_refused_exactly_when_the_true_value_would_get_fewer_cells(m, digits, exponent):
    eps = Decimal(digits).scaleb(-exponent)
    if must_refuse(eps, m):
        with pytest.raises(ValueError, match="too small"):
            krr_cells(eps, m)
        return
    c = krr_cells(eps, m)
    assert c.keep >= c.flip and c.keep + (m - 1) * c.flip == TOTAL
    # the realised level from the integer thresholds is at most the charged epsilon, and krr_level says so
    assert ratio_at_most(realised_ratio(eps, m), eps)
    assert krr_level(eps, m).ratio == realised_ratio(eps, m)


# ---------------------------------------------------------------- how far below eps (docs/mechanisms.md)

@pytest.mark.parametrize("eps,m", [("0.1", 2), ("0.1", 10**6), ("1", 1000), ("10", 3), ("30", 2), ("30", 10**6),
                                   ("0.000001", 4 * 10**6)])
def test_the_realised_level_is_below_eps_by_at_most_the_documented_bound(eps, m):
    eps = Decimal(eps)
    e_lo, c = exp_lower(eps, 60), krr_cells(eps, m)
    # exactly: E_lo - K/R < (E_lo + m - 1)^2 / 2^64
    assert 0 <= e_lo - Fraction(c.keep, c.flip) < (e_lo + m - 1) ** 2 / TOTAL
    # so eps - level <= about (e^eps + m - 1)^2 / (2^64 e^eps)
    e = math.exp(float(eps))
    gap = float(eps - krr_level(eps, m).epsilon)
    assert 0 <= gap <= 1.001 * (e + m - 1) ** 2 / (TOTAL * e)
    if m > 1000 * e:  # the old "within e^eps / 2^64" was wrong by orders of magnitude there
        assert gap > 1000 * e / TOTAL


def test_the_owner_side_sampler_refuses_the_same_tiny_epsilons():
    sampler = pytest.importorskip("ldpmarket_client.sampler")
    for eps, m in [(Decimal("1e-19"), 1000), (Decimal("3.3e-14"), 1000), (Decimal("1e-60"), 2)]:
        with pytest.raises(ValueError, match="too small"):
            sampler.krr_cells(eps, m)
        with pytest.raises(ValueError, match="too small"):
            sampler.krr(0, eps, m)
    for eps, m in [(Decimal("3.4e-14"), 1000), (Decimal("1e-19"), 2), (LO, 5), (HI, 5)]:
        ours = krr_cells(eps, m)
        theirs = sampler.krr_cells(eps, m)
        assert (theirs.keep, theirs.flip, theirs.total) == (ours.keep, ours.flip, ours.total)
    kept, moved = sampler.step_weights(LO, HI, 5)  # the client's own RowWeights: compared field by field
    ours_kept, ours_moved = step_weights(LO, HI, 5)
    assert (kept.first, kept.second, kept.other, kept.n_others) == (ours_kept.first, ours_kept.second,
                                                                    ours_kept.other, ours_kept.n_others)
    assert (moved.first, moved.second, moved.other, moved.n_others) == (ours_moved.first, ours_moved.second,
                                                                        ours_moved.other, ours_moved.n_others)
