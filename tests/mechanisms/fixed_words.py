"""A test random source for the integer-threshold samplers (not a test module)."""
from __future__ import annotations

import numpy as np


class FixedWords:
    """A source returning prescribed 64-bit words: tests the integer comparisons ``u < floor(p 2^64)`` at their
    exact boundaries."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.uint64)

    def words(self, n):
        assert n == self.values.size
        return self.values
