"""Realised privacy levels of the one-shot mechanisms and survey devices, exactly (no floats).

docs/mechanisms.md, "Exact sampling: one-shot mechanisms".  Every sampler of :mod:`mechanisms.uldp`,
:mod:`mechanisms.rr3`, :mod:`mechanisms.private_sampling` and :mod:`mechanisms.surveys` draws from integer
*cells* (an outcome of cell ``c`` has probability exactly ``c / 2^64``), produced by one function per
mechanism (``uldp.urr_cells``, ``uldp.urap_cells``, ``rr3.ewrr_cells``, ``rr3.rr3_ddagger_cells``,
``private_sampling.kernel_cells``, ``surveys.warner_device``, ``surveys.simmons_device``,
``surveys.christofides_cards``, ``surveys.ic_deck_counts``).  The functions here call those same
functions and evaluate the mechanism's own privacy definition on the integers, with Python integers and
``fractions.Fraction``:

* plain LDP (:func:`ldp_level`): over every output column with some mass, ``max_x W[x][y] / min_x W[x][y]``
  (infinite when a column mixes zero and positive cells);
* ULDP (:func:`uldp_level`, the definition in :mod:`mechanisms.uldp`): every invertible output is produced by exactly
  one non-sensitive input, and the ratio is taken over the protected outputs only;
* uRAP (:func:`urap_level`): the same definition over the ``2^k`` bit vectors, evaluated in product form
  (the bits are independent given the input, so the worst protected output takes the worst value of each
  bit; an output with a non-sensitive bit set is invertible);
* PUM (:func:`pum_level`): uRR or uRAP on the extended domain (values then the ``kappa`` bots, the bots
  sensitive): the pre-processing is deterministic, so the level over a user's inputs is the common
  mechanism's level;
* EWRRn, RR3‡, LPP‡ (:func:`ewrr_level`, :func:`rr3_ddagger_level`, :func:`lpp_level`): the matrix's LDP
  level (LPP‡'s item is uniform exactly and the sign discretization only mixes the edge rows, so LPP‡'s
  level is RR3‡'s);
* the private sampler (:func:`private_sample_level`): the integer kernel's LDP level (the released
  sample's law is ``p' K'`` for a distribution ``p'``; point masses are the worst case);
* survey devices: the per-report level of Warner's and Simmons' 2 x 2 devices, Christofides' cards and
  the improved Christofides deck actually dealt (per report, under non-collusion: the marginal law of one
  respondent's card is the deck's proportions).

Each ``*_level`` returns the realised level as its likelihood ratio ``e^level``: an exact ``Fraction`` (or
``math.inf``).  :func:`level_decimal` gives ``ln`` of it as a ``Decimal`` rounded up (40 significant digits
plus a safety unit) and :func:`level_at_most` decides exactly whether it is at most a charged epsilon.
"""
from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np

from . import private_sampling, rr3, surveys, uldp
from ._exact import REPORT_DIGITS, TWO_64, ln_upper, ratio_at_most
from ._validation import check_m

__all__ = [
    "christofides_level", "ewrr_level", "improved_christofides_level", "ldp_level", "level_at_most",
    "level_decimal", "lpp_level", "private_sample_level", "pum_level", "rr3_ddagger_level", "simmons_level",
    "uldp_level", "urap_cells_level", "urap_level", "urr_level", "warner_level",
]


# ------------------------------------------------------------------------------------------------ reporting

def level_decimal(ratio, digits: int = REPORT_DIGITS) -> Decimal:
    """The realised level ``ln(ratio)`` as a Decimal rounded **up** (``digits`` significant digits and one
    safety unit); ``Decimal('Infinity')`` for an infinite ratio."""
    return ln_upper(ratio, digits)


def level_at_most(ratio, eps) -> bool:
    """Exactly whether the realised level is at most ``eps`` (a Decimal, int or float at its exact value),
    i.e. ``ratio <= e^eps``."""
    return ratio_at_most(ratio, eps)


# ----------------------------------------------------------------------------------------------- definitions

def _column_ratio(col) -> Fraction | float | None:
    """``max/min`` of a column with mass (``None`` if it has none, ``inf`` if it mixes zeros in)."""
    hi = max(col)
    if hi == 0:
        return None
    lo = min(col)
    return math.inf if lo == 0 else Fraction(hi, lo)


def _max_ratio(ratios) -> Fraction | float:
    out: Fraction | float = Fraction(1)
    for r in ratios:
        if r is not None and r > out:
            out = r
    return out


def ldp_level(cells) -> Fraction | float:
    """The LDP level of an integer matrix ``cells[x][y]`` (rows = inputs; any common scale), as the ratio
    ``max over columns with mass of max_x / min_x`` (``inf`` if a column mixes zero and positive cells;
    1 if no column has two different cells)."""
    rows = [[int(c) for c in row] for row in cells]
    return _max_ratio(_column_ratio(col) for col in zip(*rows))


def uldp_level(cells, sensitive, protected=None) -> Fraction | float:
    """The ULDP level of an integer matrix (the definition in :mod:`mechanisms.uldp`; rows = inputs, ``sensitive`` =
    indices or a mask of the sensitive inputs).  Invertible outputs must be produced by exactly one input, a
    non-sensitive one; the ratio is taken over the protected outputs.  ``protected`` (indices or a mask of
    the output columns) fixes ``Y_P``; by default it is chosen optimally (a column is invertible exactly when
    it meets condition (1)).  Returns ``inf`` when the definition cannot hold."""
    rows = [[int(c) for c in row] for row in cells]
    k = len(rows)
    sens = _mask(sensitive, k)
    cols = list(zip(*rows))
    invertible_ok = []
    for col in cols:
        owners = [x for x, c in enumerate(col) if c > 0]
        invertible_ok.append(len(owners) == 1 and not sens[owners[0]])
    if protected is None:
        prot = [not ok for ok in invertible_ok]
    else:
        prot = _mask(protected, len(cols))
        if any(not p and any(col) and not ok for p, col, ok in zip(prot, cols, invertible_ok)):
            return math.inf
    return _max_ratio(_column_ratio(col) for col, p in zip(cols, prot) if p)


def _mask(indices, size: int) -> list[bool]:
    arr = np.asarray(indices)
    if arr.dtype == bool:
        if arr.shape != (size,):
            raise ValueError(f"a boolean mask must have shape ({size},), got {arr.shape}")
        return arr.tolist()
    out = [False] * size
    for i in arr.reshape(-1).tolist():
        if not 0 <= int(i) < size:
            raise ValueError(f"index {i} outside 0..{size - 1}")
        out[int(i)] = True
    return out


# ----------------------------------------------------------------------------------------------------- ULDP

def urr_level(k, sensitive, eps) -> Fraction | float:
    """uRR's realised ULDP level (as a ratio) for domain size ``k``, the ``sensitive`` values and ``eps``:
    :func:`uldp_level` of ``uldp.urr_cell_matrix`` (the cells ``urr_perturb`` samples)."""
    return uldp_level(uldp.urr_cell_matrix(k, sensitive, eps), sensitive)


def urap_level(k, sensitive, eps, theta=None) -> Fraction | float:
    """uRAP's realised ULDP level (as a ratio) from ``uldp.urap_cells`` (the cells ``urap_perturb`` compares
    its words with), by the definition over the ``2^k`` bit vectors in product form.

    Given input ``x`` the bits are independent with ``P_j(1 | x)`` = ``theta`` (own sensitive bit),
    ``d1`` (another sensitive bit), ``keep_n`` (own non-sensitive bit) or 0 (another non-sensitive bit).
    Condition (1): a vector with non-sensitive bit ``b`` set must come only from input ``b`` (and no input
    may set two of them).  Protected vectors have every non-sensitive bit clear; over them the ratio of
    two inputs is the product over bits of the worst value's ratio (sensitive bits: set or clear;
    non-sensitive bits: clear)."""
    return urap_cells_level(k, sensitive, uldp.urap_cells(eps, theta))


def urap_cells_level(k, sensitive, cells) -> Fraction | float:
    """:func:`urap_level` for given cells (a ``uldp.URAPCells`` or any ``(theta, d1, keep_n)`` integers out of
    2^64), e.g. to judge another rounding rule."""
    k = check_m(k)
    sens = _mask(sensitive, k)
    T = TWO_64
    prob = []  # prob[x][j] = P_j(bit set | x) * 2^64
    for x in range(k):
        row = []
        for j in range(k):
            if sens[j]:
                row.append(cells.theta if j == x else cells.d1)
            else:
                row.append(cells.keep_n if j == x else 0)
        prob.append(row)
    non = [j for j in range(k) if not sens[j]]
    for j in non:  # condition (1) for the vectors with bit j set
        setters = [x for x in range(k) if prob[x][j] > 0]
        if any(x != j for x in setters):
            return math.inf
    if any(sum(1 for j in non if prob[x][j] > 0) > 1 for x in range(k)):  # pragma: no cover - never in uRAP
        return math.inf
    memo: dict = {}

    def bit_ratio(a: int, b: int, sensitive_bit: bool):
        """The worst value's ratio ``P(v | x)/P(v | y)`` of one bit over the protected values, as an integer
        pair; ``None`` if x never gives a protected value of this bit, ``(1, 0)`` for an infinite ratio."""
        key = (a, b, sensitive_bit)
        if key not in memo:
            pairs = ((a, b), (T - a, T - b)) if sensitive_bit else ((T - a, T - b),)
            best = None
            for num, den in pairs:
                if num == 0:
                    continue
                if den == 0:
                    best = (1, 0)
                    break
                if best is None or num * best[1] > best[0] * den:
                    best = (num, den)
            memo[key] = best
        return memo[key]

    worst: Fraction | float = Fraction(1)
    for x in range(k):
        for y in range(k):
            if x == y:
                continue
            num, den = 1, 1
            for j in range(k):
                r = bit_ratio(prob[x][j], prob[y][j], sens[j])
                if r is None:  # x never produces a protected vector: nothing to compare on this pair
                    break
                num, den = num * r[0], den * r[1]
            else:
                ratio = math.inf if den == 0 else Fraction(num, den)
                if ratio > worst:
                    worst = ratio
    return worst


def pum_level(k, sensitive, kappa, eps, mechanism: str = "urr", theta=None) -> Fraction | float:
    """PUM's realised ULDP level (as a ratio): the common mechanism (``"urr"`` or ``"urap"``) on the extended
    domain ``k + kappa`` with the sensitive set extended by the ``kappa`` bots (``uldp.pum_preprocess``)."""
    k = check_m(k)
    sens = np.flatnonzero(np.asarray(_mask(sensitive, k))).tolist()
    extended = sens + list(range(k, k + int(kappa)))
    if mechanism == "urr":
        if theta is not None:
            raise ValueError("theta applies to mechanism='urap' only")
        return urr_level(k + int(kappa), extended, eps)
    if mechanism == "urap":
        return urap_level(k + int(kappa), extended, eps, theta)
    raise ValueError(f"mechanism must be 'urr' or 'urap', got {mechanism!r}")


# ------------------------------------------------------------------------------------------------------ RR3

def ewrr_level(n, eps) -> Fraction | float:
    """EWRRn's realised LDP level (as a ratio) from ``rr3.ewrr_cells`` (EWRR3: n = 3)."""
    return ldp_level(rr3.ewrr_cells(n, eps).cells())


def rr3_ddagger_level(eps1, eps2) -> Fraction | float:
    """RR3‡'s realised LDP level (as a ratio) from ``rr3.rr3_ddagger_cells``; at most
    ``e^lpp_epsilon(eps1, eps2)``, the exact level of RR3‡ that the market charges (rounded up)."""
    return ldp_level(rr3.rr3_ddagger_cells(eps1, eps2).cells())


def lpp_level(eps1, eps2) -> Fraction | float:
    """LPP‡'s realised LDP level (as a ratio): RR3‡'s (the item is drawn uniformly by exact rejection and
    independently of the data; the sign of a fractional weight only mixes the two edge rows)."""
    return rr3_ddagger_level(eps1, eps2)


# ------------------------------------------------------------------------------------------ private sampling

def private_sample_level(q, eps) -> Fraction | float:
    """The private sampler's realised LDP level (as a ratio) for the prior ``q`` and ``eps``: the LDP level of
    ``private_sampling.kernel_cells``, which bounds ``(p'K')_y / (p''K')_y`` for every pair of owner
    distributions (attained at point masses)."""
    return ldp_level(private_sampling.kernel_cells(q, eps).cells())


# --------------------------------------------------------------------------------------------------- surveys

def warner_level(eps) -> Fraction | float:
    """Warner's realised per-report level (as a ratio) from ``surveys.warner_device``."""
    return ldp_level(surveys.warner_device(eps).rows())


def simmons_level(eps, pi_b) -> Fraction | float:
    """Simmons' realised per-report level (as a ratio) from ``surveys.simmons_device``."""
    return ldp_level(surveys.simmons_device(eps, pi_b).rows())


def christofides_level(eps, p2) -> Fraction | float:
    """Christofides' realised per-report level (as a ratio) from ``surveys.christofides_cards`` (rows: the
    report law for x = 0 and x = 1)."""
    return ldp_level(surveys.christofides_cards(eps, p2).rows())


def improved_christofides_level(counts) -> Fraction | float:
    """The per-report level (as a ratio) of the improved Christofides deck actually dealt, ``counts`` (from
    ``surveys.ic_deck_counts``), under the non-collusion assumption: each respondent's card has the
    deck's proportions (a uniformly random deal), so the report law is ``[c, reversed c]/N``."""
    c = [int(v) for v in counts]
    return ldp_level([c, c[::-1]])
