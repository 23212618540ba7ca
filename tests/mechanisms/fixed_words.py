"""A test random source for the integer-threshold samplers (not a test module)."""
from __future__ import annotations

import numpy as np


class FixedWords:
    """A source returning prescribed 64-bit words, in order across calls: tests the integer comparisons of
    the samplers at their exact boundaries.  Every prescribed word must be used."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.uint64)
        self.used = 0

    def words(self, n):
        assert self.used + n <= self.values.size, "the sampler asked for more words than were prescribed"
        out = self.values[self.used:self.used + n]
        self.used += n
        return out

    @property
    def exhausted(self) -> bool:
        return self.used == self.values.size
