"""``market.chains.sets.at`` finds, in every chain at once, the first stored step at or above e
(docs/architecture.md#the-path-of-a-chain-extension): checked against a per-row ``bisect``, and at more rows
than a composite ``row * 2**40 + epsilon`` key can hold in int64 (the bug the 10^7-value E3 run found: rows
from 2**23 on were left out as missing their input)."""
from __future__ import annotations

import bisect

import numpy as np
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from market.chains import sets


def chain_set(chains: list[list[int]]) -> sets.ChainSet:
    """Chains given in steps of 0.01 (10^4 micro-epsilons)."""
    lengths = np.array([len(c) for c in chains], dtype=np.int64)
    offsets = np.zeros(len(chains) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    eps = np.array([e for c in chains for e in c], dtype=np.int64) * 10_000
    out = (np.arange(eps.size, dtype=np.int64) % 3).reshape(-1, 1)
    return sets.ChainSet(eps=eps, out=out, offsets=offsets)


@hsettings(max_examples=200, deadline=None)
@given(chains=st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=6, unique=True).map(sorted), min_size=1,
                       max_size=12),
       e=st.integers(1, 61))
def test_each_row_is_classified_as_a_bisect_of_its_own_chain_would(chains, e):
    cs = chain_set(chains)
    inputs = np.zeros((cs.n, 1), dtype=np.int64)
    lookup, after = sets.at(cs, e * 10_000, 3, inputs, np.random.default_rng(1))
    for r, c in enumerate(chains):
        i = bisect.bisect_left(c, e)
        stored = i < len(c) and c[i] == e
        assert lookup.stored[r] == stored
        assert lookup.inserted[r] == (not stored)
        if stored:
            assert lookup.outputs[r, 0] == cs.out[cs.offsets[r] + i, 0]
        got = (after.eps[after.offsets[r]:after.offsets[r + 1]] // 10_000).tolist()
        assert got == sorted(set(c) | {e})
    assert not lookup.missing_input.any()


def test_rows_beyond_two_to_the_23_find_their_stored_step():
    """2**23 + 5 chains of two steps each, looked up at the upper one: every row finds it stored.
    With the old key ``row * 2**40 + e`` the rows from 2**23 on wrapped negative and were missed."""
    n = (1 << 23) + 5
    offsets = np.arange(0, 2 * n + 1, 2, dtype=np.int64)
    eps = np.tile(np.array([100_000, 200_000], dtype=np.int64), n)
    out = np.tile(np.array([[0], [1]], dtype=np.int64), (n, 1))
    cs = sets.ChainSet(eps=eps, out=out, offsets=offsets)
    lookup, after = sets.at(cs, 200_000, 2)  # no inputs: a missed row would be reported as missing input
    assert lookup.stored.all()
    assert not lookup.missing_input.any()
    assert (lookup.outputs[:, 0] == 1).all()
    assert after is cs
