"""The sampling code path against the exact probabilities (docs/quality-targets.md#reliability).

Each test draws from ``perturb``, ``relax``, ``bridge``, ``tighten`` and ``chain``
for every combination of inputs and compares the counts with the exact kernel
by a chi-square test.  Runs with a seeded Generator are deterministic
(threshold 1e-4); runs through the secure default are not, so their threshold
is 1e-7, which makes a false alarm a once-in-ten-million event while
``test_chi_square_detects_a_small_epsilon_error`` shows that the same sample
size (40,000 draws per input combination) rejects a 5% error in epsilon with
p below 1e-12.
"""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from scipy import stats

from mechanisms import (
    _sampling,
    bridge,
    bridge_matrix,
    chain,
    perturb,
    relax,
    rr_matrix,
    step_matrix,
    tighten,
    tighten_matrix,
)
from mechanisms.exactness import RowWeights, krr_cells
from mechanisms.random import U64_MAX, SecureRandom, uniform_below, words
from tests.mechanisms.fixed_words import FixedWords
from tests.mechanisms.test_exact import joint_law

SEEDED_ALPHA = 1e-4
SECURE_ALPHA = 1e-7
PER_CELL = 40000  # draws per input combination


def rngs():
    return [pytest.param(lambda: np.random.default_rng(20261122), SEEDED_ALPHA, id="seeded"),
            pytest.param(lambda: None, SECURE_ALPHA, id="secure-default")]


def chi_square_p(groups: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Pooled chi-square over groups of (draws, exact probabilities); groups may differ in width."""
    parts = [chi_square_stat(np.bincount(d, minlength=p.size)[None, :], p[None, :]) for d, p in groups]
    return float(stats.chi2.sf(sum(s for s, _ in parts), sum(d for _, d in parts)))


def chi_square_table_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pooled chi-square of a (groups, categories) table of counts against exact probabilities."""
    return float(stats.chi2.sf(*chi_square_stat(counts, probs)))


def chi_square_stat(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Statistic and degrees of freedom; a draw on a zero-probability category fails outright."""
    assert counts.shape == probs.shape, "a draw fell outside the domain"
    zero = probs == 0
    assert counts[zero].sum() == 0, "a draw landed on a category of probability zero"
    expected = probs * counts.sum(axis=1, keepdims=True)
    stat = (((counts - expected) ** 2)[~zero] / expected[~zero]).sum()
    return float(stat), int((~zero).sum() - counts.shape[0])


def grouped_counts(group: np.ndarray, out: np.ndarray, n_groups: int, m: int) -> np.ndarray:
    return np.bincount(group * m + out, minlength=n_groups * m).reshape(n_groups, m)


def flat_index(cols: np.ndarray, m: int) -> np.ndarray:
    return np.ravel_multi_index(tuple(cols.T), (m,) * cols.shape[1])


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("m", [2, 3, 16])
def test_perturb_matches_krr(make_rng, alpha, m):
    rng, eps = make_rng(), 0.9
    x = np.repeat(np.arange(m), PER_CELL)
    y = perturb(x, eps, m, rng)
    P = rr_matrix(eps, m)
    assert chi_square_p([(y[x == a], P[a]) for a in range(m)]) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("m,e1,e2", [(2, 0.3, 1.2), (3, 0.1, 0.5), (5, 0.0, 0.8), (16, 1.0, 2.5), (4, 0.5, 0.5001)])
def test_relax_matches_the_step_kernel(make_rng, alpha, m, e1, e2):
    rng = make_rng()
    pairs = np.array(list(itertools.product(range(m), repeat=2)))  # (o1, a)
    group = np.repeat(np.arange(len(pairs)), PER_CELL)
    o2 = relax(pairs[group, 0], pairs[group, 1], e1, e2, m, rng)
    probs = np.array([step_matrix(e1, e2, m, j)[i] for i, j in pairs])
    assert chi_square_table_p(grouped_counts(group, o2, len(pairs), m), probs) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("m,lo,mid,hi", [(2, 0.2, 0.6, 1.5), (3, 0.0, 0.4, 1.0), (6, 0.5, 1.0, 3.0)])
def test_bridge_matches_the_posterior(make_rng, alpha, m, lo, mid, hi):
    rng = make_rng()
    pairs = np.array(list(itertools.product(range(m), repeat=2)))  # (o_lo, o_hi)
    group = np.repeat(np.arange(len(pairs)), PER_CELL)
    o_mid = bridge(pairs[group, 0], pairs[group, 1], lo, mid, hi, m, rng)
    W = bridge_matrix(lo, mid, hi, m)
    probs = np.array([W[i, j] for i, j in pairs])
    assert chi_square_table_p(grouped_counts(group, o_mid, len(pairs), m), probs) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("m,e_from,e_to", [(2, 1.0, 0.3), (4, 0.8, 0.0), (7, 2.0, 1.0)])
def test_tighten_matches_the_posterior(make_rng, alpha, m, e_from, e_to):
    rng = make_rng()
    o = np.repeat(np.arange(m), PER_CELL)
    low = tighten(o, e_from, e_to, m, rng)
    W = tighten_matrix(e_from, e_to, m)
    assert chi_square_p([(low[o == i], W[i]) for i in range(m)]) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
@pytest.mark.parametrize("m,epsilons", [(2, (0.1, 0.5, 1.0, 2.0)), (3, (0.0, 0.5, 1.5))])
def test_chain_rows_follow_the_joint_law(make_rng, alpha, m, epsilons):
    rng = make_rng()
    per = 4 * PER_CELL
    x = np.repeat(np.arange(m), per)
    rows = chain(x, epsilons, m, rng)
    assert rows.shape == (x.size, len(epsilons))
    groups = [(flat_index(rows[x == a], m), joint_law(epsilons, m, a).ravel()) for a in range(m)]
    assert chi_square_p(groups) > alpha


@pytest.mark.parametrize("make_rng,alpha", rngs())
def test_bridged_and_tightened_draws_extend_stored_chains_with_the_forward_law(make_rng, alpha):
    """The service path: store a chain, bridge a point into it and tighten below it; joint law as forward."""
    rng, m, per = make_rng(), 3, 4 * PER_CELL
    x = np.repeat(np.arange(m), per)
    stored = chain(x, (0.4, 1.2), m, rng)
    mid = bridge(stored[:, 0], stored[:, 1], 0.4, 0.7, 1.2, m, rng)
    low = tighten(stored[:, 0], 0.4, 0.1, m, rng)
    rows = np.column_stack([low, stored[:, 0], mid, stored[:, 1]])
    groups = [(flat_index(rows[x == a], m), joint_law((0.1, 0.4, 0.7, 1.2), m, a).ravel()) for a in range(m)]
    assert chi_square_p(groups) > alpha


def test_chi_square_detects_a_small_epsilon_error():
    """Power: with the sample sizes above, relaxing to 1.05 * eps2 instead of eps2 is rejected."""
    rng, m, e1, e2 = np.random.default_rng(7), 3, 0.1, 0.5
    pairs = np.array(list(itertools.product(range(m), repeat=2)))
    group = np.repeat(np.arange(len(pairs)), PER_CELL)
    wrong = relax(pairs[group, 0], pairs[group, 1], e1, e2 * 1.05, m, rng)
    probs = np.array([step_matrix(e1, e2, m, j)[i] for i, j in pairs])
    assert chi_square_table_p(grouped_counts(group, wrong, len(pairs), m), probs) < 1e-12



def test_weighted_draws_decide_exactly_at_their_thresholds():
    m, eps = 3, 1.0
    cells = krr_cells(eps, m)
    # total 2^64 -> U has 129 bits and every threshold is a multiple of 2^65: the top word decides.
    # Regions for x = 0: value 1 below R, value 2 below 2R, keep above; the top word 2^64 - 1 ties with the
    # acceptance threshold 2^129 (capped) and is settled by two more words (any: every U is accepted).
    R = cells.flip
    u = [0, R - 1, R, 2 * R - 1, 2 * R, U64_MAX]
    source = FixedWords(u + [U64_MAX, U64_MAX])
    out = perturb(np.zeros(len(u), dtype=int), eps, m, source)
    assert out.tolist() == [1, 1, 2, 2, 0, 0] and source.exhausted


def test_a_tied_top_word_is_settled_by_the_next_word_and_the_top_is_rejected():
    w = RowWeights(first=2, second=0, other=1, n_others=1)  # Pr(other) = 1/3: thresholds with low bits
    cut = _sampling._Cut.of(w)
    assert cut.bits == 66
    others_end, _, accept = cut.thresholds
    top, low = others_end >> 2, others_end & 3
    assert low and accept == (1 << 66) - 1 and accept & 3 == 3
    x = np.zeros(4, dtype=int)
    # rows: tie then rest below the threshold's low bits (other = 1); tie then rest at them (first = 0);
    # a word below (other); the very top, tied with the rejection threshold, whose rest 0b11 rejects it.
    rest_below, rest_at = (low - 1) << 62, low << 62
    source = FixedWords([top, top, 0, U64_MAX, rest_below, rest_at, 3 << 62, 0])
    out = _sampling.draw_weighted(source, x, x, 2, w)
    assert out.tolist() == [1, 0, 1, 1] and source.exhausted  # the rejected row was redrawn: word 0 -> other


@pytest.mark.parametrize("call", [
    lambda: perturb([0], 30.000001, 2), lambda: relax([0], [0], 1.0, 31.0, 2),
    lambda: bridge([0], [0], 1.0, 2.0, 40.0, 2), lambda: tighten([0], 45.0, 1.0, 2)])
def test_samplers_refuse_epsilons_they_cannot_honour(call):
    with pytest.raises(ValueError, match="at most 30"):
        call()


def test_outputs_stay_in_the_domain_for_every_word():
    rng = np.random.default_rng(3)
    for m in (2, 3, 9):
        x = rng.integers(0, m, 5000)
        o = rng.integers(0, m, 5000)
        for out in (perturb(x, 0.5, m), relax(o, x, 0.2, 0.9, m), bridge(o, x, 0.1, 0.3, 0.9, m),
                    tighten(o, 1.0, 0.1, m)):
            assert out.min() >= 0 and out.max() < m and out.dtype == np.int64


def test_seeded_generator_is_reproducible_and_default_is_not_numpy_global():
    x = np.arange(5).repeat(200)
    a = chain(x, (0.1, 1.0), 5, np.random.default_rng(11))
    b = chain(x, (0.1, 1.0), 5, np.random.default_rng(11))
    assert (a == b).all()
    np.random.seed(0)
    c = chain(x, (0.1, 1.0), 5)
    np.random.seed(0)
    d = chain(x, (0.1, 1.0), 5)
    assert (c != d).any()  # the secure default ignores numpy's global seed


def test_secure_source_rekeys_in_a_forked_child():
    source = SecureRandom()
    source.words(1)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next words and exit immediately
        os.write(write_fd, source.words(4).tobytes() + words(None, 4).tobytes())
        os._exit(0)
    os.waitpid(pid, 0)
    child = np.frombuffer(os.read(read_fd, 64), dtype=np.uint64)
    parent = np.concatenate([source.words(4), words(None, 4)])
    assert (child != parent).all()


def test_uniform_below_is_exactly_uniform():
    k = np.array([3, 7, 10]).repeat(30000)
    draws = uniform_below(None, k, k.size)
    groups = [(draws[k == v], np.full(v, 1 / v)) for v in (3, 7, 10)]
    assert chi_square_p(groups) > SECURE_ALPHA


def test_words_rejects_unknown_sources():
    with pytest.raises(ValueError, match="rng must be"):
        perturb([0, 1], 1.0, 2, rng=42)
