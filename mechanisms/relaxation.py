"""Gradual release of randomized response, docs/mechanisms-reference.md#gradual-release-of-randomized-response.

**One relaxation step** eps1 -> eps2 (eps2 > eps1 >= 0) draws ``o2`` given the
previous output ``o1`` of an eps1 k-RR of the true value ``a`` (paper Eq. 54):

    o1 = a:       o2 = a w.p. p_aa,  each other value w.p. r_a = (1 - p_aa)/(m - 1)
    o1 = b != a:  o2 = a w.p. p_ba,  o2 = b w.p. p_bb,  each other w.p. r_b = (1 - p_ba - p_bb)/(m - 2)

Stable forms (docs/mechanisms-reference.md#gradual-release-of-randomized-response), with ``x = e^-eps2``,
``A = -expm1(-eps2)``, ``B = 1 + (m - 1) x`` and ``g = -expm1(eps1 - eps2) / (A B)``:

    p_ba = g
    p_aa = 1/B + (m - 1) (-expm1(-eps1)) x / (A B)
    p_bb = e^(eps1 - eps2)/B + (m - 1) (-expm1(-eps1)) e^(eps1 - 2 eps2) / (A B)
    r_b  = x g                 (from A B (1 - p_ba - p_bb) = (m - 2) x (1 - e^(eps1 - eps2)))
    r_a  = e^-eps1 x g         (from 1 - p_aa = (m - 1) e^-eps1 x (1 - e^(eps1 - eps2)) / (A B))

No term overflows or cancels for 0 <= eps1 < eps2 <= 700, however close eps2
is to eps1.  Properties, each proved by exact enumeration in
``tests/mechanisms/test_exact.py``: the marginal of ``o2`` is eps2 k-RR; the
pair is eps2-LDP; given the last output the earlier ones carry no information
about the value (Lemma 3.1); step kernels compose as a semigroup.

The samplers :func:`relax`, :func:`bridge` and :func:`tighten` draw from the
exact integer versions of these laws (``mechanisms.exactness``: k-RR cells of
2^-64 with the small cells rounded up, and kernels built from value-free
backward kernels), so every forward chain realises exactly the level of its
last k-RR marginal, at most its last epsilon, and bridging and tightening
never read the true value.  They refuse epsilons above ``SAMPLER_EPS_MAX``
(30).  The float functions here (``step_terms``, the matrices, the weights)
are the mathematics the integer laws approximate to about 2^-64; tests use
them as the reference law.  See docs/mechanisms.md, "Exact sampling".

**Bridge** (section 3): given stored outputs at eps_lo < eps_hi, an output at
eps_mid in between is drawn from ``Pr(o_mid | o_lo, o_hi) ∝ T(lo->mid)[o_lo, o_mid]
T(mid->hi)[o_mid, o_hi]``, which does not depend on the true value; evaluating
it at ``a = o_hi``:

    o_lo = o_hi = s:  w(s) = p_aa' p_aa'',   w(other) = r_a' p_ba''
    o_lo != o_hi:     w(o_hi) = p_ba' p_aa'', w(o_lo) = p_bb' p_ba'', w(other) = r_b' p_ba''

(' = step lo->mid, '' = step mid->hi), normalised.  **Tighten**: an output
below the first stored step, ``Pr(o_lo | o_hi) ∝ rr(eps_lo)[a, o_lo]
T(lo->hi)[o_lo, o_hi]``, at ``a = o_hi``: ``w(o_hi) = keep(eps_lo) p_aa``,
``w(other) = flip(eps_lo) p_ba``.  Neither needs the true value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _sampling
from ._validation import check_eps, check_increasing, check_m, check_same_shape, check_values
from .exactness import bridge_weights_exact, step_weights, tighten_weights_exact
from .rr import flip_probability, keep_probability, perturb


@dataclass(frozen=True)
class StepTerms:
    """Every probability of one relaxation step eps1 -> eps2 (module docstring)."""

    p_aa: float
    p_ba: float
    p_bb: float
    r_a: float
    r_b: float


def _check_step(eps_from, eps_to, m) -> tuple[float, float, int]:
    e1 = check_eps(eps_from, "eps_from")
    e2 = check_eps(eps_to, "eps_to")
    m = check_m(m)
    if not e2 > e1:
        raise ValueError(f"eps_to must be greater than eps_from for a relaxation step, got {e1:g} -> {e2:g}")
    return e1, e2, m


def step_terms(eps_from, eps_to, m) -> StepTerms:
    e1, e2, m = _check_step(eps_from, eps_to, m)
    x = math.exp(-e2)
    A = -math.expm1(-e2)
    B = 1.0 + (m - 1) * x
    g = -math.expm1(e1 - e2) / (A * B)
    c = (m - 1) * -math.expm1(-e1) / (A * B)
    return StepTerms(
        p_aa=1.0 / B + c * x,
        p_ba=g,
        p_bb=math.exp(e1 - e2) / B + c * math.exp(e1 - 2.0 * e2),
        r_a=math.exp(-e1) * x * g,
        r_b=x * g,
    )


def step_probabilities(eps_from, eps_to, m) -> tuple[float, float, float]:
    """``(p_aa, p_ba, p_bb)`` of the step eps_from -> eps_to (paper Eq. 54, stable form)."""
    t = step_terms(eps_from, eps_to, m)
    return t.p_aa, t.p_ba, t.p_bb


def step_matrix(eps_from, eps_to, m, true_value) -> np.ndarray:
    """``T[o_from, o_to] = Pr(o_to | o_from, X = true_value)``, an (m, m) row-stochastic matrix."""
    t = step_terms(eps_from, eps_to, m)
    m = int(m)
    a = int(check_values(np.array([true_value]), m, "true_value")[0])
    mat = np.full((m, m), t.r_b)
    np.fill_diagonal(mat, t.p_bb)
    mat[:, a] = t.p_ba
    mat[a, :] = t.r_a
    mat[a, a] = t.p_aa
    return mat


def relax(outputs, values, eps_from, eps_to, m, rng=None) -> np.ndarray:
    """One relaxation step for every value: draw ``o2 ~ Pr(o2 | o1, X = a)``.

    Needs the true values.  The result is distributed exactly as an eps_to
    k-RR of ``values`` and, together with ``outputs``, is only eps_to-LDP.
    """
    kept, moved = step_weights(eps_from, eps_to, m)
    o1 = check_values(outputs, m, "outputs")
    a = check_values(values, m, "values")
    check_same_shape(o1, a, "outputs", "values")
    return _sampling.draw_weighted(rng, a, o1, m, kept, o1 == a, moved)


def bridge_weights(eps_lo, eps_mid, eps_hi, m) -> tuple[tuple[float, float], tuple[float, float, float]]:
    """Normalised bridge probabilities (module docstring).

    Returns ``((w_same, w_other_same), (w_hi, w_lo, w_other))``: the first pair
    for rows with ``o_lo == o_hi``, the triple for rows where they differ.
    """
    e_lo = check_eps(eps_lo, "eps_lo")
    e_mid = check_eps(eps_mid, "eps_mid")
    e_hi = check_eps(eps_hi, "eps_hi")
    if not e_lo < e_mid < e_hi:
        raise ValueError(f"a bridge needs eps_lo < eps_mid < eps_hi, got {e_lo:g}, {e_mid:g}, {e_hi:g}")
    m = check_m(m)
    t1, t2 = step_terms(e_lo, e_mid, m), step_terms(e_mid, e_hi, m)
    w_s, w_os = t1.p_aa * t2.p_aa, t1.r_a * t2.p_ba
    z_same = w_s + (m - 1) * w_os
    w_hi, w_lo, w_o = t1.p_ba * t2.p_aa, t1.p_bb * t2.p_ba, t1.r_b * t2.p_ba
    z_diff = w_hi + w_lo + (m - 2) * w_o
    return (w_s / z_same, w_os / z_same), (w_hi / z_diff, w_lo / z_diff, w_o / z_diff)


def bridge_matrix(eps_lo, eps_mid, eps_hi, m) -> np.ndarray:
    """``W[o_lo, o_hi, o_mid] = Pr(o_mid | o_lo, o_hi)`` as an (m, m, m) array."""
    (w_s, w_os), (w_hi, w_lo, w_o) = bridge_weights(eps_lo, eps_mid, eps_hi, m)
    W = np.full((m, m, m), w_o)
    for lo in range(m):
        for hi in range(m):
            if lo == hi:
                W[lo, hi, :] = w_os
                W[lo, hi, lo] = w_s
            else:
                W[lo, hi, hi], W[lo, hi, lo] = w_hi, w_lo
    return W


def bridge(lo, hi, eps_lo, eps_mid, eps_hi, m, rng=None) -> np.ndarray:
    """Outputs at eps_mid between stored outputs ``lo`` (at eps_lo) and ``hi`` (at eps_hi).

    Needs no true values.  The chain lo, mid, hi has exactly the joint law of
    a chain generated forward through eps_lo, eps_mid, eps_hi.
    """
    same_w, differ_w = bridge_weights_exact(eps_lo, eps_mid, eps_hi, m)
    o_lo = check_values(lo, m, "lo")
    o_hi = check_values(hi, m, "hi")
    check_same_shape(o_lo, o_hi, "lo", "hi")
    return _sampling.draw_weighted(rng, o_hi, o_lo, m, same_w, o_lo == o_hi, differ_w)


def tighten_weights(eps_from, eps_to, m) -> tuple[float, float]:
    """``(Pr(o_to = o_from), Pr(o_to = v))`` for each ``v != o_from``, given only ``o_from``."""
    e_from = check_eps(eps_from, "eps_from")
    e_to = check_eps(eps_to, "eps_to")
    if not e_to < e_from:
        raise ValueError(f"tighten needs eps_to < eps_from, got {e_from:g} -> {e_to:g}")
    m = check_m(m)
    t = step_terms(e_to, e_from, m)
    w_s = keep_probability(e_to, m) * t.p_aa
    w_o = flip_probability(e_to, m) * t.p_ba
    z = w_s + (m - 1) * w_o
    return w_s / z, w_o / z


def tighten_matrix(eps_from, eps_to, m) -> np.ndarray:
    """``W[o_from, o_to] = Pr(o_to | o_from)`` as an (m, m) array."""
    w_s, w_o = tighten_weights(eps_from, eps_to, m)
    W = np.full((m, m), w_o)
    np.fill_diagonal(W, w_s)
    return W


def tighten(outputs, eps_from, eps_to, m, rng=None) -> np.ndarray:
    """Outputs at eps_to < eps_from, below the first stored step; needs no true values.

    The pair (o_to, o_from) has exactly the law of a forward chain eps_to -> eps_from.
    """
    w = tighten_weights_exact(eps_from, eps_to, m)
    o = check_values(outputs, m, "outputs")
    return _sampling.draw_weighted(rng, o, o, m, w)


def chain(values, epsilons, m, rng=None) -> np.ndarray:
    """Algorithm 1: k-RR at ``epsilons[0]``, then one relaxation step per further epsilon.

    Returns an (n, len(epsilons)) int64 array; column i is distributed as an
    epsilons[i] k-RR of ``values`` and every prefix of a row is epsilons[i]-LDP.
    """
    m = check_m(m)
    eps = check_increasing(epsilons, "epsilons")
    # the epsilons as given (a Decimal stays exact: the samplers realise at most it, not its float; two
    # Decimals equal as floats are still a step), also from an object array of Decimals
    given = list(epsilons)
    x = check_values(values, m)
    out = np.empty((x.shape[0], eps.shape[0]), dtype=np.int64)
    out[:, 0] = perturb(x, given[0], m, rng)
    for i in range(1, eps.shape[0]):
        out[:, i] = relax(out[:, i - 1], x, given[i - 1], given[i], m, rng)
    return out
