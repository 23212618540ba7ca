"""The owner SDK's sampler (client/ldpmarket_client/sampler.py, docs/custody.md) is the server's, bit for bit.

* The shared vectors ``tests/data/sampler_vectors.json`` are exactly what the server's mechanisms draw today
  (regenerated and compared), and the SDK reproduces every case's output and number of words used, every
  k-RR law and every step's integer rows.
* Whole chains drawn by the SDK from a word stream equal the server's ``mechanisms.chain`` on the same stream.
* Statistics: chains drawn by the SDK (seeded word source) have the law of a forward gradual-release chain:
  every point's marginal is k-RR of the true value and pairs of points have the chain's joint law, by
  chi-square tests at ``ALPHA = 1e-7`` as in tests/market/test_chain_statistics.py; a power computation on
  the actual group sizes states which wrong laws the sample would detect.
"""
from __future__ import annotations

import json
import random
from decimal import Decimal

import numpy as np
import pytest

from ldpmarket_client import sampler
from mechanisms import chain as server_chain
from mechanisms import rr_matrix
from tests.client import make_sampler_vectors
from tests.market.stats import ALPHA, chi_square, independent_pair_laws, pair_laws, power, table

VECTORS = json.loads(make_sampler_vectors.PATH.read_text())


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
    """Uniform 64-bit words from ``random.Random(seed)``, as Python ints (the SDK) or a uint64 array (the
    server), with a record of every word handed out."""

    def __init__(self, seed, as_array=False):
        self.rnd = random.Random(seed)
        self.as_array = as_array
        self.seen = []

    def words(self, n):
        out = [self.rnd.getrandbits(64) for _ in range(n)]
        self.seen += out
        return np.array(out, dtype=np.uint64) if self.as_array else out


# ---------------------------------------------------------------- the shared vectors

def test_the_vectors_are_what_the_server_draws_today():
    """Regenerating from the server's mechanisms gives exactly the checked-in file (so the JavaScript port's
    vectors cannot drift from the server)."""
    fresh = make_sampler_vectors.dumps(make_sampler_vectors.generate())
    assert fresh == make_sampler_vectors.PATH.read_text(), \
        "tests/data/sampler_vectors.json is stale: run python -m tests.client.make_sampler_vectors"
    assert len(fresh.encode()) < 300_000


def test_the_vectors_cover_every_branch():
    cases = VECTORS["cases"]
    assert len(cases) >= 300
    assert {c["m"] for c in cases} == set(range(2, 13))
    assert {c["op"] for c in cases} == {"krr", "relax"}
    assert any(c["op"] == "krr" and c["eps"] == "0" for c in cases)
    assert max(Decimal(c.get("eps") or c["eps_to"]) for c in cases) == 10
    used = {(c["op"], c["words_used"]) for c in cases}
    assert {("krr", 1), ("krr", 2), ("krr", 3), ("relax", 1), ("relax", 2), ("relax", 3), ("relax", 4)} <= used
    relax = [c for c in cases if c["op"] == "relax"]
    assert any(c["previous"] == c["value"] for c in relax) and any(c["previous"] != c["value"] for c in relax)
    assert any(c["output"] not in (c["previous"], c["value"]) for c in relax)  # the others region


def _run(case, words):
    if case["op"] == "krr":
        return sampler.krr(case["value"], Decimal(case["eps"]), case["m"], words)
    return sampler.relax(case["previous"], case["value"], Decimal(case["eps_from"]), Decimal(case["eps_to"]),
                         case["m"], words)


def test_the_sdk_reproduces_every_case():
    wrong = []
    for case in VECTORS["cases"]:
        words = Words(case["words"])
        try:
            out = _run(case, words)
        except IndexError:
            out = "ran out of words"
        if out != case["output"] or words.used != case["words_used"]:
            wrong.append((case, out, words.used))
    assert not wrong, f"{len(wrong)} cases differ, first: {wrong[0]}"


def test_the_sdk_has_every_law_and_step():
    for law in VECTORS["laws"]:
        cells = sampler.krr_cells(Decimal(law["eps"]), law["m"])
        assert (str(cells.keep), str(cells.flip), str(cells.total)) == (law["keep"], law["flip"], law["total"]), law
    for step in VECTORS["steps"]:
        kept, moved = sampler.step_weights(Decimal(step["eps_from"]), Decimal(step["eps_to"]), step["m"])
        for row, want in ((kept, step["kept"]), (moved, step["moved"])):
            got = {"first": str(row.first), "second": str(row.second), "other": str(row.other),
                   "n_others": row.n_others}
            assert got == want, step


def test_epsilons_as_strings_ints_and_decimals_draw_the_same():
    for eps in ("0.5", Decimal("0.5"), Decimal("0.500000")):
        assert sampler.krr_cells(eps, 4) == sampler.krr_cells(Decimal("0.5"), 4)
    assert sampler.krr_cells(2, 3) == sampler.krr_cells("2", 3)


# ---------------------------------------------------------------- whole chains against the server

@pytest.mark.parametrize("seed", range(40))
def test_whole_chains_equal_the_servers_on_the_same_words(seed):
    rnd = random.Random(seed)
    m = rnd.randrange(2, 13)
    micro = sorted(rnd.sample(range(1, 10_000_001, 50_000 if seed % 2 else 1), rnd.randrange(1, 8)))
    if seed % 5 == 0:
        micro = [0] + micro  # a chain may start at 0 (uniform)
    eps = [Decimal(m_) / 1_000_000 for m_ in micro]
    for value in range(m):
        ours, theirs = Seeded(f"{seed}-{value}"), Seeded(f"{seed}-{value}", as_array=True)
        got = sampler.chain(value, eps, m, ours)
        want = server_chain([value], eps, m, theirs)[0].tolist()
        assert got == want and ours.seen == theirs.seen, (m, eps, value)


def test_extending_from_a_head_continues_the_same_chain():
    eps = [Decimal(x) for x in ("0.1", "0.2", "0.3", "0.75", "1.3")]
    for value in range(5):
        whole = sampler.chain(value, eps, 5, Seeded(value))
        words = Seeded(value)
        head = sampler.chain(value, eps[:2], 5, words)
        tail = sampler.extend_chain(value, eps[1], head[-1], eps[2:], 5, words)
        assert head + tail == whole


def test_the_default_word_source_is_the_os_csprng(monkeypatch):
    calls = []

    def urandom(n):
        calls.append(n)
        return bytes(range(n))

    monkeypatch.setattr(sampler.os, "urandom", urandom)
    assert sampler.OSWords().words(2) == [int.from_bytes(bytes(range(8)), "little"),
                                          int.from_bytes(bytes(range(8, 16)), "little")]
    calls.clear()
    sampler.chain(1, ["0.1", "0.2"], 3)
    assert calls and all(n % 8 == 0 for n in calls)


@pytest.mark.parametrize("call, message", [
    (lambda: sampler.krr(0, "31", 3), "at most|\\[0, 30\\]"),
    (lambda: sampler.krr(0, "-0.1", 3), "\\[0, 30\\]"),
    (lambda: sampler.krr(0, "nan", 3), "\\[0, 30\\]"),
    (lambda: sampler.krr(0, "x", 3), "decimal"),
    (lambda: sampler.krr(3, "1", 3), "value"),
    (lambda: sampler.krr(0, "1", 1), "m "),
    (lambda: sampler.relax(0, 5, "0.1", "0.2", 3), "value"),
    (lambda: sampler.relax(0, 0, "0.2", "0.2", 3), "eps_to > eps_from"),
    (lambda: sampler.chain(0, ["0.2", "0.1"], 3), "increasing"),
    (lambda: sampler.chain(0, [], 3), "empty"),
])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- statistics

EPS = [Decimal(x) for x in ("0.1", "0.2", "0.5", "1.0", "1.1", "2.35")]
PAIRS = {"adjacent": (3, 4), "first-last": (0, 5), "middle": (1, 3)}


def sdk_chains(m: int, per_value: int, seed: int, eps=EPS) -> tuple[np.ndarray, np.ndarray]:
    """``per_value`` chains of every label drawn by the SDK from one seeded word stream: (truth, outputs)."""
    words = Seeded(seed)
    truth = np.repeat(np.arange(m), per_value)
    outputs = np.array([sampler.chain(int(a), eps, m, words) for a in truth])
    return truth, outputs


@pytest.mark.slow
@pytest.mark.parametrize("m, per_value, seed", [(2, 3000, 11), (3, 2500, 12), (5, 2500, 13)])
def test_sdk_chains_have_the_forward_chain_law(m, per_value, seed):
    truth, outputs = sdk_chains(m, per_value, seed)
    eps = [float(e) for e in EPS]
    for k, e in enumerate(eps):
        stat, df, p = chi_square(table(truth, outputs[:, k], m, m), rr_matrix(e, m))
        assert p > ALPHA, f"point {k} (epsilon {e}) is not {e}-k-RR: chi2={stat:.1f}, df={df}, p={p:.2e}"
    for name, (i, j) in PAIRS.items():
        counts = table(truth, outputs[:, i] * m + outputs[:, j], m, m * m)
        exact = pair_laws(eps, m, i, j)
        stat, df, p = chi_square(counts, exact)
        assert p > ALPHA, f"{name} pair ({eps[i]}, {eps[j]}): chi2={stat:.1f}, df={df}, p={p:.2e}"
        if name == "adjacent":
            # A step that ignores the previous output (independent k-RRs) would be detected for sure, and
            # these very data reject it.
            wrong = independent_pair_laws(eps[i], eps[j], m)
            assert power(counts.sum(axis=1), exact, wrong) > 1 - 1e-9
            assert chi_square(counts, wrong)[2] < ALPHA
    # A last point drawn at the previous point's epsilon (a step that does not relax) would be detected for
    # sure, and these very data reject it.
    last = table(truth, outputs[:, -1], m, m)
    assert power(last.sum(axis=1), rr_matrix(eps[-1], m), rr_matrix(eps[-2], m)) > 1 - 1e-9
    assert chi_square(last, rr_matrix(eps[-2], m))[2] < ALPHA


@pytest.mark.slow
def test_krr_at_zero_is_uniform_and_a_single_point_is_krr():
    for m, eps in ((4, Decimal(0)), (7, Decimal("0.7")), (12, Decimal("3"))):
        rnd = Seeded(m)
        truth = np.repeat(np.arange(m), 800)
        out = np.array([sampler.krr(int(a), eps, m, rnd) for a in truth])
        stat, df, p = chi_square(table(truth, out, m, m), rr_matrix(float(eps), m))
        assert p > ALPHA, f"k-RR at {eps} over {m}: chi2={stat:.1f}, df={df}, p={p:.2e}"
