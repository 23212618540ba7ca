"""Survey mechanisms for one sensitive yes/no question
(docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides, seed 004).

A buyer commissions a **survey**: every owner of a cohort of ``N`` holds ``x = 1`` (member of the
sensitive group) or ``x = 0`` and answers once through a randomizing device; the buyer gets an
unbiased estimate of the proportion ``pi``.  "Modified" means a census -- the whole population of
``N`` answers once -- so every variance below comes only from the device (``pi`` is fixed).

* **Warner (MW)**: report the truth with probability ``p``, else its negation.
  ``eps = |ln((1 - p)/p)|``; ``pi_hat = (N1/N - (1 - p))/(2p - 1)``;
  ``Var = p(1 - p)/(N (2p - 1)^2)``, which is ``e^eps/(N (e^eps - 1)^2)`` at ``p = e^eps/(e^eps + 1)``.
  (The paper's pseudocode keeps the truth when a Bernoulli(p) coin shows 0, i.e. with probability
  ``1 - p``; we implement "truthful with probability p", the form its estimator assumes.)
* **Simmons (MS)**: the truth with probability ``p``, otherwise an independent Bernoulli(pi_B) answer:
  ``Pr(yes | 1) = q1 = p + (1 - p) pi_B``, ``Pr(yes | 0) = q0 = (1 - p) pi_B``;
  ``eps = ln(q1/q0)`` if ``pi_B <= 1/2`` else ``ln((1 - q0)/(1 - q1))``;
  ``pi_hat = (N1/N - (1 - p) pi_B)/p``; ``Var = [pi q1(1 - q1) + (1 - pi) q0(1 - q0)]/(N p^2)``
  (eq. 2; the paper's Appendix C form is wrong for ``pi_B > 1/2``: there the variance is eq. 2 at
  ``(1 - pi_B, 1 - pi)``, not at ``(1 - pi_B, pi)``).  At ``pi_B = 1/2`` it equals Warner's.
* **Christofides (MC)**: a card ``Y`` in ``1..L`` drawn with replacement with proportions
  ``p_1..p_L``; report ``X = L + 1 - Y`` if ``x = 1`` and ``X = Y`` if ``x = 0`` (the paper's
  pseudocode swaps these; we follow its formula ``X = (L + 1 - Y) x + Y (1 - x)``).
  ``eps = max_k ln(p_{L+1-k}/p_k)``; with ``EY = sum k p_k``, ``VarY``, ``D = L + 1 - 2 EY``:
  ``pi_hat = (mean(X) - EY)/D`` and ``Var = VarY/(N D^2)``.  The best ``L = 3`` design for ``eps``
  and ``p2`` is ``p1 = (1 - p2)/(e^eps + 1)``, ``p3 = e^eps (1 - p2)/(e^eps + 1)``, with
  ``Var = K/(4N)``, ``K = (e^eps + 1)^2/((e^eps - 1)^2 (1 - p2)) - 1 = coth^2(eps/2)/(1 - p2) - 1``.
* **Improved Christofides (IC)**: a deck of exactly ``N`` cards (integer counts ``c_k``) dealt
  **without replacement**, one per respondent; same report rule and estimator with ``p_k = c_k/N``.
  ``Var = 4 pi(1 - pi) VarY/((N - 1) D^2)``, so ``Var_IC/Var_MC = 4 N pi(1 - pi)/(N - 1)``.
  **Distinct guarantee**: eps bounds each report only if respondents cannot see each other's cards or
  answers; the joint release is not eps-DP for any finite eps (the deck couples the reports).  See
  :func:`improved_christofides_guarantee`: record it as "per-report eps, non-collusion assumption",
  sell only the aggregate estimate, and require every dealt respondent to answer exactly once.

Randomness comes from :mod:`mechanisms.random` (secure by default; a ``numpy.random.Generator`` when
passed as ``rng``): one 64-bit word per respondent compared with integer cells; the IC deal is a
uniformly random permutation obtained by sorting one random word per card (drawn again in the
~N^2/2^65-probability event of a tie).

**Exact devices** (docs/mechanisms.md, "Exact sampling: one-shot mechanisms").  :func:`warner_device`,
:func:`simmons_device` and :func:`christofides_cards` build a device's integer cells (probability times
2^64) exactly from eps, around a rational lower bound ``L < e^eps``: the small cells are rounded up and
the large ones take the remainder (or the largest value the bound allows), so the realised per-report
level of what is sampled is at most eps.  The ``*_perturb`` functions take such a device, or a float
parameter as before (rounded safely, with no charged level to honour).  :func:`ic_deck_counts` deals its
counts with the same exact bound.  Epsilons whose cells would need a probability below 2^-64 raise
``ValueError`` naming the limit (:func:`device_max_epsilon`).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction

import numpy as np

from ._exact import (
    TWO_64,
    Unrepresentable,
    as_fraction,
    ceil_frac,
    exp_lower,
    floor_frac,
    largest_honest,
    ln_floor_places,
)
from ._sampling import CellTable, draw_iid, safe_cells
from ._validation import check_eps, check_values
from .private_sampling import SUM_TOLERANCE
from .random import words

#: Guarantee kinds recorded by the service
#: (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).
KIND_LDP = "ldp"
KIND_PER_REPORT = "per_report_non_collusion"
LABEL_PER_REPORT = "per-report eps, non-collusion assumption"

_MECHANISMS = {
    "warner": "warner", "mw": "warner",
    "simmons": "simmons", "ms": "simmons",
    "christofides": "christofides", "mc": "christofides",
    "improved_christofides": "improved_christofides", "ic": "improved_christofides",
}


# ----------------------------------------------------------------------------------------------- validation

def _check_prob(p, name: str, *, lo_open: bool = False, hi_open: bool = False) -> float:
    if isinstance(p, bool) or not isinstance(p, (numbers.Real, Decimal)):
        raise ValueError(f"{name} must be a probability (a real number in [0, 1]), got {p!r}")
    value = float(p)
    outside = not math.isfinite(value) or value < 0 or value > 1
    if outside or (lo_open and value == 0) or (hi_open and value == 1):
        interval = ("(" if lo_open else "[") + "0, 1" + (")" if hi_open else "]")
        raise ValueError(f"{name} must lie in {interval}, got {p!r}")
    return value


def _check_n(N, name: str = "N", minimum: int = 1) -> int:
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < minimum:
        raise ValueError(f"{name} (the number of respondents) must be an integer >= {minimum}, got {N!r}")
    return int(N)


def _check_card_probs(probs, name: str = "probs") -> np.ndarray:
    try:
        arr = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be the card proportions p_1..p_L, got {probs!r}") from None
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a one-dimensional array of L >= 2 card proportions, "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise ValueError(f"{name} must be finite non-negative proportions")
    total = arr.sum()
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"{name} must sum to 1, got {total!r}")
    return arr / total


def _check_counts(counts, name: str = "counts") -> np.ndarray:
    arr = np.asarray(counts)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a one-dimensional array of L >= 2 card counts, "
                         f"got shape {arr.shape}")
    if arr.dtype == bool or not _integral(arr):
        raise ValueError(f"{name} must be non-negative integer card counts, got {counts!r}")
    arr = arr.astype(np.int64)
    if arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {arr.min()}")
    if arr.sum() < 2:
        raise ValueError(f"{name} must describe a deck of N >= 2 cards, got {arr.sum()}")
    return arr


def _integral(arr: np.ndarray) -> bool:
    """Integer dtype, or floats that are all finite whole numbers."""
    if np.issubdtype(arr.dtype, np.integer):
        return True
    floating = np.issubdtype(arr.dtype, np.floating)
    return bool(floating and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)))


def _check_binary(values, name: str) -> np.ndarray:
    """0/1 values of any shape (estimators accept one survey per row)."""
    arr = np.asarray(values)
    if arr.ndim == 0 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty array of 0/1 answers")
    if arr.dtype == bool:
        return arr.astype(np.int64)
    if not _integral(arr):
        raise ValueError(f"{name} must be 0/1 answers, got dtype {arr.dtype}")
    if arr.min() < 0 or arr.max() > 1:
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"{name} must be 0 (no) or 1 (yes), found {bad}")
    return arr.astype(np.int64)


def _check_reports(reports, L: int, name: str = "reports") -> np.ndarray:
    arr = np.asarray(reports)
    if arr.ndim == 0 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty array of card reports in 1..{L}")
    if arr.dtype == bool or not _integral(arr):
        raise ValueError(f"{name} must be integer card reports in 1..{L}, got dtype {arr.dtype}")
    if arr.min() < 1 or arr.max() > L:
        raise ValueError(f"{name} must lie in 1..{L}, found {arr.min() if arr.min() < 1 else arr.max()}")
    return arr.astype(np.int64)


def _card_moments(probs: np.ndarray) -> tuple[float, float, float]:
    """``(EY, VarY, D = L + 1 - 2 EY)`` of a card distribution on 1..L."""
    k = np.arange(1, probs.size + 1, dtype=np.float64)
    ey = float(probs @ k)
    var = float(probs @ (k - ey) ** 2)
    return ey, var, float(probs.size + 1 - 2.0 * ey)


def _informative_d(probs: np.ndarray) -> tuple[float, float, float]:
    ey, var, d = _card_moments(probs)
    if abs(d) < 1e-12:
        raise ValueError("the card proportions are symmetric (E[Y] = (L + 1)/2): the reports carry no "
                         "information about pi, so there is no estimator")
    return ey, var, d


# ---------------------------------------------------------------------------------------------- exact devices

@dataclass(frozen=True)
class BinaryDevice:
    """A yes/no device as integer cells: ``Pr(yes | x) = yes[x] / 2^64`` for x = 0, 1; "yes" exactly when
    the respondent's word is below ``yes[x]``.  Shared by the ``*_perturb`` functions and the exact level
    (``mechanisms.exactness_oneshot``)."""

    yes0: int
    yes1: int

    def rows(self) -> list[list[int]]:
        """``[[no, yes] for x = 0, 1]`` as exact integers (columns X = no, yes)."""
        return [[TWO_64 - self.yes0, self.yes0], [TWO_64 - self.yes1, self.yes1]]

    @property
    def q0(self) -> float:
        return float(Fraction(self.yes0, TWO_64))

    @property
    def q1(self) -> float:
        return float(Fraction(self.yes1, TWO_64))


class WarnerDevice(BinaryDevice):
    """Warner's device: ``yes0 + yes1 = 2^64`` (lie and truth)."""

    @property
    def p(self) -> float:
        """The realised truthful probability ``Pr(yes | 1)``, for :func:`warner_estimate`."""
        return self.q1


class SimmonsDevice(BinaryDevice):
    """Simmons' device, with the realised ``p`` and ``pi_b`` for :func:`simmons_estimate`."""

    @property
    def p(self) -> float:
        """``Pr(yes | 1) - Pr(yes | 0)``."""
        return float(Fraction(self.yes1 - self.yes0, TWO_64))

    @property
    def pi_b(self) -> float:
        """``Pr(yes | 0)/(1 - p)``."""
        return float(Fraction(self.yes0, TWO_64 - (self.yes1 - self.yes0)))


@dataclass(frozen=True)
class Cards:
    """Christofides' card proportions as integer cells ``c_1..c_L`` summing to 2^64 (card k has probability
    ``c_k / 2^64``)."""

    cells: tuple

    @property
    def probs(self) -> np.ndarray:
        """The realised proportions as floats (for the estimator and the variance)."""
        return np.array([float(Fraction(c, TWO_64)) for c in self.cells])

    def rows(self) -> list[list[int]]:
        """The report law ``[cells for x = 0, reversed cells for x = 1]`` over reports 1..L."""
        return [list(self.cells), list(self.cells[::-1])]



def _small_cell(total: int, share: Fraction, what: str, eps_f: float) -> int:
    """``ceil(total * share)``, refusing a cell below one unit (a probability below 2^-64)."""
    ideal = total * share
    if ideal < 1:
        raise Unrepresentable(f"eps = {eps_f:g} is above what the {what} can sample honestly: a probability "
                               "would be below 2^-64")
    return ceil_frac(ideal)


def warner_device(eps) -> WarnerDevice:
    """Warner at ``p = e^eps/(e^eps + 1)`` as exact cells: the lie ``ceil(2^64/(L + 1))`` (``L < e^eps``),
    the truth the remainder, so both columns' ratio ``(2^64 - lie)/lie <= L``.  ``eps`` at its exact value."""
    try:
        return _warner_device(eps)
    except Unrepresentable as exc:
        raise ValueError(f"{exc}; the largest epsilon is {device_max_epsilon('warner')} "
                         "(docs/mechanisms.md)") from None


def _warner_device(eps) -> WarnerDevice:
    eps_f = check_eps(eps)
    lie = _small_cell(TWO_64, 1 / (exp_lower(eps) + 1), "Warner device", eps_f)
    if 2 * lie > TWO_64:
        raise Unrepresentable(f"eps = {eps_f:g} cannot be realised by Warner's device with 64-bit thresholds")
    return WarnerDevice(yes0=lie, yes1=TWO_64 - lie)


def simmons_device(eps, pi_b) -> SimmonsDevice:
    """Simmons at ``p`` with ``p/(1 - p) = (e^eps - 1) min(pi_B, 1 - pi_B)`` as exact cells.

    For ``pi_B <= 1/2`` (``b = pi_B``, ``T = 2^64``, ``L < e^eps``): ``yes0 = ceil(T b/(1 + (L - 1) b))``
    (the small cell, up) and ``yes1`` the largest value with ``yes1 <= L yes0`` and
    ``T - yes0 <= L (T - yes1)``; for ``pi_B > 1/2`` the same on the "no" cells with ``b = 1 - pi_B``.
    Both columns' ratios are then at most ``L``."""
    try:
        return _simmons_device(eps, pi_b)
    except Unrepresentable as exc:
        raise ValueError(f"{exc}; the largest epsilon for this pi_b is {device_max_epsilon('simmons', pi_b)} "
                         "(docs/mechanisms.md)") from None


def _simmons_device(eps, pi_b) -> SimmonsDevice:
    eps_f = check_eps(eps)
    pi_b_f = _check_prob(pi_b, "pi_b", lo_open=True, hi_open=True)
    b = as_fraction(pi_b)
    flip = pi_b_f > 0.5
    if flip:
        b = 1 - b
    L = exp_lower(eps)
    T = TWO_64
    small = _small_cell(T, b / (1 + (L - 1) * b), "Simmons device", eps_f)
    big = min(floor_frac(L * small), T - ceil_frac((T - small) / L), T - 1)
    if big < small or small > T - 1:
        raise Unrepresentable(f"eps = {eps_f:g} cannot be realised by Simmons' device with 64-bit thresholds")
    if flip:  # the cells above are the "no" cells: Pr(no | 1) = small, Pr(no | 0) = big
        return SimmonsDevice(yes0=T - big, yes1=T - small)
    return SimmonsDevice(yes0=small, yes1=big)


def christofides_cards(eps, p2) -> Cards:
    """The best L = 3 Christofides cards (:func:`christofides_optimal_probs`) as exact cells: ``c2`` the
    nearest cell to ``p2 2^64``, ``c1 = ceil((2^64 - c2)/(L + 1))`` (``L < e^eps``), ``c3`` the rest, so
    ``c3/c1 <= L``."""
    try:
        return _christofides_cards(eps, p2)
    except Unrepresentable as exc:
        raise ValueError(f"{exc}; the largest epsilon for this p2 is {device_max_epsilon('christofides', p2)} "
                         "(docs/mechanisms.md)") from None


def _christofides_cards(eps, p2) -> Cards:
    eps_f = check_eps(eps)
    _check_prob(p2, "p2", hi_open=True)
    T = TWO_64
    c2 = round(as_fraction(p2) * T)
    c1 = _small_cell(T - c2, 1 / (exp_lower(eps) + 1), "Christofides deck", eps_f)
    c3 = T - c2 - c1
    if c3 < c1:
        raise Unrepresentable(f"eps = {eps_f:g} cannot be realised by Christofides' cards with 64-bit thresholds")
    return Cards((c1, c2, c3))


def device_max_epsilon(mechanism: str, parameter=None) -> Decimal:
    """The largest epsilon (6 decimals) the exact devices can realise: ``"warner"`` (44.361419: the lie
    ``1/(e^eps + 1) >= 2^-64``), ``"simmons"`` with ``pi_b`` (``Pr(yes | 0)`` about ``e^-eps`` at least
    2^-64; about 44.36 for a moderate pi_b) and ``"christofides"`` with ``p2`` (``(1 - p2)/(e^eps + 1) >=
    2^-64``)."""
    if mechanism == "warner":
        return largest_honest(_warner_device, ln_floor_places(TWO_64 - 1))
    if mechanism == "simmons":
        b = min(as_fraction(parameter), 1 - as_fraction(parameter))   # Pr(yes | 0) >= 2^-64: L <= 2^64 + 1 - 1/b
        guess = ln_floor_places(TWO_64 + 1 - 1 / b)
        return largest_honest(lambda e: _simmons_device(e, parameter), guess)
    if mechanism == "christofides":
        c2 = round(as_fraction(parameter) * TWO_64)
        return largest_honest(lambda e: _christofides_cards(e, parameter), ln_floor_places(TWO_64 - c2))
    raise ValueError(f"mechanism must be warner, simmons or christofides, got {mechanism!r}")


# --------------------------------------------------------------------------------------------------- Warner

def warner_probability(eps) -> float:
    """The truthful probability ``p = e^eps/(e^eps + 1)`` giving Warner's mechanism exactly eps
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides; its complement
    ``1/(e^eps + 1)`` gives the same eps)."""
    eps = check_eps(eps)
    return 1.0 / (1.0 + math.exp(-eps))


def warner_matrix(p) -> np.ndarray:
    """``P[x, X]``: ``[[p, 1 - p], [1 - p, p]]`` with rows x = 0, 1 and columns X = no, yes."""
    p = _check_prob(p, "p")
    return np.array([[p, 1.0 - p], [1.0 - p, p]])


def warner_epsilon(p) -> float:
    """``eps = |ln((1 - p)/p)|``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides); ``inf`` at p in {0, 1}."""
    p = _check_prob(p, "p")
    if p in (0.0, 1.0):
        return math.inf
    return abs(math.log1p(-p) - math.log(p))


def warner_perturb(values, p, rng=None) -> np.ndarray:
    """Warner's device: each 0/1 value reported truthfully with probability ``p``, else negated (spec
    docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides; not the paper's inverted
    pseudocode).  One 64-bit word per respondent.

    ``p`` is a :class:`WarnerDevice` (:func:`warner_device`: exact cells honouring eps) or a float
    probability (its cells rounded safely: the smaller one up)."""
    if isinstance(p, BinaryDevice):
        return _bernoulli(rng, check_values(values, 2), p)
    p = _check_prob(p, "p")
    x = check_values(values, 2)
    return _bernoulli(rng, x, _float_device(1.0 - p, p))


def warner_estimate(reports, p):
    """``pi_hat = (N1/N - (1 - p))/(2p - 1)``, unbiased
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).  ``reports`` may hold one
    survey per row; the estimate is taken along the last axis."""
    p = _check_prob(p, "p")
    if p == 0.5:
        raise ValueError("p = 1/2 makes the answers independent of x: there is no estimator")
    y = _check_binary(reports, "reports")
    return _scalar((y.mean(axis=-1) - (1.0 - p)) / (2.0 * p - 1.0))


def warner_variance(p, N) -> float:
    """Census variance ``p(1 - p)/(N (2p - 1)^2)``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides), whatever pi."""
    p = _check_prob(p, "p")
    N = _check_n(N)
    if p == 0.5:
        raise ValueError("p = 1/2 makes the answers independent of x: the variance is infinite")
    return p * (1.0 - p) / (N * (2.0 * p - 1.0) ** 2)


# -------------------------------------------------------------------------------------------------- Simmons

def _simmons_q(p: float, pi_b: float) -> tuple[float, float]:
    return p + (1.0 - p) * pi_b, (1.0 - p) * pi_b


def simmons_probability(eps, pi_b) -> float:
    """The truthful probability ``p`` giving Simmons' mechanism exactly eps for a given ``pi_B``:
    ``p/(1 - p) = (e^eps - 1) min(pi_B, 1 - pi_B)``."""
    eps = check_eps(eps)
    pi_b = _check_prob(pi_b, "pi_b", lo_open=True, hi_open=True)
    t = math.expm1(eps) * min(pi_b, 1.0 - pi_b)
    return t / (1.0 + t)


def simmons_matrix(p, pi_b) -> np.ndarray:
    """``P[x, X]`` with ``Pr(yes | 1) = q1 = p + (1 - p) pi_B`` and ``Pr(yes | 0) = q0 = (1 - p) pi_B``."""
    p = _check_prob(p, "p")
    pi_b = _check_prob(pi_b, "pi_b")
    q1, q0 = _simmons_q(p, pi_b)
    return np.array([[1.0 - q0, q0], [1.0 - q1, q1]])


def simmons_epsilon(p, pi_b) -> float:
    """``eps = ln(q1/q0)`` if ``pi_B <= 1/2`` else ``ln((1 - q0)/(1 - q1))``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides, "Simmons"): the larger of
    the two column ratios; ``inf`` when a column has a zero."""
    p = _check_prob(p, "p")
    pi_b = _check_prob(pi_b, "pi_b")
    q1, q0 = _simmons_q(p, pi_b)
    if p == 0:
        return 0.0
    num, den = (q1, q0) if pi_b <= 0.5 else (1.0 - q0, 1.0 - q1)
    return math.inf if den == 0 else math.log(num) - math.log(den)


def simmons_perturb(values, p, pi_b=None, rng=None) -> np.ndarray:
    """Simmons' device: the truth with probability ``p``, else an independent Bernoulli(pi_B) answer
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).  Drawn from its exact
    output law (``yes`` with ``q1`` for x = 1 and ``q0`` for x = 0), one 64-bit word per respondent.

    ``p`` is a :class:`SimmonsDevice` (:func:`simmons_device`: exact cells honouring eps; ``pi_b`` is then
    ignored) or a float probability with ``pi_b`` (cells rounded safely)."""
    if isinstance(p, BinaryDevice):
        return _bernoulli(rng, check_values(values, 2), p)
    p = _check_prob(p, "p")
    pi_b = _check_prob(pi_b, "pi_b")
    x = check_values(values, 2)
    q1, q0 = _simmons_q(p, pi_b)
    return _bernoulli(rng, x, _float_device(q0, q1))


def simmons_estimate(reports, p, pi_b):
    """``pi_hat = (N1/N - (1 - p) pi_B)/p``, unbiased
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides); one survey per row."""
    p = _check_prob(p, "p", lo_open=True)
    pi_b = _check_prob(pi_b, "pi_b")
    y = _check_binary(reports, "reports")
    return _scalar((y.mean(axis=-1) - (1.0 - p) * pi_b) / p)


def simmons_variance(p, pi_b, pi, N) -> float:
    """Census variance ``[pi q1(1 - q1) + (1 - pi) q0(1 - q0)]/(N p^2)``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides, eq. 2), valid for every
    pi_B (the paper's Appendix C form is not, for pi_B > 1/2)."""
    p = _check_prob(p, "p", lo_open=True)
    pi_b = _check_prob(pi_b, "pi_b")
    pi = _check_prob(pi, "pi")
    N = _check_n(N)
    q1, q0 = _simmons_q(p, pi_b)
    return (pi * q1 * (1.0 - q1) + (1.0 - pi) * q0 * (1.0 - q0)) / (N * p * p)


# --------------------------------------------------------------------------------------------- Christofides

def christofides_optimal_probs(eps, p2) -> np.ndarray:
    """The best L = 3 cards for eps and p2
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides):
    ``[(1 - p2)/(e^eps + 1), p2, e^eps (1 - p2)/(e^eps + 1)]``, giving ``Var = K/(4N)``."""
    eps = check_eps(eps)
    p2 = _check_prob(p2, "p2", hi_open=True)
    low = (1.0 - p2) / (1.0 + math.exp(eps))
    high = (1.0 - p2) / (1.0 + math.exp(-eps))
    return np.array([low, p2, high])


def christofides_matrix(probs) -> np.ndarray:
    """``P[x, X - 1]`` for reports X in 1..L: row x = 0 is ``p_X``, row x = 1 is ``p_{L+1-X}``."""
    probs = _check_card_probs(probs)
    return np.vstack([probs, probs[::-1]])


def christofides_epsilon(probs) -> float:
    """``eps = max_k ln(p_{L+1-k}/p_k)`` over cards with mass
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides); ``inf`` if the support is
    not symmetric."""
    probs = _check_card_probs(probs)
    rev = probs[::-1]
    used = (probs > 0) | (rev > 0)
    if np.any((probs[used] == 0) | (rev[used] == 0)):
        return math.inf
    return float(np.max(np.log(rev[used]) - np.log(probs[used])))


def christofides_perturb(values, probs, rng=None) -> np.ndarray:
    """Christofides' device: draw a card ``Y ~ probs`` on 1..L with replacement and report
    ``L + 1 - Y`` if x = 1, ``Y`` if x = 0
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides; the formula, not the
    paper's swapped pseudocode).  One 64-bit word per respondent against the integer cells: ``probs`` is
    :class:`Cards` (:func:`christofides_cards`: exact cells honouring eps) or float proportions (their
    ``safe_cells``, cumulative, ``np.searchsorted``)."""
    if isinstance(probs, Cards):
        x = check_values(values, 2)
        L = len(probs.cells)
        y = CellTable.from_rows([list(probs.cells)]).draw(rng, np.zeros(x.size, dtype=np.int64)) + 1
        return np.where(x == 1, L + 1 - y, y)
    probs = _check_card_probs(probs)
    x = check_values(values, 2)
    y = draw_iid(rng, probs, x.size) + 1
    return np.where(x == 1, probs.size + 1 - y, y)


def christofides_estimate(reports, probs):
    """``pi_hat = (mean(X) - EY)/(L + 1 - 2 EY)``, unbiased
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides); one survey per row."""
    probs = _check_card_probs(probs)
    ey, _, d = _informative_d(probs)
    x = _check_reports(reports, probs.size)
    return _scalar((x.mean(axis=-1) - ey) / d)


def christofides_variance(probs, N) -> float:
    """Census variance ``VarY/(N D^2)``, ``D = L + 1 - 2 EY``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides)."""
    probs = _check_card_probs(probs)
    N = _check_n(N)
    _, var, d = _informative_d(probs)
    return var / (N * d * d)


# ------------------------------------------------------------------------------------ improved Christofides

@dataclass(frozen=True)
class SurveyGuarantee:
    """What the ledger records for a survey release
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides)."""

    mechanism: str
    epsilon: float            # the per-report epsilon
    kind: str                 # KIND_LDP or KIND_PER_REPORT
    label: str                # shown to the owner
    joint_epsilon: float      # the whole release's epsilon for one respondent (inf for IC)
    aggregate_only: bool      # individual reports must never be sold
    requires_every_respondent: bool   # every dealt respondent must answer exactly once
    notes: str


def ic_deck_counts(N, eps, p2) -> np.ndarray:
    """Integer card counts for an IC deck of exactly N cards
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides): ``c2 = round(p2 N)``,
    ``c1 = ceil((N - c2)/(L + 1))`` with ``L < e^eps`` a rational lower bound (exact, ``mechanisms._exact``; eps at its
    exact value), ``c3 = N - c1 - c2``, so the realised per-report level ``ln(c3/c1)`` is below the target, exactly.
    Raises ``ValueError`` when N is too small for an informative deck within eps (``c3 > c1 >= 1`` and
    ``c3 <= e^eps c1``)."""
    N = _check_n(N, minimum=2)
    eps_f = check_eps(eps, positive=True)
    p2 = _check_prob(p2, "p2", hi_open=True)
    c2 = int(round(p2 * N))
    rest = N - c2
    c1 = max(1, ceil_frac(rest / (exp_lower(eps) + 1)))   # exact: c3 = rest - c1 <= L c1 < e^eps c1
    c3 = rest - c1
    eps = eps_f
    if not c3 > c1 >= 1:
        raise ValueError(f"N = {N} is too small for an informative deck at eps = {eps:g} and p2 = {p2:g}: "
                         f"need at least one more 3-card than 1-cards with 3-cards <= e^eps 1-cards "
                         f"(about N >= (1 - p2)^-1 (2/(e^eps - 1) + 1))")
    return np.array([c1, c2, c3], dtype=np.int64)


def deck_level(counts) -> Decimal:
    """The per-report level ``max_k ln(c_{L+1-k}/c_k)`` of an IC deck, to 40 digits (L = 3: ``ln(c3/c1)``): what the
    market charges for a dealt deck, rounded up
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides)."""
    c = [int(x) for x in counts]
    ctx = Context(prec=40)
    return max(ctx.ln(ctx.divide(Decimal(c[-1 - i]), Decimal(c[i]))) for i in range(len(c)) if c[i] and c[-1 - i])


def improved_christofides_epsilon(counts) -> float:
    """The per-report eps ``max_k ln(c_{L+1-k}/c_k)`` of an IC deck
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides), valid **only** under the
    non-collusion assumption; the joint release has no finite eps (see
    :func:`improved_christofides_guarantee`)."""
    counts = _check_counts(counts)
    return christofides_epsilon(counts / counts.sum())


def improved_christofides_guarantee(counts) -> SurveyGuarantee:
    """The distinct IC guarantee for the ledger
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides): per-report eps under the
    assumption that no respondent sees others' cards or answers; whoever knows the other N - 1 values can decode a
    respondent's card, so the joint release is not eps-DP for any finite eps (``joint_epsilon = inf``).  Only the
    aggregate estimate may be sold, and every dealt respondent must answer exactly once (drop-outs void the variance
    formula)."""
    eps = improved_christofides_epsilon(counts)
    return SurveyGuarantee(
        mechanism="improved_christofides", epsilon=eps, kind=KIND_PER_REPORT, label=LABEL_PER_REPORT,
        joint_epsilon=math.inf, aggregate_only=True, requires_every_respondent=True,
        notes=("Reports are correlated through the deck (cards dealt without replacement): eps bounds "
               "each report on its own only if respondents cannot see each other's cards or answers. "
               "Sell only the aggregate estimate; every dealt respondent must answer exactly once."))


def improved_christofides_deal(values, counts, rng=None) -> np.ndarray:
    """Deal an N-card deck (``counts[k-1]`` cards showing k) without replacement, one card per respondent,
    and return the reports ``L + 1 - Y`` (x = 1) or ``Y`` (x = 0)
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).  ``len(values)`` must
    equal the deck size.  The deal is a uniformly random permutation: the deck sorted by one random 64-bit key per card
    (keys redrawn on a tie)."""
    counts = _check_counts(counts)
    x = check_values(values, 2)
    N = int(counts.sum())
    if x.size != N:
        raise ValueError(f"the deck has {N} cards but there are {x.size} respondents: IC deals exactly one "
                         "card to every respondent")
    deck = np.repeat(np.arange(1, counts.size + 1, dtype=np.int64), counts)
    while True:
        keys = words(rng, N)
        order = np.argsort(keys, kind="stable")
        ranked = keys[order]
        if not np.any(ranked[1:] == ranked[:-1]):
            break
    y = np.empty(N, dtype=np.int64)
    y[order] = deck                                   # respondent order[i] gets the i-th card
    return np.where(x == 1, counts.size + 1 - y, y)


def improved_christofides_estimate(reports, counts):
    """``pi_hat = (mean(X) - EY)/D`` with the deck's realised ``p_k = c_k/N``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides), exactly unbiased when
    every one of the N dealt respondents answered once; fewer or more reports raise ``ValueError`` (drop-outs void the
    variance formula).  One survey per row."""
    counts = _check_counts(counts)
    N = int(counts.sum())
    x = _check_reports(reports, counts.size)
    if x.shape[-1] != N:
        raise ValueError(f"IC needs every dealt respondent to answer exactly once: got {x.shape[-1]} reports "
                         f"for a deck of {N} cards (drop-outs void the estimator's variance formula)")
    ey, _, d = _informative_d(counts / N)
    return _scalar((x.mean(axis=-1) - ey) / d)


def improved_christofides_variance(counts, pi) -> float:
    """Census variance ``4 pi(1 - pi) VarY/((N - 1) D^2)`` with ``p_k = c_k/N``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides), i.e.
    ``4 N pi(1 - pi)/(N - 1)`` times the Christofides variance of the same proportions."""
    counts = _check_counts(counts)
    pi = _check_prob(pi, "pi")
    N = int(counts.sum())
    _, var, d = _informative_d(counts / N)
    return 4.0 * pi * (1.0 - pi) * var / ((N - 1) * d * d)


# ---------------------------------------------------------------------------------------------- comparisons

def _k_factor(eps: float, p2: float) -> float:
    """``K = coth^2(eps/2)/(1 - p2) - 1`` (= ``(E + 1)^2/((E - 1)^2 (1 - p2)) - 1``)."""
    return 1.0 / (math.tanh(eps / 2.0) ** 2 * (1.0 - p2)) - 1.0


def ic_advantage_interval(N, eps, p2) -> tuple[float, float]:
    """``(pi_A1, pi_A2) = 1/2 -+ 1/2 sqrt(1 - ((N - 1)/N)(1 - p2)/(1 + p2 d/4))``, ``d = e^eps + e^-eps - 2``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides): IC (optimal L = 3 cards)
    beats Warner/Simmons exactly when pi is outside this interval."""
    N = _check_n(N, minimum=2)
    eps = check_eps(eps, positive=True)
    p2 = _check_prob(p2, "p2", hi_open=True)
    quarter_d = math.sinh(eps / 2.0) ** 2                     # d/4
    half = 0.5 * math.sqrt(1.0 - ((N - 1) / N) * (1.0 - p2) / (1.0 + p2 * quarter_d))
    return 0.5 - half, 0.5 + half


def _design_variance(mechanism: str, N: int, eps: float, pi: float, p2: float) -> float:
    if mechanism in ("warner", "simmons"):                    # Simmons at its optimal pi_B = 1/2
        return 1.0 / (N * 4.0 * math.sinh(eps / 2.0) ** 2)   # e^eps/(N (e^eps - 1)^2)
    k = _k_factor(eps, p2)
    if mechanism == "christofides":
        return k / (4.0 * N)
    return pi * (1.0 - pi) * k / (N - 1)


def min_sample_size(mechanism, eps, var, pi, p2) -> int:
    """The smallest N with variance <= ``var`` at the optimal design for ``eps``
    (docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides, paper Table 2):
    Warner/Simmons ``e^eps/(N (e^eps - 1)^2)`` (Simmons at pi_B = 1/2), Christofides ``K/(4N)`` and improved
    Christofides ``pi(1 - pi) K/(N - 1)`` with ``K = (e^eps + 1)^2/((e^eps - 1)^2 (1 - p2)) - 1``.  ``mechanism``:
    "warner"/"MW", "simmons"/"MS", "christofides"/"MC", "improved_christofides"/"IC"."""
    if not isinstance(mechanism, str) or mechanism.lower() not in _MECHANISMS:
        raise ValueError(f"mechanism must be one of {sorted(set(_MECHANISMS.values()))} (or MW, MS, MC, IC), "
                         f"got {mechanism!r}")
    mech = _MECHANISMS[mechanism.lower()]
    eps = check_eps(eps, positive=True)
    if isinstance(var, bool) or not isinstance(var, numbers.Real) or not (math.isfinite(var) and var > 0):
        raise ValueError(f"var must be a positive finite number, got {var!r}")
    var = float(var)
    pi = _check_prob(pi, "pi")
    p2 = _check_prob(p2, "p2", hi_open=True)
    if mech in ("warner", "simmons"):
        guess = 1.0 / (var * 4.0 * math.sinh(eps / 2.0) ** 2)
    elif mech == "christofides":
        guess = _k_factor(eps, p2) / (4.0 * var)
    else:
        guess = 1.0 + pi * (1.0 - pi) * _k_factor(eps, p2) / var
    floor_n = 2 if mech == "improved_christofides" else 1
    if not math.isfinite(guess) or guess > 1e18:
        raise ValueError(f"no feasible sample size below 1e18 for var = {var:g} at eps = {eps:g}")
    n = max(floor_n, math.ceil(guess))
    while n > floor_n and _design_variance(mech, n - 1, eps, pi, p2) <= var:   # guard float rounding
        n -= 1
    while _design_variance(mech, n, eps, pi, p2) > var:
        n += 1
    return n


# -------------------------------------------------------------------------------------------------- helpers

def _float_device(q0: float, q1: float) -> BinaryDevice:
    """A device from float ``Pr(yes | x)``: each row's cells rounded safely (``safe_cells``)."""
    q0, q1 = (min(max(v, 0.0), 1.0) for v in (q0, q1))
    return BinaryDevice(yes0=safe_cells([1.0 - q0, q0])[1], yes1=safe_cells([1.0 - q1, q1])[1])


def _bernoulli(rng, x: np.ndarray, device: BinaryDevice) -> np.ndarray:
    """``X = 1`` exactly when the word is below ``yes[x]`` (a cell of 2^64 is always yes)."""
    cells = (device.yes0, device.yes1)
    always = np.array([c >= TWO_64 for c in cells])
    cut = np.array([min(c, TWO_64 - 1) for c in cells], dtype=np.uint64)
    u = words(rng, x.size)
    return (always[x] | (u < cut[x])).astype(np.int64)


def _scalar(value):
    """A float for one survey, the array for several."""
    arr = np.asarray(value, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else arr
