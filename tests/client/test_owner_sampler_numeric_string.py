"""The owner SDK's sampler for numeric and string values (``ldpmarket_client.sampler``, docs/custody.md):

* the shared vectors ``tests/data/custody_vectors.json`` are exactly what the server's code draws today, and the
  SDK reproduces every case bit for bit (discretization, Bloom filters, numeric and string chains, extensions);
* chi-square tests of the SDK's draws (fixed seeds): the discretized bit's rate, the numeric chain's law given the
  value, and each Bloom bit's chain at ``epsilon / draw_divisor``, tolerances from the exact laws' variance.
"""
from __future__ import annotations

import json
import math
import random
from decimal import Decimal

import numpy as np
import pytest

from ldpmarket_client import sampler
from mechanisms import rr_matrix
from tests.client import make_custody_vectors
from tests.market.stats import ALPHA, chi_square, pair_laws, power, table

VECTORS = json.loads(make_custody_vectors.PATH.read_text())


class Words:
    """A word source handing out a fixed list in order (``used`` counts the words taken)."""

    def __init__(self, words):
        self.list = [int(w) for w in words]
        self.used = 0

    def words(self, n):
        if self.used + n > len(self.list):
            raise IndexError("ran out of words")
        self.used += n
        return self.list[self.used - n:self.used]


class Seeded:
    def __init__(self, seed):
        self.rnd = random.Random(seed)

    def words(self, n):
        return [self.rnd.getrandbits(64) for _ in range(n)]


def bits(text: str) -> list[int]:
    return [int(c) for c in text]


# ---------------------------------------------------------------- the shared vectors

def test_the_vectors_are_what_the_server_draws_today():
    fresh = make_custody_vectors.dumps(make_custody_vectors.generate())
    assert fresh == make_custody_vectors.PATH.read_text(), \
        "tests/data/custody_vectors.json is stale: run python -m tests.client.make_custody_vectors"


def test_the_vectors_cover_both_sides_of_the_threshold_and_the_bounds():
    cases = VECTORS["discretize"]
    assert {c["z"] for c in cases} == {0, 1}
    assert any(int(c["words"][0]) == int(c["threshold"]) - 1 and c["z"] == 1 for c in cases)
    assert any(int(c["words"][0]) == int(c["threshold"]) and c["z"] == 0 for c in cases)
    assert any(c["x"] == c["high"] and c["words"][0] == str(2**64 - 1) and c["z"] == 1 for c in cases)
    assert all(len(v) >= 4 for k, v in VECTORS.items() if k != "about")


@pytest.mark.parametrize("case", VECTORS["discretize"], ids=lambda c: f"{c['x']}in[{c['low']},{c['high']}]")
def test_the_sdk_discretizes_every_case(case):
    words = Words(case["words"])
    assert sampler.discretize(case["x"], case["low"], case["high"], words) == case["z"]
    assert words.used == case["words_used"] == 1


@pytest.mark.parametrize("case", VECTORS["bloom"], ids=lambda c: f"{c['cohort']}-{c['num_bits']}-{c['num_hashes']}")
def test_the_sdk_builds_every_bloom_filter(case):
    got = sampler.bloom_bits(case["string"], case["cohort"], case["num_bits"], case["num_hashes"])
    assert "".join(map(str, got)) == case["bits"]


@pytest.mark.parametrize("case", VECTORS["numeric_chain"], ids=lambda c: c["x"])
def test_the_sdk_draws_every_numeric_chain(case):
    words = Words(case["words"])
    z = sampler.discretize(case["x"], case["low"], case["high"], words)
    assert z == case["z"]
    assert [row[0] for row in sampler.bits_chain([z], case["epsilons"], 1, words)] == case["outputs"]
    assert words.used == case["words_used"]


@pytest.mark.parametrize("case", VECTORS["string_chain"], ids=lambda c: c["string"])
def test_the_sdk_draws_every_string_chain(case):
    filt = sampler.bloom_bits(case["string"], case["cohort"], case["num_bits"], case["num_hashes"])
    assert "".join(map(str, filt)) == case["bits"] and case["divisor"] == 2 * case["num_hashes"]
    words = Words(case["words"])
    rows = sampler.bits_chain(filt, case["epsilons"], case["divisor"], words)
    assert ["".join(map(str, r)) for r in rows] == case["outputs"]
    assert words.used == case["words_used"]


@pytest.mark.parametrize("case", VECTORS["string_extend"], ids=lambda c: c["bits"])
def test_the_sdk_extends_every_string_chain(case):
    words = Words(case["words"])
    rows = sampler.extend_bits_chain(bits(case["bits"]), case["head_epsilon"], bits(case["head_outputs"]),
                                     case["epsilons"], case["divisor"], words)
    assert ["".join(map(str, r)) for r in rows] == case["outputs"]
    assert words.used == case["words_used"]


def test_draw_epsilons_are_the_servers():
    from market.chains.grow import draw_epsilon

    for eps, divisor in (("0.1", 4), ("1.5", 6), ("0.000001", 8), ("2", 1), ("10", 3)):
        assert sampler.draw_epsilon(eps, divisor) == draw_epsilon(int(Decimal(eps).scaleb(6)), divisor)
    with pytest.raises(ValueError, match="6 decimal"):
        sampler.draw_epsilon("0.1234567", 2)


@pytest.mark.parametrize("call, message", [
    (lambda: sampler.discretize("101", "0", "100"), "lie in"),
    (lambda: sampler.discretize("5", "1", "1"), "low < high"),
    (lambda: sampler.bloom_bits("x", -1, 8, 2), "cohort"),
    (lambda: sampler.bloom_bits(3, 0, 8, 2), "text"),
    (lambda: sampler.bits_chain([0, 2], ["0.1"], 2), "bit"),
    (lambda: sampler.extend_bits_chain([0, 1], "0.1", [0], ["0.2"], 2), "head"),
])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- statistics

def test_the_discretized_bit_has_the_exact_rate():
    """For each x, the count of z = 1 among n draws is Binomial(n, T / 2^64): within 5.5 standard deviations."""
    words = Seeded(7)
    n = 20000
    for x, low, high in (("25", "0", "100"), ("0.9", "-1", "1"), ("0.6", "0.5", "0.75"), ("99.99", "0", "100")):
        p = (float(x) - float(low)) / (float(high) - float(low))
        ones = sum(sampler.discretize(x, low, high, words) for _ in range(n))
        sd = math.sqrt(n * p * (1 - p))
        assert abs(ones - n * p) < 5.5 * sd, (x, ones, n * p, sd)
    assert all(sampler.discretize("100", "0", "100", words) == 1 for _ in range(200))
    assert all(sampler.discretize("0", "0", "100", words) == 0 for _ in range(200))


EPS = ["0.1", "0.2", "0.5", "1.0", "1.1"]


@pytest.mark.slow
def test_the_numeric_chain_has_the_forward_chain_law_given_z_and_mixes_over_x():
    words = Seeded(21)
    n = 6000
    x, low, high = "70", "0", "100"
    z = np.array([sampler.discretize(x, low, high, words) for _ in range(n)])
    outputs = np.array([[row[0] for row in sampler.bits_chain([int(b)], EPS, 1, words)] for b in z])
    eps = [float(e) for e in EPS]
    for k, e in enumerate(eps):  # each point is an e-RR of z
        stat, df, p = chi_square(table(z, outputs[:, k], 2, 2), rr_matrix(e, 2))
        assert p > ALPHA, (k, stat, df, p)
    for i, j in ((3, 4), (0, 4), (1, 3)):  # pairs follow the chain's law (not independent draws)
        stat, df, p = chi_square(table(z, outputs[:, i] * 2 + outputs[:, j], 2, 4), pair_laws(eps, 2, i, j))
        assert p > ALPHA, (i, j, stat, df, p)
    # Over x alone (z unknown): the last output is 1 with probability 0.7 keep + 0.3 (1 - keep).
    keep = rr_matrix(eps[-1], 2)[1, 1]
    q = 0.7 * keep + 0.3 * (1 - keep)
    ones = int(outputs[:, -1].sum())
    assert abs(ones - n * q) < 5.5 * math.sqrt(n * q * (1 - q))


@pytest.mark.slow
def test_every_bloom_bit_has_its_chain_at_epsilon_over_the_divisor():
    """Chains of the Bloom bits of many strings, pooled by bit value: each point an (eps / 4)-RR of the bit, pairs
    the chain's law; drawing at the full epsilon would be detected for sure by these very data."""
    words = Seeded(33)
    num_bits, num_hashes = 16, 2
    divisor = 2 * num_hashes
    truth, outs = [], []
    for k in range(500):
        filt = sampler.bloom_bits(f"answer {k % 40}", k % 4, num_bits, num_hashes)
        rows = sampler.bits_chain(filt, EPS, divisor, words)
        truth += filt
        outs += [list(col) for col in zip(*rows)]
    truth, outs = np.array(truth), np.array(outs)
    eps = [float(Decimal(e) / divisor) for e in EPS]
    for k, e in enumerate(eps):
        stat, df, p = chi_square(table(truth, outs[:, k], 2, 2), rr_matrix(e, 2))
        assert p > ALPHA, (k, stat, df, p)
    for i, j in ((3, 4), (0, 4)):
        stat, df, p = chi_square(table(truth, outs[:, i] * 2 + outs[:, j], 2, 4), pair_laws(eps, 2, i, j))
        assert p > ALPHA, (i, j, stat, df, p)
    last = table(truth, outs[:, -1], 2, 2)
    full = rr_matrix(float(EPS[-1]), 2)
    assert power(last.sum(axis=1), rr_matrix(eps[-1], 2), full) > 1 - 1e-9
    assert chi_square(last, full)[2] < ALPHA
