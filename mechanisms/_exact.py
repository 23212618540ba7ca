"""Exact arithmetic behind the integer thresholds (docs/mechanisms.md, "Exact sampling: one-shot mechanisms").

A sampler turns probabilities into integer *cells*: an outcome of cell ``c`` happens for ``c`` of the
``2^64`` equally likely 64-bit words, so its probability is exactly ``c / 2^64``.  Whether the cells
honour an epsilon is then a question about integers and ``e^eps``, answered here without floats:

* :func:`exp_lower` / :func:`exp_upper`: rational bounds ``L <= e^x <= U`` from the ``decimal`` module
  (its ``exp`` is correctly rounded; one unit in the last place is taken off or added, then the bound is
  cut to ``digits`` significant digits in the safe direction).  ``x`` is taken at its exact value: an
  ``int``, a ``Decimal`` or a binary ``float`` (every float is a dyadic rational); other reals are
  bracketed first.
* :func:`ln_upper`: ``ln r`` rounded up, for reporting a realised level as a ``Decimal``.
* :func:`ratio_at_most`: the exact decision ``r <= e^x`` (precision raised until the bounds separate;
  ``e^x`` is irrational for rational ``x != 0``, so they always do).

Cells are built from :func:`exp_lower` at :data:`CELL_DIGITS` significant digits, so a cell ratio
bounded by ``L`` is at least about ``10^-29`` (relative) below ``e^x`` -- far more than the ``10^-40``
of the 40-digit reports, so a realised level reported rounded up still compares below the charge.
"""
from __future__ import annotations

import math
import numbers
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from fractions import Fraction

TWO_64 = 1 << 64
#: Significant digits of the lower bound ``L <= e^eps`` that cells are built from.
CELL_DIGITS = 30
#: Significant digits of a realised level reported as a Decimal (rounded up).
REPORT_DIGITS = 40



class Unrepresentable(ValueError):
    """A level whose integer cells do not exist at 64 bits (a cell would be empty, or the true value would get
    fewer cells than another outcome): the mechanisms refuse it rather than realise more than the level charged
    (docs/mechanisms.md#exact-sampling).  The one definition, for every one-shot mechanism."""

def exact_decimal(x) -> tuple[Decimal, Decimal]:
    """``(lo, hi)`` Decimals with ``lo <= x <= hi``; equal (the exact value) for ints, floats and Decimals."""
    if isinstance(x, bool):
        raise ValueError(f"expected a real number, got {x!r}")
    if isinstance(x, Decimal):
        return x, x
    if isinstance(x, numbers.Integral):
        d = Decimal(int(x))
        return d, d
    if isinstance(x, float) or (isinstance(x, numbers.Real) and type(x).__module__ == "numpy"):
        d = Decimal(float(x))  # exact: a double is a dyadic rational
        return d, d
    if isinstance(x, numbers.Rational):
        num, den = Decimal(x.numerator), Decimal(x.denominator)
        lo = Context(prec=60, rounding=ROUND_FLOOR).divide(num, den)
        hi = Context(prec=60, rounding=ROUND_CEILING).divide(num, den)
        return lo, hi
    raise ValueError(f"expected an int, float, Decimal or Fraction, got {x!r}")


def _exp_bound(x: Decimal, digits: int, up: bool) -> Fraction:
    ctx = Context(prec=digits + 10)
    e = ctx.exp(x)                                   # correctly rounded: within half a unit of e^x
    e = ctx.next_plus(e) if up else ctx.next_minus(e)  # now strictly on the safe side of e^x
    cut = Context(prec=digits, rounding=ROUND_CEILING if up else ROUND_FLOOR)
    e = cut.plus(e)
    e = cut.next_plus(e) if up else cut.next_minus(e)  # one more unit at `digits`: a margin of >= 10^-digits
    return Fraction(e)


def exp_lower(x, digits: int = CELL_DIGITS) -> Fraction:
    """A rational ``L`` with ``L < e^x``, within about ``10^(1 - digits)`` relative (and at least
    ``10^-digits`` relative below it); exactly 1 for ``x = 0``."""
    lo, hi = exact_decimal(x)
    if lo == hi == 0:
        return Fraction(1)
    return _exp_bound(lo, digits, up=False)


def exp_upper(x, digits: int = CELL_DIGITS) -> Fraction:
    """A rational ``U`` with ``U > e^x``, within about ``10^(1 - digits)`` relative; exactly 1 for ``x = 0``."""
    lo, hi = exact_decimal(x)
    if lo == hi == 0:
        return Fraction(1)
    return _exp_bound(hi, digits, up=True)


def ln_upper(r, digits: int = REPORT_DIGITS) -> Decimal:
    """``ln r`` rounded up to ``digits`` significant digits (plus a safety unit); ``Infinity`` for
    ``r = inf``; exactly 0 for ``r = 1``.  ``r`` is a positive Fraction (or int)."""
    if r == math.inf:
        return Decimal("Infinity")
    r = Fraction(r)
    if r <= 0:
        raise ValueError(f"ln needs a positive ratio, got {r}")
    if r == 1:
        return Decimal(0)
    ctx = Context(prec=digits + 10, rounding=ROUND_CEILING)
    d = ctx.divide(Decimal(r.numerator), Decimal(r.denominator))  # >= r
    v = ctx.next_plus(Context(prec=digits + 10).ln(d))             # ln is correctly rounded: now >= ln r
    return Context(prec=digits, rounding=ROUND_CEILING).plus(v)


def ratio_at_most(r, x) -> bool:
    """Exactly whether ``r <= e^x`` (``r`` a Fraction or ``math.inf``, ``x`` as for :func:`exp_lower`)."""
    if r == math.inf:
        return False
    r = Fraction(r)
    lo, hi = exact_decimal(x)
    if lo == hi == 0:
        return r <= 1
    for digits in (CELL_DIGITS, 60, 120, 240, 480, 960):
        if r <= exp_lower(x, digits):
            return True
        if r >= exp_upper(x, digits):
            return False
    raise ArithmeticError(f"could not decide whether {r} <= e^{x}")  # pragma: no cover


def ceil_frac(q: Fraction) -> int:
    """``ceil(q)`` of a Fraction, exactly."""
    return -((-q.numerator) // q.denominator)


def floor_frac(q: Fraction) -> int:
    return q.numerator // q.denominator


def as_fraction(x) -> Fraction:
    """The exact value of an int, float or Decimal (or a Fraction) as a Fraction."""
    if isinstance(x, bool):
        raise ValueError(f"expected a real number, got {x!r}")
    if isinstance(x, (Fraction, numbers.Integral)):
        return Fraction(x)
    if isinstance(x, Decimal):
        return Fraction(x)
    return Fraction(float(x))


def ln_floor_places(r, places: int = 6) -> Decimal:
    """``ln r`` rounded down to ``places`` decimals (``r`` > 1 a Fraction or int): the largest such decimal
    ``x`` with ``e^x <= r``, used to state a sampler's largest honest epsilon."""
    r = Fraction(r)
    ctx = Context(prec=60, rounding=ROUND_FLOOR)
    d = ctx.divide(Decimal(r.numerator), Decimal(r.denominator))      # <= r
    v = Context(prec=60).next_minus(Context(prec=60).ln(d))           # < ln r
    return v.quantize(Decimal(1).scaleb(-places), rounding=ROUND_FLOOR)


def largest_honest(build, guess: Decimal, step: Decimal = Decimal("0.000001")) -> Decimal:
    """The largest multiple of ``step`` at or below ``guess`` for which ``build(eps)`` does not raise
    ``ValueError``, by bisection (``guess`` is a closed-form estimate of a sampler's limit, which the
    rounding of the cells at the edge may lower; the samplers are honest on an interval starting near 0)."""
    def ok(units: int) -> bool:
        try:
            build(step * units)
            return True
        except ValueError:
            return False

    hi = int(guess / step)
    if ok(hi):
        return step * hi
    lo = hi // 2
    while not ok(lo):  # pragma: no cover - the closed forms are within a factor 2
        lo //= 2
        if lo == 0:
            raise ValueError(f"no honest epsilon below {guess}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return step * lo
