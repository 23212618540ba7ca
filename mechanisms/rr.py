"""k-ary randomized response (k-RR), docs/mechanisms-reference.md#k-ary-randomized-response-k-rr.

For a true value ``x`` in 0..m-1 and ``E = exp(eps)``:

    Pr(y = x)      = E / (E + m - 1) = 1 / (1 + (m - 1) e^-eps)       (keep)
    Pr(y = v != x) = 1 / (E + m - 1) = e^-eps / (1 + (m - 1) e^-eps)

The right-hand forms never overflow (eps up to 700).  The mechanism is
exactly eps-LDP: every column of the matrix has max/min ratio ``E``.  For
m = 2 it is Warner's randomized response; at eps = 0 the output is uniform.

:func:`perturb` samples the integer law of ``mechanisms.exactness.krr_cells``
(each other value ``ceil(2^64 / (e^eps + m - 1))`` units of 2^-64, the true
value the rest), which realises at most eps; it refuses eps above
``SAMPLER_EPS_MAX`` (30).  See docs/mechanisms.md, "Exact sampling".
"""
from __future__ import annotations

import math

import numpy as np

from . import _sampling
from ._validation import check_eps, check_m, check_values
from .exactness import RowWeights, krr_cells
from .random import uniform_below


def keep_probability(eps, m) -> float:
    """``Pr(y = x) = E / (E + m - 1)``."""
    eps, m = check_eps(eps), check_m(m)
    return 1.0 / (1.0 + (m - 1) * math.exp(-eps))


def flip_probability(eps, m) -> float:
    """``Pr(y = v)`` for each ``v != x``: ``1 / (E + m - 1)``."""
    eps, m = check_eps(eps), check_m(m)
    z = math.exp(-eps)
    return z / (1.0 + (m - 1) * z)


def rr_matrix(eps, m) -> np.ndarray:
    """The (m, m) row-stochastic matrix ``P[x, y] = Pr(y | x)``."""
    p, q = keep_probability(eps, m), flip_probability(eps, m)
    mat = np.full((m, m), q)
    np.fill_diagonal(mat, p)
    return mat


def perturb(values, eps, m, rng=None) -> np.ndarray:
    """k-RR of every value: keep with ``E/(E+m-1)``, else a uniform other value (exact integer law: module doc)."""
    m = check_m(m)
    cells = krr_cells(eps, m)
    x = check_values(values, m)
    if cells.keep == cells.flip:  # eps = 0: exactly uniform
        return uniform_below(rng, m, x.shape[0])
    w = RowWeights(first=cells.keep, second=0, other=cells.flip, n_others=m - 1)
    return _sampling.draw_weighted(rng, x, x, m, w)
