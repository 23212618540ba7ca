"""Exact epsilons: ``Decimal`` with 6 places in the database, integer micro-epsilons in numpy.

Budgets, losses and ledger entries are compared exactly (docs/budget-rules.md); floats are only for the mathematics
inside ``mechanisms``.
"""
from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from ldpmarket.numbers import NumberError, parse_ascii_decimal
from ldpmarket.problems import EpsilonError
from mechanisms.exactness import SAMPLER_EPS_MAX

PLACES = 6
MICRO = 10 ** PLACES
QUANTUM = Decimal(1).scaleb(-PLACES)
#: Largest budget anything in the service accounts for (ceilings, schedules, losses: one-shot losses add up).
MAX_EPSILON = Decimal(700)
#: Largest epsilon any one draw may use (a purchase, a grid point, a mechanism's parameter): the largest the
#: samplers realise to within 10^-6 without ever exceeding it (at 44.4 k-RR would release the true value).
MAX_SALE_EPSILON = Decimal(SAMPLER_EPS_MAX)
#: Where the limit is explained, for error messages.
LIMIT_DOC = "docs/mechanisms.md#the-epsilon-limit"


def parse(value, *, name: str = "epsilon", allow_zero: bool = True, limit: Decimal = MAX_EPSILON) -> Decimal:
    """Parse user input into an exact epsilon, refusing NaN, infinities, negatives, excess precision and
    values above ``limit`` (``MAX_SALE_EPSILON`` for an epsilon a sampler will draw at).  Text must be a plain
    ASCII decimal (``"0.5"``; not ``"1e-1"``, ``"+1"``, ``"1_0"`` nor ``"١"``: ``ldpmarket.numbers``)."""
    if isinstance(value, bool):
        raise EpsilonError(f"{name} must be a number")
    try:
        if isinstance(value, str):  # text: a plain ASCII decimal only (ldpmarket.numbers), "-" for its own message
            d = parse_ascii_decimal(value, signed=True)
        else:
            d = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except NumberError:
        if value.strip().lower().lstrip("+-") in ("nan", "snan", "inf", "infinity"):
            raise EpsilonError(f"{name} must be a finite number") from None
        raise EpsilonError(f"{name} must be a plain decimal number such as 0.5, got {value!r}") from None
    except (InvalidOperation, ValueError, TypeError):
        raise EpsilonError(f"{name} must be a number, got {value!r}") from None
    if not d.is_finite():
        raise EpsilonError(f"{name} must be a finite number")
    if d < 0 or (d == 0 and not allow_zero):
        raise EpsilonError(f"{name} must be {'>= 0' if allow_zero else 'greater than 0'}")
    if d > limit:
        if limit == MAX_SALE_EPSILON:
            raise EpsilonError(f"{name} must be at most {limit}: above it the samplers cannot realise the epsilon "
                               f"charged ({LIMIT_DOC})")
        raise EpsilonError(f"{name} must be at most {limit}")
    if d != d.quantize(QUANTUM, rounding=ROUND_FLOOR):
        raise EpsilonError(f"{name} may have at most {PLACES} decimal places")
    return d.quantize(QUANTUM)


def to_micro(d) -> int:
    """Exact micro-epsilons of a Decimal (or its text); refuses more than 6 decimals."""
    d = d if isinstance(d, Decimal) else Decimal(str(d))
    return int(d.scaleb(PLACES).to_integral_exact())


def from_micro(n: int) -> Decimal:
    return (Decimal(int(n)) / MICRO).quantize(QUANTUM)
