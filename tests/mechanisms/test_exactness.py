"""Never more than the epsilon charged: the realised levels of the gradual-release samplers, computed exactly
from the integer laws they draw from (mechanisms.exactness; docs/mechanisms.md, "Exact sampling")."""
from __future__ import annotations

import itertools
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import bridge, relax, tighten
from mechanisms.exactness import (
    SAMPLER_EPS_MAX,
    TOTAL,
    Level,
    Marginal,
    RowWeights,
    bridge_weights_exact,
    chain_level,
    krr_cells,
    krr_level,
    step_weights,
    tighten_weights_exact,
)
from mechanisms.relaxation import step_terms
from mechanisms.rr import flip_probability

#: Grids the product ships or builds by default: the demo experiments (0.1 to 2 step 0.1), a new
#: attribute's default (0.1 to 10 step 0.1), the RAPPOR noisy-sampling path of the binary demo
#: (eps_ns(1..10), eps_alpha = 1, eps_beta = 0.5, rounded to micro-epsilons), and a grid to the limit.
DEMO_GRIDS = {
    "demo 0.1..2": [Decimal(i) / 10 for i in range(1, 21)],
    "default 0.1..10": [Decimal(i) / 10 for i in range(1, 101)],
    "rappor eps_ns(1..10)": sorted({Decimal(format(math.log((math.e * math.exp(0.5) ** k + 1)
                                                            / (math.e + math.exp(0.5) ** k)), ".6f"))
                                    for k in range(1, 11)}),
    "0 to 30 step 1.5": [Decimal(3 * i) / 2 for i in range(0, 21)],
}
#: Categorical sizes 2..16 and a large width (the Bloom filters' bits are binary chains: m = 2).
SIZES = list(range(2, 17)) + [64]


def old_floor_krr(eps, m) -> Marginal:
    """The thresholds before this rule: ``floor(q 2^64)`` for each other value, the rest kept."""
    flip = int(flip_probability(float(eps), m) * float(TOTAL))
    return Marginal(keep=TOTAL - (m - 1) * flip, flip=flip, total=TOTAL)


def old_floor_step(e1, e2, m) -> tuple[RowWeights, RowWeights]:
    """The old relaxation thresholds (floor of every small cell, the larger special cell the remainder),
    in the (kept, moved) form with ``first`` = the true value."""
    t = step_terms(float(e1), float(e2), m)
    fl = lambda p: int(p * float(TOTAL))  # noqa: E731
    r_a, r_b = fl(t.r_a), fl(t.r_b)
    kept = RowWeights(first=TOTAL - (m - 1) * r_a, second=0, other=r_a, n_others=m - 1)
    if t.p_ba >= t.p_bb:
        stay = fl(t.p_bb)
        moved = RowWeights(first=TOTAL - (m - 2) * r_b - stay, second=stay, other=r_b, n_others=m - 2)
    else:
        to_a = fl(t.p_ba)
        moved = RowWeights(first=to_a, second=TOTAL - (m - 2) * r_b - to_a, other=r_b, n_others=m - 2)
    return kept, moved


# ---------------------------------------------------------------- the rule, on every grid

@pytest.mark.parametrize("grid", list(DEMO_GRIDS), ids=list(DEMO_GRIDS))
@pytest.mark.parametrize("m", SIZES)
def test_every_prefix_of_a_grid_chain_realises_at_most_its_last_epsilon(grid, m):
    eps = DEMO_GRIDS[grid]
    for k in range(1, len(eps) + 1):
        level = chain_level(eps[:k], m)
        assert level.at_most(eps[k - 1]), (eps[:k], level.epsilon)
        # the whole chain's level is exactly its last marginal's, and honours the epsilon to 1e-6
        assert level.ratio == krr_level(eps[k - 1], m).ratio
        assert level.at_least(eps[k - 1] - Decimal("0.000001"))


@pytest.mark.parametrize("m", SIZES)
def test_krr_realises_at_most_eps_and_within_a_micro_epsilon_of_it_up_to_the_limit(m):
    for eps in [Decimal(0), Decimal("0.000001"), Decimal("0.1"), Decimal("1"), Decimal("2.302585"),
                Decimal("10"), Decimal("20"), Decimal("29.999999"), Decimal(SAMPLER_EPS_MAX)]:
        level = krr_level(eps, m)
        assert level.at_most(eps) and level.at_least(eps - Decimal("0.000001")), (eps, level.epsilon)


@settings(max_examples=60, deadline=None)
@given(m=st.sampled_from([2, 3, 5, 16]),
       micros=st.lists(st.integers(min_value=0, max_value=SAMPLER_EPS_MAX * 10**6), min_size=1, max_size=12,
                       unique=True))
def test_any_forward_sequence_realises_its_last_epsilon_however_fine_its_steps(m, micros):
    eps = [Decimal(u) / 10**6 for u in sorted(micros)]
    level = chain_level(eps, m)
    assert level.at_most(eps[-1]) and level.ratio == krr_level(eps[-1], m).ratio


def test_micro_steps_at_the_limit_stay_exact():
    eps = [Decimal("29.999997"), Decimal("29.999998"), Decimal("29.999999"), Decimal(30)]
    assert chain_level(eps, 16).at_most(30)
    kept, moved = step_weights(29.999999, 30.0, 16)
    assert kept.other > 0 and moved.other > 0  # no cell vanishes, however small the step


# ---------------------------------------------------------------- the old thresholds failed

def test_the_old_floor_thresholds_realise_more_than_charged():
    # k-RR at 40: the floored flip cells realise about 0.5% above e^40
    old = chain_level([40], 2, initial=old_floor_krr)
    assert not old.at_most(40)
    assert Decimal("0.004") < old.epsilon - 40 < Decimal("0.006")
    # above 44.4 the flip cell is 0: the true value is released deterministically (an infinite ratio)
    with pytest.raises(OverflowError):
        chain_level([45], 2, initial=old_floor_krr)
    # a relaxation 20 -> 25: r_a = e^-45 floors to 0 under one value but not the other
    with pytest.raises(OverflowError):
        chain_level([20, 25], 2, initial=old_floor_krr, step=old_floor_step)
    # on the default grid the old chain exceeds its last epsilon by about 3e-10
    grid = DEMO_GRIDS["default 0.1..10"]
    assert not chain_level(grid, 2, initial=old_floor_krr, step=old_floor_step).at_most(grid[-1])


def test_at_most_decides_exactly_at_the_boundary():
    e = Fraction(Decimal("2.718281828459045235360287471352662497757247093699959574966967627724076630353"))
    below, above = Level(e - Fraction(1, 10**70)), Level(e + Fraction(1, 10**70))  # e^1 to 75 digits
    assert below.at_most(1) and not above.at_most(1)


# ---------------------------------------------------------------- the max-times against brute force

def kernel(weights: RowWeights, first: int, second: int, m: int) -> list[Fraction]:
    row = [Fraction(weights.other, weights.total)] * m
    if second != first:
        row[second] = Fraction(weights.second, weights.total)
    row[first] = Fraction(weights.first, weights.total)
    assert sum(row) == 1
    return row


def forward_law(eps, m, a) -> dict:
    """Pr(o_1..o_k | a) of the integer forward chain, every path enumerated."""
    c = krr_cells(eps[0], m)
    law = {(o,): Fraction(c.keep if o == a else c.flip, c.total) for o in range(m)}
    for e1, e2 in zip(eps, eps[1:]):
        kept, moved = step_weights(e1, e2, m)
        nxt = {}
        for path, p in law.items():
            o1 = path[-1]
            row = kernel(kept, a, a, m) if o1 == a else kernel(moved, a, o1, m)
            for o2 in range(m):
                nxt[path + (o2,)] = p * row[o2]
        law = nxt
    return law


def max_ratio(laws: list[dict]) -> Fraction:
    return max(la[path] / lb[path] for la, lb in itertools.permutations(laws, 2) for path in la)


@pytest.mark.parametrize("m,eps", [(2, ["0.5", "1", "2"]), (3, ["0", "0.4", "1.7"]), (4, ["0.1", "3"]),
                                   (3, ["20", "25"]), (4, ["1", "1.000001", "9"])])
def test_chain_level_is_the_largest_ratio_over_every_path_and_pair_of_values(m, eps):
    eps = [Decimal(e) for e in eps]
    laws = [forward_law(eps, m, a) for a in range(m)]
    assert all(sum(law.values()) == 1 for law in laws)
    assert chain_level(eps, m).ratio == max_ratio(laws)
    # sufficiency, exactly: given the last output the earlier ones do not depend on the value
    for path in laws[0]:
        assert len({laws[a][path] / sum(p for q, p in laws[a].items() if q[-1] == path[-1])
                    for a in range(m)}) == 1


# ---------------------------------------------------------------- bridging and tightening: post-processing

@pytest.mark.parametrize("m", [2, 3, 4])
def test_a_bridged_point_has_the_forward_law_and_adds_nothing(m):
    lo, mid, hi = Decimal("0.3"), Decimal("1.1"), Decimal("2.5")
    same, differ = bridge_weights_exact(lo, mid, hi, m)  # no true value goes in
    for a in range(m):
        through = forward_law([lo, mid, hi], m, a)
        ends = forward_law([lo, hi], m, a)
        for (o_lo, o_mid, o_hi), p in through.items():
            w = kernel(same, o_hi, o_hi, m) if o_lo == o_hi else kernel(differ, o_hi, o_lo, m)
            assert p == ends[(o_lo, o_hi)] * w[o_mid]  # exactly the forward chain through mid
    bridged = [{(x, y, z): ends_p * (kernel(same, z, z, m) if x == z else kernel(differ, z, x, m))[y]
                for (x, z), ends_p in forward_law([lo, hi], m, a).items() for y in range(m)} for a in range(m)]
    assert max_ratio(bridged) == max_ratio([forward_law([lo, hi], m, a) for a in range(m)])


@pytest.mark.parametrize("m", [2, 3, 5])
def test_a_tightened_point_has_the_forward_law_and_adds_nothing(m):
    low, first = Decimal("0.05"), Decimal("0.7")
    w = tighten_weights_exact(first, low, m)
    for a in range(m):
        through = forward_law([low, first], m, a)
        top = forward_law([first], m, a)
        for (o_low, o_first), p in through.items():
            assert p == top[(o_first,)] * kernel(w, o_first, o_first, m)[o_low]
    assert chain_level([low, first], m).ratio == krr_level(first, m).ratio


def test_bridge_and_tighten_never_read_a_true_value():
    # their signatures take stored outputs and epsilons only, and their draws are the same whatever the
    # values of the owners are: there is nothing to pass them.
    import inspect

    for f in (bridge, tighten, bridge_weights_exact, tighten_weights_exact):
        assert not {"values", "true_value", "inputs"} & set(inspect.signature(f).parameters)
    assert "values" in inspect.signature(relax).parameters


def test_epsilons_above_the_limit_are_refused_with_the_limit_named():
    with pytest.raises(ValueError, match="at most 30"):
        krr_cells(30.5, 2)
    with pytest.raises(ValueError, match="at most 30"):
        step_weights(1, 44.4, 2)


def test_the_sampler_draws_the_law_the_level_is_computed_from():
    # relax at a step whose integer kernel differs visibly from the float one would be caught by the
    # chi-square tests of test_sampling; here: the float and integer laws agree to 1e-15, so those tests
    # check the integer law the levels are computed from.
    kept, moved = step_weights(0.5, 1.0, 3)
    t = step_terms(0.5, 1.0, 3)
    assert float(Fraction(kept.first, kept.total)) == pytest.approx(t.p_aa, rel=1e-15)
    assert float(Fraction(kept.other, kept.total)) == pytest.approx(t.r_a, rel=1e-12)
    assert float(Fraction(moved.first, moved.total)) == pytest.approx(t.p_ba, rel=1e-15)
    assert float(Fraction(moved.second, moved.total)) == pytest.approx(t.p_bb, rel=1e-15)
