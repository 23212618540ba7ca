"""Invalid input raises ValueError with a message a user understands (issue 2, item 1)."""
from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from mechanisms import bridge, chain, keep_probability, perturb, relax, step_probabilities, tighten


@pytest.mark.parametrize("eps,message", [
    (-0.1, ">= 0"), (float("nan"), "NaN"), (float("inf"), "finite"), (float("-inf"), "finite"),
    (1e308, "<= 700"), ("1.0", "real number"), (True, "real number"), (None, "real number"),
])
def test_bad_epsilon(eps, message):
    with pytest.raises(ValueError, match=message):
        perturb([0, 1], eps, 2)
    with pytest.raises(ValueError, match=message):
        keep_probability(eps, 3)


def test_decimal_and_numpy_epsilons_are_accepted():
    assert keep_probability(Decimal("0.5"), 2) == pytest.approx(keep_probability(0.5, 2))
    assert keep_probability(np.float32(0.5), 2) == pytest.approx(keep_probability(0.5, 2))


@pytest.mark.parametrize("e1,e2", [(1.0, 1.0), (2.0, 1.0)])
def test_relaxation_must_increase(e1, e2):
    with pytest.raises(ValueError, match="greater than eps_from"):
        step_probabilities(e1, e2, 3)
    with pytest.raises(ValueError, match="greater than eps_from"):
        relax([0], [0], e1, e2, 3)


def test_chain_epsilons_strictly_increasing():
    with pytest.raises(ValueError, match=r"strictly increasing, but epsilons\[2\] = 0.5"):
        chain([0, 1], [0.1, 0.5, 0.5], 2)
    with pytest.raises(ValueError, match="non-empty"):
        chain([0, 1], [], 2)


@pytest.mark.parametrize("values", [[0, 3], [-1, 0], [0.5, 1], ["a"]])
def test_values_outside_the_domain(values):
    with pytest.raises(ValueError, match="values must"):
        perturb(values, 1.0, 3)


def test_domain_size():
    with pytest.raises(ValueError, match="at least 2"):
        perturb([0], 1.0, 1)
    with pytest.raises(ValueError, match="integer"):
        perturb([0], 1.0, 2.5)


def test_shapes():
    with pytest.raises(ValueError, match="same shape"):
        relax([0, 1], [0], 0.1, 0.2, 2)
    with pytest.raises(ValueError, match="same shape"):
        bridge([0, 1], [0], 0.1, 0.2, 0.3, 2)
    with pytest.raises(ValueError, match="one-dimensional"):
        perturb([[0, 1]], 1.0, 2)


def test_bridge_and_tighten_ordering():
    with pytest.raises(ValueError, match="eps_lo < eps_mid < eps_hi"):
        bridge([0], [1], 0.5, 0.5, 1.0, 2)
    with pytest.raises(ValueError, match="eps_to < eps_from"):
        tighten([0], 0.5, 0.7, 2)


def test_empty_inputs_are_fine():
    assert perturb([], 1.0, 3).shape == (0,)
    assert chain([], [0.1, 0.2], 3).shape == (0, 2)
