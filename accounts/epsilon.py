"""Exact epsilons: ``Decimal`` with 6 places in the database, integer micro-epsilons in numpy.

Budgets, losses and ledger entries are compared exactly (spec service.md
section 1); floats are only for the mathematics inside ``mechanisms``.
"""
from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal, InvalidOperation

PLACES = 6
MICRO = 10 ** PLACES
QUANTUM = Decimal(1).scaleb(-PLACES)
#: Largest epsilon anything in the service accepts (the mechanisms are accurate up to 700).
MAX_EPSILON = Decimal(700)


class EpsilonError(ValueError):
    """An epsilon that is not a finite number in [0, MAX_EPSILON] with at most 6 decimals."""


def parse(value, *, name: str = "epsilon", allow_zero: bool = True) -> Decimal:
    """Parse user input into an exact epsilon, refusing NaN, infinities, negatives and excess precision."""
    if isinstance(value, bool):
        raise EpsilonError(f"{name} must be a number")
    try:
        d = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except (InvalidOperation, ValueError, TypeError):
        raise EpsilonError(f"{name} must be a number, got {value!r}") from None
    if not d.is_finite():
        raise EpsilonError(f"{name} must be a finite number")
    if d < 0 or (d == 0 and not allow_zero):
        raise EpsilonError(f"{name} must be {'>= 0' if allow_zero else 'greater than 0'}")
    if d > MAX_EPSILON:
        raise EpsilonError(f"{name} must be at most {MAX_EPSILON}")
    if d != d.quantize(QUANTUM, rounding=ROUND_FLOOR):
        raise EpsilonError(f"{name} may have at most {PLACES} decimal places")
    return d.quantize(QUANTUM)


def to_micro(d) -> int:
    """Exact micro-epsilons of a Decimal (or its text); refuses more than 6 decimals."""
    d = d if isinstance(d, Decimal) else Decimal(str(d))
    return int(d.scaleb(PLACES).to_integral_exact())


def from_micro(n: int) -> Decimal:
    return (Decimal(int(n)) / MICRO).quantize(QUANTUM)
