"""Input validation shared by every mechanism.

Every public function validates its arguments here and raises ``ValueError``
with a message that names the argument and says what was expected.
"""
from __future__ import annotations

import math
import numbers
from decimal import Decimal

import numpy as np

#: Largest epsilon the mechanisms accept. The step kernels are evaluated in
#: the stable forms of docs/mechanisms-reference.md#gradual-release-of-randomized-response, which stay finite
#: and accurate up to here (exp(700) is finite in double precision).
EPS_MAX = 700.0


def check_eps(eps, name: str = "eps", *, positive: bool = False) -> float:
    """Return ``eps`` as a float after checking it is a finite number in [0, EPS_MAX]."""
    if isinstance(eps, bool) or not isinstance(eps, (numbers.Real, Decimal)):
        raise ValueError(f"{name} must be a real number, got {eps!r}")
    value = float(eps)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got NaN")
    if math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if positive and value == 0:
        raise ValueError(f"{name} must be > 0, got 0")
    if value > EPS_MAX:
        raise ValueError(f"{name} must be <= {EPS_MAX:g}, got {value:g}")
    return value


def check_eps_array(eps, name: str = "eps", *, positive: bool = False) -> np.ndarray:
    """Check an array of epsilons elementwise (same rules as :func:`check_eps`)."""
    try:
        arr = np.asarray(eps, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {eps!r}") from None
    if arr.size and np.isnan(arr).any():
        raise ValueError(f"{name} must be numbers, found NaN")
    if arr.size and np.isinf(arr).any():
        raise ValueError(f"{name} must be finite, found an infinite value")
    if arr.size and (arr < 0).any():
        raise ValueError(f"{name} must be >= 0, found {arr.min():g}")
    if positive and arr.size and (arr == 0).any():
        raise ValueError(f"{name} must be > 0, found 0")
    if arr.size and (arr > EPS_MAX).any():
        raise ValueError(f"{name} must be <= {EPS_MAX:g}, found {arr.max():g}")
    return arr


def check_m(m) -> int:
    """Domain size: an integer >= 2."""
    if isinstance(m, bool) or not isinstance(m, numbers.Integral):
        raise ValueError(f"m (the domain size) must be an integer, got {m!r}")
    if m < 2:
        raise ValueError(f"m (the domain size) must be at least 2, got {m}")
    return int(m)


def check_values(values, m: int, name: str = "values") -> np.ndarray:
    """Return ``values`` as a 1-D int64 array after checking each lies in 0..m-1."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a one-dimensional array, got shape {arr.shape}")
    if arr.dtype == bool:
        arr = arr.astype(np.int64)
    if arr.size == 0:
        return arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integers in 0..{m - 1}, got dtype {arr.dtype}")
    lo, hi = arr.min(), arr.max()
    if lo < 0 or hi >= m:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} must lie in the domain 0..{m - 1}, found {bad}")
    return arr.astype(np.int64, copy=False)


def check_same_shape(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {a.shape} and {b.shape}")


def exact_epsilon(eps) -> Decimal:
    """The epsilon a caller meant, as an exact decimal no larger than the float it may have become.

    A ``Decimal`` (or int) is taken as it is.  A float is taken as the smaller of its exact binary value
    and its shortest decimal ``repr``: ``float(Decimal("0.1"))`` is a hair above 0.1, and the sampler must
    realise at most the 0.1 that was charged.  (The reading is strictly increasing on floats: the
    ``repr`` of a float lies in its rounding interval, below every larger float's.)
    """
    if isinstance(eps, Decimal):
        return eps
    if isinstance(eps, int):
        return Decimal(eps)
    f = float(eps)
    return min(Decimal(f), Decimal(repr(f)))


def _show(eps) -> str:
    return str(eps) if isinstance(eps, Decimal) else f"{float(eps):g}"


def check_increasing(epsilons, name: str = "epsilons") -> np.ndarray:
    """A chain's epsilons: a non-empty 1-D array, each valid, strictly increasing.

    Returned as floats (for the float mathematics).  The order is checked on the exact values the samplers
    realise (:func:`exact_epsilon`) whenever a ``Decimal`` is given: two distinct Decimals that are equal as
    floats, such as 0.1 and 0.10000000000000000001, are increasing, and a Decimal and a float are compared
    as the sampler reads them.  Without Decimals the float order is that exact order (ints up to
    ``EPS_MAX`` are exact floats and :func:`exact_epsilon` is strictly increasing on floats).
    """
    arr = check_eps_array(epsilons, name)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty one-dimensional sequence")
    if arr.size < 2:
        return arr
    items = list(epsilons) if not isinstance(epsilons, np.ndarray) or epsilons.dtype == object else None
    if items is not None and any(isinstance(e, Decimal) for e in items):
        exact = [exact_epsilon(e) for e in items]
        bad = [i for i in range(len(exact) - 1) if not exact[i + 1] > exact[i]]
        shown = [_show(e) for e in items]
    else:
        bad = np.flatnonzero(~(np.diff(arr) > 0)).tolist()
        shown = [f"{e:g}" for e in arr[:bad[0] + 2]] if bad else []
    if bad:
        i = bad[0]
        raise ValueError(
            f"{name} must be strictly increasing, but {name}[{i + 1}] = {shown[i + 1]} "
            f"does not exceed {name}[{i}] = {shown[i]}"
        )
    return arr
