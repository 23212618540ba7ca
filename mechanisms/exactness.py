"""The exact integer laws that the gradual-release samplers draw from, and their realised privacy levels.

Turning probabilities into thresholds changes the law that is actually sampled.  Here every law of k-RR,
of a relaxation step, of a bridge and of a tightening is defined first as **integer weights** and then
sampled exactly (``mechanisms._sampling.draw_weighted``); the realised level is computed from the same
integers with Python integers and fractions, never floats.  See ``docs/mechanisms.md`` ("Exact sampling").

**Marginals.**  k-RR at eps over m values is realised with cells of ``2^-64``: each other value gets
``R = ceil(2^64 / (E_lo + m - 1))`` and the true value ``K = 2^64 - (m - 1) R``, where ``E_lo <= e^eps``
is a rational lower bound (``mechanisms._exact.exp_lower``, 60 digits).  Rounding the small
cells up makes the realised ratio ``K / R <= e^eps`` strictly: k-RR never realises more than its eps.
At eps = 0 the law is exactly uniform (``K = R``, drawn by rejection).  An eps so small that the rounding
gives the true value fewer cells than the others (``K < R``: a level ``ln(R / K)`` above eps) is refused:
that is ``E_lo < 1 + r/q`` with ``q, r = divmod(2^64, m)``, below about ``m^2 / 2^64`` (:func:`krr_cells`).
Epsilons are compared at their exact values (``exact_epsilon``), never as floats.

**Steps, bridges, tightenings.**  The forward chain is defined through value-free backward kernels.  For
eps_lo < eps_hi with cells (K_lo, R_lo) and (K_hi, R_hi), the symmetric kernel from an output at eps_hi to
one at eps_lo that carries the eps_hi marginal exactly onto the eps_lo marginal is

    stay: s = (K_lo - R_hi) / (K_hi - R_hi),     move to each other value: t = (R_lo - R_hi) / (K_hi - R_hi)

(``K + (m - 1) R`` is the same total at both epsilons).  It does not depend on the true value a, so the
relaxation step is its Bayes reversal ``T_a[o1, o2] = Pr(o2 | a) B[o2, o1] / Pr(o1 | a)``, in integers
(``D = K_hi - R_hi``):

    o1 = a:       w(a) = K_hi (K_lo - R_hi),   each other   w = R_hi (R_lo - R_hi);    total K_lo D
    o1 = b != a:  w(a) = K_hi (R_lo - R_hi),   w(b) = R_hi (K_lo - R_hi),   each other w = R_hi (R_lo - R_hi);
                  total R_lo D

A chain drawn forward with these kernels has ``Pr(o_1..o_k | a) = Pr(o_k | a) prod B``: its likelihood
ratio between two values is exactly that of its last output, ``K_k / R_k <= e^eps_k``, for every epsilon
sequence, however fine.  Tightening is ``B`` itself and bridging is ``Pr(o_mid | o_lo, o_hi) ∝
B_hi->mid[o_hi, o_mid] B_mid->lo[o_mid, o_lo]``: neither reads the true value (post-processing), and the
bridged or tightened chain has exactly the law of a forward chain through the new point.

**Realised levels.**  :func:`krr_level` is ``ln(K / R)``.  :func:`chain_level` recomputes the level of a
whole forward chain independently of the argument above, as a max-times product over the integer step
kernels (the largest ratio ``Pr(path | a) / Pr(path | b)`` over every path), so a wrong kernel shows.

**Limit.**  ``SAMPLER_EPS_MAX = 30``: above it ``R`` has fewer than about 10^6 units and k-RR can no longer
realise within 10^-6 of the eps asked for (at eps 44.4 one unit is all that is left), so epsilons above
30 are refused rather than sold for less than they claim.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from ._exact import exp_lower, ln_upper, ratio_at_most
from ._validation import _show as _shown
from ._validation import check_eps, check_m, exact_epsilon

#: Resolution of every marginal: cells are integer multiples of 2^-64.
TOTAL = 1 << 64
#: Largest epsilon the samplers honour (module docstring, "Limit").
SAMPLER_EPS_MAX = 30
#: Significant digits of the lower bound of e^eps that k-RR cells are built from.
_DIGITS = 60


# ---------------------------------------------------------------- exact epsilons and bounds
# ``exact_epsilon`` (from ``mechanisms._validation``): the exact decimal a caller meant, as realised.

@dataclass(frozen=True)
class Level:
    """A realised privacy level: ``ratio`` is the exact largest likelihood ratio, ``epsilon`` its logarithm."""

    ratio: Fraction

    @property
    def epsilon(self) -> Decimal:
        """``ln(ratio)`` rounded up to 40 digits (an upper bound)."""
        return ln_upper(self.ratio) if self.ratio > 1 else Decimal(0)

    def at_most(self, charged) -> bool:
        """Exactly whether ``ln(ratio) <= charged`` (``charged`` a decimal epsilon)."""
        return ratio_at_most(self.ratio, exact_epsilon(charged))

    def at_least(self, eps) -> bool:
        """Whether ``ln(ratio) >= eps`` (to 40 digits; used to check an epsilon is honoured)."""
        return self.epsilon >= exact_epsilon(eps)


def check_sampler_eps(eps, name: str = "eps") -> float:
    """``eps`` as a float after the usual checks and ``0 <= eps <= SAMPLER_EPS_MAX`` (the samplers' limit).

    The bounds are compared on the exact value the samplers realise (:func:`exact_epsilon`), not on the
    float: ``Decimal("30.00000000000000001")`` is 30.0 as a float but above the limit, and is refused.
    """
    value = check_eps(eps, name)
    exact = exact_epsilon(eps)
    if exact < 0:
        raise ValueError(f"{name} must be >= 0, got {eps}")
    if exact > SAMPLER_EPS_MAX:
        raise ValueError(f"{name} must be at most {SAMPLER_EPS_MAX}, the largest epsilon the samplers realise "
                         f"exactly (docs/mechanisms.md, 'Exact sampling'), got {_shown(eps)}")
    return value


def _sampler_eps(eps, name: str) -> Decimal:
    """:func:`check_sampler_eps`, then the exact value the samplers realise."""
    check_sampler_eps(eps, name)
    return exact_epsilon(eps)


# ---------------------------------------------------------------- the integer laws

@dataclass(frozen=True)
class Marginal:
    """k-RR at one epsilon in integer cells: ``keep`` for the true value, ``flip`` for each other, of ``total``."""

    keep: int
    flip: int
    total: int


@lru_cache(maxsize=1 << 14)
def _krr_cells(eps: Decimal, m: int) -> Marginal:
    if eps == 0:
        return Marginal(keep=1, flip=1, total=m)
    e_lo = exp_lower(eps, _DIGITS)
    x = Fraction(TOTAL) / (e_lo + (m - 1))
    flip = -((-x.numerator) // x.denominator)  # ceil: the small cells round up
    keep = TOTAL - (m - 1) * flip
    if keep < flip:  # krr_cells' docstring: the realised level would be ln(flip / keep) > eps
        q, r = divmod(TOTAL, m)
        least = math.log1p(r / q) if r else 1.5e-59
        raise ValueError(f"eps = {eps} is too small for k-RR over {m} values to be realised with 64-bit "
                         f"thresholds: its cells would give the true value fewer units than each other value "
                         f"(the smallest epsilon for m = {m} is about {least:.3g}; "
                         "docs/mechanisms.md, 'Exact sampling')")
    return Marginal(keep=keep, flip=flip, total=TOTAL)


def krr_cells(eps, m) -> Marginal:
    """The integer law of k-RR at ``eps`` over ``m`` values (module docstring, "Marginals").

    With ``T = 2^64``, ``E_lo < e^eps`` and ``R = ceil(T / (E_lo + m - 1))``, ``K = T - (m - 1) R``, the
    realised level is the largest ratio within a column, ``ln(max(K, R) / min(K, R))``:

    * ``K >= R``: ``R >= T / (E_lo + m - 1)`` gives ``K <= E_lo R``, so the level
      ``ln(K / R) <= ln E_lo < eps``.
    * ``K < R``: the true value gets *fewer* units than each other value, and the level is ``ln(R / K) > 0``,
      which can exceed eps (eps = 1e-19, m = 1000: ``R - K = 384`` units, a level of 2.1e-14).  Refused with
      ``ValueError``, as EWRR, uRR and Warner refuse an eps too small to separate their cells.

    Exactly: ``K >= R  <=>  m R <= T  <=>  R <= q  <=>  T / (E_lo + m - 1) <= q  <=>  E_lo >= 1 + r / q``
    with ``q = floor(T / m)`` and ``r = T mod m`` (``ceil(x) <= q`` iff ``x <= q`` for an integer ``q``).
    For ``m`` a power of two (``r = 0``) this is ``E_lo >= 1``: every eps down to about 1.5e-59, where the
    60-digit bound drops below 1.  Otherwise the smallest eps is about
    ``ln(1 + r/q) ~ r m / 2^64 < m^2 / 2^64`` (3.3e-14 for m = 1000; ``E_lo`` is non-decreasing in eps, so
    every larger eps is accepted).  Eps = 0 is exactly uniform (``K = R = 1`` of ``m``).
    """
    return _krr_cells(_sampler_eps(eps, "eps"), check_m(m))


@dataclass(frozen=True)
class RowWeights:
    """One row's law in integers: ``first`` and ``second`` (a category each) and every one of ``n_others``
    remaining categories get their weight; the probabilities are the weights over ``total``."""

    first: int
    second: int
    other: int
    n_others: int

    @property
    def total(self) -> int:
        return self.first + self.second + self.n_others * self.other


def _common(lo: Marginal, hi: Marginal) -> tuple[int, int, int, int]:
    """``(K_lo, R_lo, K_hi, R_hi)`` over one common total."""
    f_lo, f_hi = hi.total, lo.total  # cross-multiplying by the other total (both are 2^64 unless eps = 0)
    if lo.total == hi.total:
        f_lo = f_hi = 1
    return lo.keep * f_lo, lo.flip * f_lo, hi.keep * f_hi, hi.flip * f_hi


def _backward(lo: Marginal, hi: Marginal) -> tuple[int, int, int]:
    """``(stay, move, denominator)`` of the value-free kernel from eps_hi down to eps_lo."""
    k_lo, r_lo, k_hi, r_hi = _common(lo, hi)
    d = k_hi - r_hi
    stay, move = k_lo - r_hi, r_lo - r_hi
    if d <= 0 or stay < 0 or move < 0:
        raise ValueError("the lower epsilon's law is not a degradation of the higher one's")  # pragma: no cover
    return stay, move, d


@lru_cache(maxsize=1 << 14)
def _step(e_lo: Decimal, e_hi: Decimal, m: int) -> tuple[RowWeights, RowWeights]:
    lo, hi = _krr_cells(e_lo, m), _krr_cells(e_hi, m)
    k_lo, r_lo, k_hi, r_hi = _common(lo, hi)
    stay, move, _ = _backward(lo, hi)
    kept = RowWeights(first=k_hi * stay, second=0, other=r_hi * move, n_others=m - 1)
    moved = RowWeights(first=k_hi * move, second=r_hi * stay, other=r_hi * move, n_others=m - 2)
    return kept, moved


def step_weights(eps_from, eps_to, m) -> tuple[RowWeights, RowWeights]:
    """The relaxation step eps_from -> eps_to in integers: ``(kept, moved)``.

    ``kept`` is the row where the previous output equals the true value a (``first`` = a); ``moved`` the
    row where it is b != a (``first`` = a, ``second`` = b).  Module docstring, "Steps".
    """
    e1, e2 = _sampler_eps(eps_from, "eps_from"), _sampler_eps(eps_to, "eps_to")
    if not e2 > e1:  # exactly: two Decimals that are equal as floats may still be a step
        raise ValueError(f"eps_to must be greater than eps_from for a relaxation step, got "
                         f"{_shown(eps_from)} -> {_shown(eps_to)}")
    return _step(e1, e2, check_m(m))


@lru_cache(maxsize=1 << 14)
def _tighten(e_from: Decimal, e_to: Decimal, m: int) -> RowWeights:
    stay, move, _ = _backward(_krr_cells(e_to, m), _krr_cells(e_from, m))
    return RowWeights(first=stay, second=0, other=move, n_others=m - 1)


def tighten_weights_exact(eps_from, eps_to, m) -> RowWeights:
    """``Pr(o_to | o_from)`` for eps_to < eps_from: ``first`` = o_from (stay), each other value ``other``."""
    e_from, e_to = _sampler_eps(eps_from, "eps_from"), _sampler_eps(eps_to, "eps_to")
    if not e_to < e_from:
        raise ValueError(f"tighten needs eps_to < eps_from, got {_shown(eps_from)} -> {_shown(eps_to)}")
    return _tighten(e_from, e_to, check_m(m))


@lru_cache(maxsize=1 << 14)
def _bridge(e_lo: Decimal, e_mid: Decimal, e_hi: Decimal, m: int) -> tuple[RowWeights, RowWeights]:
    s1, t1, _ = _backward(_krr_cells(e_mid, m), _krr_cells(e_hi, m))  # o_hi -> o_mid
    s2, t2, _ = _backward(_krr_cells(e_lo, m), _krr_cells(e_mid, m))  # o_mid -> o_lo
    same = RowWeights(first=s1 * s2, second=0, other=t1 * t2, n_others=m - 1)
    differ = RowWeights(first=s1 * t2, second=t1 * s2, other=t1 * t2, n_others=m - 2)
    if differ.total == 0:
        # t1 = t2 = 0: the three epsilons have the same cells (distinct epsilons closer than the cells'
        # resolution, e.g. Decimals equal as floats), both steps are the identity and o_lo != o_hi has
        # probability 0.  Such a row never occurs in a chain the samplers drew; it keeps o_hi, a value-free
        # choice, instead of a law with total 0.
        differ = RowWeights(first=1, second=0, other=0, n_others=m - 2)
    return same, differ


def bridge_weights_exact(eps_lo, eps_mid, eps_hi, m) -> tuple[RowWeights, RowWeights]:
    """``Pr(o_mid | o_lo, o_hi)`` in integers: ``(same, differ)``.

    ``same`` is the row o_lo == o_hi (``first`` = that value); ``differ`` the row o_lo != o_hi (``first`` =
    o_hi, ``second`` = o_lo).  Module docstring, "Steps, bridges, tightenings".
    """
    e_lo, e_mid, e_hi = (_sampler_eps(e, n) for e, n in
                         ((eps_lo, "eps_lo"), (eps_mid, "eps_mid"), (eps_hi, "eps_hi")))
    if not e_lo < e_mid < e_hi:
        raise ValueError(f"a bridge needs eps_lo < eps_mid < eps_hi, got {_shown(eps_lo)}, {_shown(eps_mid)}, "
                         f"{_shown(eps_hi)}")
    return _bridge(e_lo, e_mid, e_hi, check_m(m))


# ---------------------------------------------------------------- realised levels

def krr_level(eps, m) -> Level:
    """Realised level of k-RR at ``eps``: ``ln(K / R)`` of its integer cells."""
    cells = krr_cells(eps, m)
    return Level(Fraction(cells.keep, cells.flip))


def _ratio(p_a: Fraction, p_b: Fraction):
    """One transition's likelihood ratio; ``None`` when the path is impossible under the numerator's value."""
    if p_a == 0:
        return None
    if p_b == 0:
        return math.inf
    return p_a / p_b


def max_times_level(initial: dict, transitions) -> Level:
    """Largest ``Pr(path | a) / Pr(path | b)`` over every path, by max-times dynamic programming.

    ``initial`` maps each state to its first output's probabilities ``(under a, under b)``; ``transitions``
    yields, per step, ``{(state, next_state): (probability under a, probability under b)}``.  A path that is
    possible under a but not under b has an unbounded ratio: ``OverflowError``.
    """
    def ratio(pair):
        r = _ratio(*pair)
        if r is math.inf:
            raise OverflowError("a path possible under one value is impossible under another: "
                                "the realised likelihood ratio is infinite")
        return r

    states = {s: r for s, r in ((s, ratio(p)) for s, p in initial.items()) if r is not None}
    for step in transitions:
        nxt: dict = {}
        for (s, t), pair in step.items():
            if s not in states:
                continue
            r = ratio(pair)
            if r is None:
                continue
            v = states[s] * r
            if t not in nxt or v > nxt[t]:
                nxt[t] = v
        states = nxt
    return Level(max(states.values()))


def krr_classes(cells: Marginal, m: int) -> dict:
    """First-output probabilities ``(under a, under b)`` by class of the output: A = a, B = b, C = a third value."""
    keep, flip = Fraction(cells.keep, cells.total), Fraction(cells.flip, cells.total)
    init = {"A": (keep, flip), "B": (flip, keep)}
    if m > 2:
        init["C"] = (flip, flip)
    return init


def step_classes(kept: RowWeights, moved: RowWeights, m: int) -> dict:
    """One step's transition probabilities ``(under a, under b)`` between classes (A = a, B = b, C = other).

    Under a, a previous output a uses the ``kept`` row and any other the ``moved`` row with a first; under b
    the roles of a and b swap.  By the kernels' symmetry every path of the same class sequence has the same
    ratio, so the largest ratio over classes is the largest over outputs.
    """
    k, mv = kept.total, moved.total

    def p(w, total):
        return Fraction(w, total)

    t = {
        ("A", "A"): (p(kept.first, k), p(moved.second, mv)),   # under b, o1 = a != b stays: second
        ("A", "B"): (p(kept.other, k), p(moved.first, mv)),    # under b, o1 = a moves to b: first
        ("B", "A"): (p(moved.first, mv), p(kept.other, k)),
        ("B", "B"): (p(moved.second, mv), p(kept.first, k)),
    }
    if m > 2:
        t.update({
            ("A", "C"): (p(kept.other, k), p(moved.other, mv)),
            ("B", "C"): (p(moved.other, mv), p(kept.other, k)),
            ("C", "A"): (p(moved.first, mv), p(moved.other, mv)),
            ("C", "B"): (p(moved.other, mv), p(moved.first, mv)),
            # o1 = c != a, b: staying at c, or moving to another c', has the same probability under a and b.
            ("C", "C"): (Fraction(1), Fraction(1)),
        })
    return t


def chain_level(epsilons, m, *, initial=None, step=None) -> Level:
    """Realised level of a whole forward chain along ``epsilons`` (k-RR, then one step per epsilon).

    The max-times product over the integer step kernels that :func:`mechanisms.relax` samples; for the
    kernels of this module it equals ``krr_level(epsilons[-1], m)``.  ``initial(eps, m)`` and
    ``step(eps_from, eps_to, m)`` replace the laws (``Marginal`` and ``(kept, moved)``), for instance to
    measure an older threshold rule.
    """
    m = check_m(m)
    eps = list(epsilons)
    if not eps:
        raise ValueError("epsilons must not be empty")
    initial = initial or krr_cells
    step = step or step_weights
    return max_times_level(krr_classes(initial(eps[0], m), m),
                           (step_classes(*step(e1, e2, m), m) for e1, e2 in zip(eps, eps[1:])))
