"""Never more than the epsilon charged, for the attributes the service builds: every grid point of the demo
experiments and of each attribute kind, the outputs drawn at the epsilons the market passes to the samplers,
and the release as a whole (a string's Bloom filter: 2 num_hashes bits can differ) at most the epsilon charged.
docs/mechanisms.md, "Exact sampling" and "Strings"."""
from __future__ import annotations

from decimal import Decimal

import pytest

from market.chains import grow
from market.management.commands.load_demo import EXPERIMENTS
from market.models import Attribute
from mechanisms.exactness import Level, chain_level
from tests.factories import (
    BinaryAttributeFactory,
    CategoricalAttributeFactory,
    NumericAttributeFactory,
    StringAttributeFactory,
)

pytestmark = pytest.mark.django_db


def release_level(attribute: Attribute, points: list[int]) -> Level:
    """Realised level of one release: the chain of each output at the epsilons the market draws them at,
    raised to the number of outputs two values can differ in."""
    draws = [grow.draw_epsilon(p, attribute.draw_divisor) for p in points]
    bit = chain_level(draws, attribute.domain_size)
    return Level(bit.ratio ** attribute.draw_divisor)


def grid_points(attribute: Attribute) -> list[int]:
    g = grow.Grid.of(attribute)
    return list(range(g.start, g.stop + 1, g.step))


def attributes():
    yield from [CategoricalAttributeFactory(labels=[str(i) for i in range(m)]) for m in (2, 3, 5, 16)]
    yield BinaryAttributeFactory()
    yield NumericAttributeFactory()
    yield StringAttributeFactory()                                   # 16 bits, 2 hashes: each bit at eps / 4
    yield StringAttributeFactory(num_bits=128, num_hashes=4, grid_stop=Decimal("30"))
    for experiment in EXPERIMENTS:
        start, step, stop = experiment.grid
        yield CategoricalAttributeFactory(labels=experiment.labels, grid_start=start, grid_step=step,
                                          grid_stop=stop)


def test_every_release_along_every_grid_realises_at_most_its_epsilon():
    checked = 0
    for attribute in attributes():
        points = grid_points(attribute)
        for k in range(1, len(points) + 1, max(1, len(points) // 25)):
            charged = Decimal(points[k - 1]) / 1_000_000
            level = release_level(attribute, points[:k])
            assert level.at_most(charged), (attribute.kind, attribute.domain_size, charged, level.epsilon)
            assert level.at_least(charged - Decimal("0.00001")), "the release honours its epsilon"
            checked += 1
    assert checked > 150


def test_a_string_release_drawn_at_the_full_epsilon_per_bit_would_realise_2h_times_it():
    attribute = StringAttributeFactory()  # num_hashes 2
    points = grid_points(attribute)[:5]
    per_bit_at_full = chain_level([grow.draw_epsilon(p) for p in points], 2)
    charged = Decimal(points[-1]) / 1_000_000
    assert not Level(per_bit_at_full.ratio ** 4).at_most(charged)  # what the market did before
    assert Level(per_bit_at_full.ratio ** 4).at_least(4 * charged - Decimal("0.00001"))
