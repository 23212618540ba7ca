"""Never more than the epsilon charged: the one-shot samplers and survey devices, exactly (docs/mechanisms.md,
"Exact sampling: one-shot mechanisms").

* Grids: the realised level computed exactly from the integer cells each sampler uses
  (``mechanisms.exactness_oneshot``) is at most the epsilon the market charges (``market.purchases.oneshot``: the
  requested epsilon, ``ceil6(lpp_level)`` for RR3‡ / LPP‡, ``ceil6(deck_level)`` for the improved
  Christofides deck), over domain sizes 2..16, epsilons 0.1..10 step 0.1 plus edge values, and the demo
  datasets' parameters -- and within 1e-9 of the design level, so the cells are not simply over-noised.
* The old rule (``floor(p 2^64)``, the largest or last cell taking the remainder) breaks it.
* Chi-square tests of every changed sampler against the law of its cells (seeded and secure default), and
  fixed words at the cells' exact boundaries, so a sampling bug cannot hide behind a correct formula.
* Every sampler refuses, naming the limit, an epsilon whose cells would need a probability below 2^-64.
"""
from __future__ import annotations

import math
from decimal import Decimal as D
from fractions import Fraction

import numpy as np
import pytest

from ldpmarket.problems import TooFewRespondents
from market.management.commands.load_demo import _oneshot_demos
from market.purchases import oneshot_specs as market
from mechanisms import exactness_oneshot as X
from mechanisms import private_sampling as ps
from mechanisms import registry, rr3, surveys, uldp
from mechanisms._exact import TWO_64, exp_lower, exp_upper, ln_upper, ratio_at_most
from mechanisms._sampling import CellTable, draw_categorical, draw_iid, safe_cells
from mechanisms.random import U64_MAX
from mechanisms.rr3 import lpp_level as exact_lpp_level
from tests.mechanisms.fixed_words import FixedWords
from tests.mechanisms.test_sampling import SECURE_ALPHA, SEEDED_ALPHA, chi_square_table_p

T = TWO_64
#: 0.1 .. 10 step 0.1 (the demo grids 0.1..2.0 and the one-shot ceiling 5 included), plus edge values.
EPS_GRID = [D(i) / 10 for i in range(1, 101)] + [D("0.000001"), D("0.00001"), D("0.001"), D("20"), D("30"),
                                                 D("40"), D("44")]
#: Within this of the design level, plus the rounding of a small cell (relative 1/cell, cell ~ 2^64 e^-eps): the
#: cells are the mechanism, not a noisier one.
TIGHT = D("1e-9")


def check(ratio, charged, design=None, mass=D(1)) -> None:
    """realised <= charged exactly (and the rounded-up Decimal report agrees); realised >= design - tolerance,
    the tolerance allowing one unit on a small cell of about ``mass 2^64 e^-design``."""
    assert X.level_at_most(ratio, charged), (X.level_decimal(ratio), charged)
    assert X.level_decimal(ratio) <= charged
    if design is not None:
        tolerance = TIGHT + 4 * D(design).exp() / (T * mass)
        assert X.level_decimal(ratio) > design - tolerance, (X.level_decimal(ratio), design)


def sensitive_sets(k: int) -> list[list[int]]:
    sizes = sorted({0, 1, 2, k // 2, k - 1, k} & set(range(k + 1)))
    return [list(range(k - s, k)) for s in sizes]


def demo(kind: str) -> dict:
    return next(d.attribute for d in _oneshot_demos() if d.attribute["mechanism"] == kind)


# =============================================================================================== exact helpers

@pytest.mark.parametrize("x", [D("0.000001"), D("1.1"), 1.1, D("-0.5"), D("44.361419"), D("700"), 3])
def test_exp_bounds_bracket_e_to_the_x_within_1e_28(x):
    from decimal import Context
    exact = Fraction(Context(prec=120).exp(D(x)))      # D(1.1) is the float's exact binary value
    lo, up = exp_lower(x), exp_upper(x)
    assert lo < exact < up
    assert (exact - lo) / exact < Fraction(1, 10**28) and (up - exact) / exact < Fraction(1, 10**28)
    assert exp_lower(0) == exp_upper(0) == 1
    third = Fraction(1, 3)                               # other rationals are bracketed through 60 digits
    assert exp_lower(third) < Fraction(Context(prec=120).exp(Context(prec=120).divide(D(1), D(3)))) < exp_upper(third)


def test_ln_upper_is_an_upper_bound_within_1e_38():
    ln_1_5 = D("0.40546510810816438197801311546434913657199042346249")   # ln 1.5 to 50 places
    assert ln_1_5 < ln_upper(Fraction(3, 2)) < ln_1_5 + D("1e-38")
    big = Fraction(2**64 - 1, 3)
    from decimal import Context
    true = Context(prec=80).ln(D(2**64 - 1) / D(3))
    assert true < ln_upper(big) < true + D("1e-37")


def test_ratio_at_most_decides_exactly_next_to_the_boundary():
    L = exp_lower(D(2), 60)
    U = exp_upper(D(2), 60)
    assert ratio_at_most(L, D(2)) and not ratio_at_most(U, D(2))
    assert ratio_at_most(Fraction(1), D(0)) and not ratio_at_most(Fraction(1) + Fraction(1, 10**40), D(0))
    assert not ratio_at_most(math.inf, D(700))
    assert X.level_decimal(Fraction(1)) == 0 and X.level_decimal(math.inf) == D("Infinity")


def test_a_decimal_epsilon_is_taken_at_its_decimal_value_and_a_float_at_its_binary_value():
    """float(1.1) is 1.100000000000000088...: cells built from it may exceed e^1.1 (by ~1e-16); the market
    passes Decimals."""
    assert exp_lower(1.1) > exp_lower(D("1.1"))
    check(X.ewrr_level(3, D("1.1")), D("1.1"))
    assert X.level_at_most(X.ewrr_level(3, 1.1), 1.1)


# ============================================================================== realised <= charged: ULDP

@pytest.mark.parametrize("k", range(2, 17))
def test_urr_realised_level_is_at_most_the_charge(k):
    for S in sensitive_sets(k):
        for eps in EPS_GRID:
            r = X.urr_level(k, S, eps)
            if S:
                check(r, eps, design=eps)
            else:
                assert r == 1  # the identity: nothing protected


@pytest.mark.parametrize("k", range(2, 17))
def test_urap_realised_level_is_at_most_the_charge(k):
    grid = EPS_GRID if k <= 6 else EPS_GRID[::3] + EPS_GRID[100:]
    for S in sensitive_sets(k):
        for eps in grid:
            r = X.urap_level(k, S, eps)
            check(r, eps, design=eps if S else None)
        for theta in (D("0.000001"), D("0.3"), D("0.5"), D("0.9"), D("0.999999")):
            for eps in (D("0.1"), D("1"), D("2.5"), D("10")):
                check(X.urap_level(k, S, eps, theta), eps, design=eps if S else None)


def test_pum_on_the_demo_and_with_many_tags():
    attr = demo("urr")
    k, kappa = len(attr["labels"]), len(attr["pum_tags"])
    S = [attr["labels"].index(x) for x in attr["sensitive"]]
    assert (k, S, kappa) == (5, [3, 4], 2)
    for eps in EPS_GRID:
        check(X.pum_level(k, S, kappa, eps), eps, design=eps)
        check(X.pum_level(k, S, kappa, eps, "urap"), eps, design=eps)
    for k, S, kappa in [(2, [], 1), (2, [1], 16), (16, [0], 16), (16, list(range(16)), 3)]:
        for eps in (D("0.000001"), D("0.5"), D("3"), D("30")):
            check(X.pum_level(k, S, kappa, eps), eps, design=eps)
            check(X.pum_level(k, S, kappa, eps, "urap", D("0.4")), eps, design=eps)


# =============================================================================== realised <= charged: RR3

@pytest.mark.parametrize("n", range(2, 17))
def test_ewrr_realised_level_is_at_most_the_charge(n):
    for eps in EPS_GRID:
        check(X.ewrr_level(n, eps), eps, design=eps)


RR3_GRID = [D(i) / 10 for i in range(1, 31)] + [D("0.000001"), D("5"), D("10"), D("20"), D("30"), D("40"),
                                                D("43.668272")]


def test_rr3_ddagger_and_lpp_realised_level_is_at_most_the_charged_exact_level():
    """Charged: ``ceil6(rr3.lpp_level(eps1, eps2))`` as ``market.purchases.oneshot_specs`` computes it (the registry's
    two-epsilon level); e.g. (1, 2) charges exactly
    2.000000 = eps2, which the cells must stay below although ``X/Y = e^eps2`` is tight in the ideal matrix."""
    for e1 in RR3_GRID:
        for e2 in RR3_GRID:
            charged = market.ceil6(exact_lpp_level(e1, e2))
            design = exact_lpp_level(e1, e2)
            check(X.rr3_ddagger_level(e1, e2), charged, design=design)
            assert X.lpp_level(e1, e2) == X.rr3_ddagger_level(e1, e2)
    r = X.lpp_level(D(1), D(2))
    assert market.ceil6(exact_lpp_level(D(1), D(2))) == D("2.000000")
    assert X.level_decimal(r) < 2 and X.level_decimal(r) > 2 - TIGHT


# ================================================================================== realised <= charged: rest

def priors():
    rng = np.random.default_rng(2024)
    out = [("demo", np.array(demo("private_sample")["prior"], dtype=float))]
    for n in range(2, 17):
        out.append((f"dirichlet-{n}", rng.dirichlet(np.ones(n))))
        out.append((f"uniform-{n}", np.full(n, 1.0 / n)))
    out.append(("skewed", np.array([0.000001, 0.2, 0.799999])))
    return out


@pytest.mark.parametrize("name,q", priors(), ids=[p[0] for p in priors()])
def test_private_sampler_realised_level_is_at_most_the_charge(name, q):
    grid = EPS_GRID if name in ("demo", "skewed") or q.size <= 4 else EPS_GRID[::4] + EPS_GRID[100:]
    for eps in grid + [D("0.000000001"), D("0.00000001")]:
        r = X.private_sample_level(q, eps)
        if eps <= 4 * ps._pad(q.size) / q.min():  # below double precision's reach: every row q, level 0
            assert r == 1
        else:
            check(r, eps, design=eps)


def test_survey_devices_realised_level_is_at_most_the_charge():
    p2s = (D("0"), D("0.01"), D("0.05"), D("0.5"), D("0.9"), D("0.99"))
    limits = {p2: surveys.device_max_epsilon("christofides", p2) for p2 in p2s}
    for eps in EPS_GRID:
        check(X.warner_level(eps), eps, design=eps)
        for pi_b in (D("0.000001"), D("0.1"), D("0.25"), D("0.5"), D("0.75"), D("0.9"), D("0.999999")):
            check(X.simmons_level(eps, pi_b), eps, design=eps)
        for p2 in p2s:
            if eps > limits[p2]:   # 39.756249 for p2 = 0.99
                with pytest.raises(ValueError, match="largest epsilon for this p2"):
                    X.christofides_level(eps, p2)
                continue
            check(X.christofides_level(eps, p2), eps, design=eps, mass=1 - p2)


def test_improved_christofides_deck_dealt_is_at_most_its_charge_and_the_target():
    dealt = refused = 0
    for N in (2, 3, 10, 100, 1000, 10_000, 100_000, 3_252_599):
        for eps in EPS_GRID[::2] + EPS_GRID[100:]:
            for p2 in (0.0, 0.01, 0.1, 0.5):
                try:
                    counts = market.ic_deck(N, eps, p2)
                except TooFewRespondents:
                    refused += 1
                    continue
                dealt += 1
                # the deck itself, before the market's guard (which moves cards from 3 to 1 if it must)
                assert counts.tolist() == surveys.ic_deck_counts(N, eps, p2).tolist()
                r = X.improved_christofides_level(counts)
                check(r, market.ceil6(surveys.deck_level(counts)))
                check(r, eps)  # below the target itself
                assert r == Fraction(int(counts[2]), int(counts[0]))
    assert dealt > 1000 and refused > 0


def test_the_market_draws_what_it_charges():
    """The market's draw parameters (the registry's RR3 cells, ``market.purchases.oneshot_specs``' survey devices)
    (RR3 cells, survey devices) are the exact cells, at most the charge."""
    for eps in (D("0.1"), D("1.000000"), D("2.5"), D("10")):
        spec = market.Spec(market.M.RR3, eps, eps, {"family": "ewrr3"})
        check(X.ldp_level(registry.rr3_cells(spec.charged, spec.parameters).cells()), spec.charged, design=eps)
        for e1, e2 in ((D("1"), D("2")), (D("0.3"), D("1.7")), (D("2"), D("0.5"))):
            charged = market.ceil6(exact_lpp_level(e1, e2))
            spec = market.Spec(market.M.RR3, None, charged, {"family": "rr3_ddagger", "eps1": str(e1), "eps2": str(e2)})
            check(X.ldp_level(registry.rr3_cells(spec.charged, spec.parameters).cells()), charged)
        for mech, params in ((market.M.WARNER, {}), (market.M.SIMMONS, {"pi_b": "0.3"}),
                             (market.M.CHRISTOFIDES, {"p2": "0.1"})):
            design, charged = market.survey_design(market.Spec(mech, eps, eps, params), 1000)
            device = design.get("device") or design.get("cards")
            check(X.ldp_level(device.rows()), charged, design=eps)
        design, charged = market.survey_design(market.Spec(market.M.IMPROVED_CHRISTOFIDES, eps, eps, {"p2": "0.1"}),
                                               1000)
        check(X.improved_christofides_level(design["counts"]), charged)


# ===================================================================================== the old rule fails

def _old_floor(p: float) -> int:
    return int(float(p) * T)  # the old mechanisms.random.threshold: floor(p 2^64)


def _old_rows_top_remainder(P) -> list[list[int]]:
    """The old ``rr3._row_tables``: every cell floored, the most probable one takes the remainder."""
    out = []
    for row in np.asarray(P, dtype=float):
        w = [_old_floor(v) for v in row]
        w[int(np.argmax(row))] += T - sum(w)
        out.append(w)
    return out


def _old_cdf_rows(P) -> list[list[int]]:
    """The old ``draw_categorical``/``draw_iid``: thresholds floor(cdf 2^64) (cdf < 1), the last category the rest."""
    out = []
    for row in np.atleast_2d(np.asarray(P, dtype=float)):
        cdf = np.cumsum(row[:-1])
        edges = [0] + [_old_floor(c) for c in cdf[cdf < 1.0]]
        edges += [T] * (row.size + 1 - len(edges))
        out.append([edges[j + 1] - edges[j] for j in range(row.size)])
    return out


def old_levels():
    """``(mechanism, parameters, ratio, charged)`` of the old thresholds over the grids."""
    out = []
    eps_grid = EPS_GRID + [D("40.5"), D("41"), D("42"), D("43"), D("44.3"), D("45"), D("50")]
    for k in range(2, 17):
        for S in sensitive_sets(k):
            if not S:
                continue
            for eps in eps_grid:
                _, c2, _ = uldp._urr_probabilities(len(S), float(eps))
                R = _old_floor(c2)  # the old Layout.of: floor(c2 2^64), the kept value takes the remainder
                sens = set(S)
                rows = [[(T - (len(S) - 1) * R if y == x else R if y in sens else 0) if x in sens else
                         (R if y in sens else T - len(S) * R if y == x else 0) for y in range(k)] for x in range(k)]
                out.append(("uRR", (k, len(S), eps), X.uldp_level(rows, S), eps))
    for k in (2, 5, 16):
        for S in ([k - 1], list(range(k))):
            for eps in eps_grid:
                theta, d1, _, keep_n, _ = uldp._urap_terms(float(eps), None)
                cells = uldp.URAPCells(min(_old_floor(theta), T), _old_floor(d1), _old_floor(keep_n))
                out.append(("uRAP", (k, len(S), eps), X.urap_cells_level(k, S, cells), eps))
    for eps in eps_grid:
        P = rr3.ewrr_matrix(3, 1.0 / (1.0 + 2.0 * math.exp(-float(eps))))
        out.append(("EWRR3", (eps,), X.ldp_level(_old_rows_top_remainder(P)), eps))
    for e1 in RR3_GRID:
        for e2 in RR3_GRID:
            keep = lambda e: 1.0 / (1.0 + math.exp(-float(e)))  # noqa: E731
            P = rr3.rr3_ddagger(keep(e1), keep(e2))
            out.append(("RR3‡/LPP‡", (e1, e2), X.ldp_level(_old_rows_top_remainder(P)),
                        market.ceil6(exact_lpp_level(e1, e2))))
    for name, q in priors():
        for eps in eps_grid:
            if eps > 40:
                continue
            K = np.vstack([ps.output_distribution(np.eye(q.size)[i], q, float(eps)) for i in range(q.size)])
            out.append(("private sample", (name, eps), X.ldp_level(_old_cdf_rows(K)), eps))
    for eps in eps_grid:
        p = surveys.warner_probability(float(eps))
        rows = [[T - _old_floor(1 - p), _old_floor(1 - p)], [T - _old_floor(p), _old_floor(p)]]
        out.append(("Warner", (eps,), X.ldp_level(rows), eps))
        for pi_b in (0.1, 0.5, 0.9):
            p = surveys.simmons_probability(float(eps), pi_b)
            q1, q0 = p + (1 - p) * pi_b, (1 - p) * pi_b
            rows = [[T - _old_floor(q0), _old_floor(q0)], [T - _old_floor(q1), _old_floor(q1)]]
            out.append(("Simmons", (eps, pi_b), X.ldp_level(rows), eps))
        for p2 in (0.0, 0.1):
            cards = _old_cdf_rows(surveys.christofides_optimal_probs(float(eps), p2))[0]
            out.append(("Christofides", (eps, p2), X.ldp_level([cards, cards[::-1]]), eps))
    return out


def test_the_old_floor_thresholds_break_the_rule():
    """Flooring every cell and giving the rest to the largest (or last) one makes the realised ratio larger than
    e^charged on the grids, and infinite once a small cell floors to 0 (e.g. uRR and EWRR3 above eps ~44.4)."""
    bad = {}
    for mech, params, ratio, charged in old_levels():
        if not X.level_at_most(ratio, charged):
            bad.setdefault(mech, []).append((params, ratio))
    assert set(bad) >= {"uRR", "uRAP", "EWRR3", "RR3‡/LPP‡", "Warner", "Simmons", "Christofides"}, sorted(bad)
    assert any(r == math.inf for _, r in bad["uRR"]) and any(r == math.inf for _, r in bad["EWRR3"])
    # uRR at eps 40 with every value sensitive (k-RR): floor(c2 2^64) = 78 where c2 2^64 = 78.4
    eps40 = [r for (k, s, e), r in bad["uRR"] if e == D(40) and k == s == 2]
    assert eps40 and eps40[0] > Fraction(1004, 1000) * exp_upper(D(40))   # 0.47% above e^40


# ======================================================================================= statistical checks

def rngs():
    return [pytest.param(lambda: np.random.default_rng(20261123), SEEDED_ALPHA, id="seeded"),
            pytest.param(lambda: None, SECURE_ALPHA, id="secure-default")]


PER_INPUT = 40_000


def law(rows) -> np.ndarray:
    return np.array([[float(Fraction(c, T)) for c in row] for row in rows])


def table_p(x, y, rows) -> float:
    P = law(rows)
    counts = np.vstack([np.bincount(y[x == a], minlength=P.shape[1]) for a in range(P.shape[0])])
    return chi_square_table_p(counts, P)


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_urr_perturb_follows_its_cells(make_rng, alpha):
    rng = make_rng()
    for k, S, eps in [(5, [3, 4], D("1")), (4, [0, 1, 2, 3], D("0.3")), (7, [3, 4, 5, 6], D("2.5")), (3, [1], D("1"))]:
        x = np.repeat(np.arange(k), PER_INPUT)
        assert table_p(x, uldp.urr_perturb(x, k, S, eps, rng), uldp.urr_cell_matrix(k, S, eps)) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_urap_perturb_follows_its_cells(make_rng, alpha):
    """The law of the whole bit vector (all 2^k patterns), per input, is the product law of the cells."""
    rng = make_rng()
    for k, S, eps, theta in [(4, [1, 2], D("1"), None), (3, [0, 1, 2], D("0.5"), None), (4, [3], D("2"), D("0.3"))]:
        cells = uldp.urap_cells(eps, theta)
        rows = []
        for x in range(k):
            p_set = [Fraction(cells.theta if j == x else cells.d1, T) if j in S else
                     Fraction(cells.keep_n if j == x else 0, T) for j in range(k)]
            row = []
            for pattern in range(1 << k):
                pr = Fraction(1)
                for j in range(k):
                    pr *= p_set[j] if pattern >> j & 1 else 1 - p_set[j]
                row.append(pr * T)
            rows.append(row)
        x = np.repeat(np.arange(k), PER_INPUT)
        bits = uldp.urap_perturb(x, k, S, eps, rng, theta)
        pattern = (bits.astype(np.int64) << np.arange(k)).sum(axis=1)
        assert table_p(x, pattern, rows) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_rr3_perturb_and_lpp_report_follow_their_cells(make_rng, alpha):
    rng = make_rng()
    x = np.repeat(np.arange(3), PER_INPUT)
    for cells in (rr3.ewrr_cells(3, D("1.2")), rr3.rr3_ddagger_cells(D("1"), D("2")),
                  rr3.rr3_ddagger_cells(D("0.2"), D("0.7"))):
        assert table_p(x, rr3.perturb(x, cells, rng), cells.cells()) > alpha
    # LPP: one item; users with no edge, +1, -1 and a weight 0.5 (+1 w.p. 3/4): the state's law
    cells = rr3.rr3_ddagger_cells(D("0.8"), D("1.5")).cells()
    edges = np.repeat(np.array([np.nan, 1.0, -1.0, 0.5]), PER_INPUT)[:, None]
    rep = rr3.lpp_report(edges, 1, D("0.8"), D("1.5"), rng)
    assert (rep[:, 0] == 0).all()
    mixed = [3 * a // 4 + b // 4 for a, b in zip(cells[1], cells[2])]
    mixed[int(np.argmax(mixed))] += T - sum(mixed)
    group = np.repeat(np.arange(4), PER_INPUT)
    assert table_p(group, rep[:, 1], [cells[0], cells[1], cells[2], mixed]) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_private_sample_follows_its_integer_kernel(make_rng, alpha):
    """Point masses give the kernel's rows; a mixed p gives p' K' with p' the safe cells of p."""
    rng = make_rng()
    q = np.array(demo("private_sample")["prior"], dtype=float)
    eps = D("1.5")
    K = ps.kernel_cells(q, eps).cells()
    n = q.size
    x = np.repeat(np.arange(n), PER_INPUT)
    assert table_p(x, ps.sample(np.eye(n)[x], q, eps, rng), K) > alpha
    p = np.array([0.1, 0.0, 0.6, 0.3])
    pc = [Fraction(c, T) for c in safe_cells(p)]
    mix = [sum(pc[i] * K[i][j] for i in range(n)) for j in range(n)]
    y = ps.sample(np.tile(p, (4 * PER_INPUT, 1)), q, eps, rng)
    assert table_p(np.zeros(y.size, dtype=int), y, [mix]) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_survey_devices_follow_their_cells(make_rng, alpha):
    rng = make_rng()
    x = np.repeat([0, 1], 2 * PER_INPUT)
    for device in (surveys.warner_device(D("0.8")), surveys.simmons_device(D("1"), D("0.2")),
                   surveys.simmons_device(D("1"), D("0.85"))):
        perturb = surveys.warner_perturb if isinstance(device, surveys.WarnerDevice) else surveys.simmons_perturb
        assert table_p(x, perturb(x, device, rng=rng), device.rows()) > alpha
    cards = surveys.christofides_cards(D("0.7"), D("0.1"))
    assert table_p(x, surveys.christofides_perturb(x, cards, rng) - 1, cards.rows()) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_draw_categorical_and_draw_iid_follow_the_safe_cells(make_rng, alpha):
    rng = make_rng()
    probs = np.array([0.2, 0.0, 0.35, 0.05, 0.4])
    cells = safe_cells(probs)
    y = draw_categorical(rng, np.tile(probs, (4 * PER_INPUT, 1)))
    assert table_p(np.zeros(y.size, dtype=int), y, [cells]) > alpha
    y = draw_iid(rng, probs, 4 * PER_INPUT)
    assert table_p(np.zeros(y.size, dtype=int), y, [cells]) > alpha


def test_chi_square_sees_a_sampler_that_maps_cells_to_the_wrong_outputs():
    """Power: uRR draws read with the kept value swapped for the first sensitive one are rejected."""
    k, S, eps = 5, [3, 4], D("1")
    x = np.repeat(np.arange(k), PER_INPUT)
    y = uldp.urr_perturb(x, k, S, eps, np.random.default_rng(5))
    y = np.where((x < 3) & (y == x), 3, np.where((x < 3) & (y == 3), x, y))
    assert table_p(x, y, uldp.urr_cell_matrix(k, S, eps)) < 1e-12


# ================================================================================ fixed words at the edges

class Words:
    """Prescribed words handed out in order, whatever the batch size (the private sampler draws twice)."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.uint64)
        self.at = 0

    def words(self, n):
        out = self.values[self.at:self.at + n]
        self.at += n
        assert out.size == n
        return out


def test_urr_perturb_decides_at_its_exact_cells():
    k, S, eps = 5, [1, 3], D("0.7")
    c = uldp.urr_cells(2, eps)
    u = [0, c.c2 - 1, c.c2, 2 * c.c2 - 1, 2 * c.c2, U64_MAX]
    assert uldp.urr_perturb([0] * 6, k, S, eps, FixedWords(u)).tolist() == [1, 1, 3, 3, 0, 0]  # non-sensitive
    assert uldp.urr_perturb([3] * 6, k, S, eps, FixedWords(u)).tolist() == [1, 1, 3, 3, 3, 3]  # sensitive: c1 kept
    assert uldp.urr_perturb([1] * 6, k, S, eps, FixedWords(u)).tolist() == [3, 3, 1, 1, 1, 1]


def test_urap_perturb_decides_at_its_exact_cells():
    """k = 2, S = [0]: a sensitive input sets bit 0 for words below ``theta``; a non-sensitive one sets bit 0
    below ``d1`` and its own bit 1 below ``keep_n`` (second word)."""
    eps = D("1.3")
    c = uldp.urap_cells(eps)
    bits = uldp.urap_perturb([0, 0], 2, [0], eps, FixedWords([c.theta - 1, 0, c.theta, 0]))
    assert bits.tolist() == [[True, False], [False, False]]
    bits = uldp.urap_perturb([1, 1], 2, [0], eps, FixedWords([c.d1 - 1, c.keep_n - 1, c.d1, c.keep_n]))
    assert bits.tolist() == [[True, True], [False, False]]


def test_cell_tables_decide_at_their_exact_cells():
    cells = rr3.rr3_ddagger_cells(D("1"), D("2"))
    Z, X_, Y = cells.cells()[1]
    # row 1 = (no edge, kept sign, flipped sign): the largest (kept) last, the others in order
    u = [0, Z - 1, Z, Z + Y - 1, Z + Y, U64_MAX]
    assert rr3.perturb([1] * 6, cells, FixedWords(u)).tolist() == [0, 0, 2, 2, 1, 1]
    K = ps.kernel_cells([0.3, 0.1, 0.15, 0.45], D("1")).cells()
    row = K[0]
    order = sorted(range(4), key=lambda j: (j == int(np.argmax(row)), j))
    edge = row[order[0]]
    # stage 1 draws symbol 0 of a point mass (any word); stage 2 decides at the cell edge
    got = ps.sample(np.tile([1.0, 0, 0, 0], (2, 1)), [0.3, 0.1, 0.15, 0.45], D("1"), Words([0, 0, edge - 1, edge]))
    assert got.tolist() == [order[0], order[1]]


def test_survey_devices_decide_at_their_exact_cells():
    w = surveys.warner_device(D("1"))
    assert surveys.warner_perturb([1, 1, 0, 0], w, FixedWords([w.yes1 - 1, w.yes1, w.yes0 - 1, w.yes0])).tolist() \
        == [1, 0, 1, 0]
    cards = surveys.christofides_cards(D("1"), D("0.2"))
    c1, c2, _ = cards.cells
    got = surveys.christofides_perturb([0] * 4, cards, FixedWords([c1 - 1, c1, c1 + c2 - 1, c1 + c2]))
    assert got.tolist() == [1, 2, 2, 3]


def test_safe_cells_round_small_cells_up_and_keep_zeros():
    tiny = 2.0 ** -70
    cells = safe_cells([tiny, 0.0, 0.25 + 2.0 ** -50, 0.75 - 2.0 ** -50])
    # small cells up, the largest takes the rest
    assert cells == [1, 0, (1 << 62) + (1 << 14), (3 << 62) - (1 << 14) - 1]
    # the old rule floored the tiny cell to 0: the category could never be drawn
    assert _old_cdf_rows([tiny, 0.0, 0.25, 0.75])[0][0] == 0
    got = draw_categorical(FixedWords([0, 1]), np.tile([tiny, 0.0, 0.25 + 2.0 ** -50, 0.75 - 2.0 ** -50], (2, 1)))
    assert got.tolist() == [0, 2]
    table = CellTable.from_rows([cells])
    assert table.cells() == [cells]


# ==================================================================================================== limits

def test_samplers_refuse_an_epsilon_they_cannot_honour_naming_the_limit():
    assert uldp.urr_max_epsilon(1) == D("44.361419") and uldp.urr_max_epsilon(16) == D("44.361419")
    assert rr3.ewrr_max_epsilon(3) == D("44.361419")
    assert rr3.rr3_ddagger_max_epsilons() == (D("43.668272"), D("43.668272"))
    assert uldp.urap_max_epsilon() == D("88.029691")
    assert surveys.device_max_epsilon("warner") == D("44.361419")
    assert ps.max_epsilon([0.3, 0.1, 0.15, 0.45]) == D("44.361419")
    cases = [
        (lambda e: uldp.urr_perturb([0], 5, [3, 4], e), uldp.urr_max_epsilon(2)),
        (lambda e: uldp.urap_perturb([0], 5, [3, 4], e), uldp.urap_max_epsilon()),
        (lambda e: rr3.perturb([0], rr3.ewrr_cells(3, e)), rr3.ewrr_max_epsilon(3)),
        (lambda e: rr3.lpp_report(np.array([[1.0]]), 1, e, D(1)), rr3.rr3_ddagger_max_epsilons()[0]),
        (lambda e: rr3.lpp_report(np.array([[1.0]]), 1, D(0), e), rr3.rr3_ddagger_max_epsilons()[1]),
        (lambda e: ps.sample([0.5, 0.5], [0.3, 0.7], e), ps.max_epsilon([0.3, 0.7])),
        (lambda e: surveys.warner_perturb([1], surveys.warner_device(e)), surveys.device_max_epsilon("warner")),
        (lambda e: surveys.simmons_device(e, D("0.3")), surveys.device_max_epsilon("simmons", D("0.3"))),
        (lambda e: surveys.christofides_cards(e, D("0.5")), surveys.device_max_epsilon("christofides", D("0.5"))),
    ]
    for call, limit in cases:
        call(limit)                                    # at the limit: honest cells
        with pytest.raises(ValueError, match=str(limit)):
            call(limit + D("0.01"))
    with pytest.raises(ValueError, match="too small"):
        rr3.ewrr_cells(3, 0)                           # eps = 0 cannot be realised with thirds of 2^64
    assert X.ewrr_level(4, 0) == 1                     # ... quarters can
