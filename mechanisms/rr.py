"""k-ary randomized response (k-RR), spec gradual-release.md section 1.

For a true value ``x`` in 0..m-1 and ``E = exp(eps)``:

    Pr(y = x)      = E / (E + m - 1) = 1 / (1 + (m - 1) e^-eps)       (keep)
    Pr(y = v != x) = 1 / (E + m - 1) = e^-eps / (1 + (m - 1) e^-eps)

The right-hand forms never overflow (eps up to 700).  The mechanism is
exactly eps-LDP: every column of the matrix has max/min ratio ``E``.  For
m = 2 it is Warner's randomized response; at eps = 0 the output is uniform.
"""
from __future__ import annotations

import math

import numpy as np

from . import _sampling
from ._validation import check_eps, check_m, check_values


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
    """k-RR of every value: keep with ``E/(E+m-1)``, else a uniform other value."""
    m = check_m(m)
    eps = check_eps(eps)
    x = check_values(values, m)
    layout = _sampling.Layout.of(p_second=0.0, r=flip_probability(eps, m), n_others=m - 1)
    return _sampling.draw(rng, x, x, m, layout)
