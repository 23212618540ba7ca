"""Chains stored through the service path have the exact law of a forward gradual-release chain.

Values are contributed under a schedule (chains made at 0.5 and 1.0), the schedule is advanced with frozen
time so ``schedules_advance`` raises every ceiling to 3.2 and the extension task (eager) grows each chain to
the last grid point 3.0; then the stored chains are decoded and compared, by chi-square tests, with the exact
law from ``tests.mechanisms.test_exact.joint_law``:

* every column's marginal is k-RR at its epsilon;
* the pair (last column made at creation, first column made by the extension) has the joint law of one
  relaxation step, which catches an extension that ignores the stored head or starts at the wrong point;
* the pair (first, last) has the law of the whole chain.

The service uses the secure RNG, so the tests are not seeded: ``ALPHA = 1e-7`` and the sample sizes are
chosen so that the named wrong laws are rejected with probability above 0.999 (asserted by a power
computation) — and, for the strongest of them, the test also checks that the very same data reject them.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import numpy as np
import pytest
import time_machine
from scipy import stats

from accounts.services import Schedule, schedules_advance
from market.models import Value
from market.values import inputs as domain
from market.values import sealing
from mechanisms import rr_matrix
from mechanisms.rappor import bloom_bits
from tests.factories import (
    BinaryAttributeFactory,
    CategoricalAttributeFactory,
    NumericAttributeFactory,
    StringAttributeFactory,
    contribute,
    stored_chains,
)
from tests.market.stats import ALPHA, chi_square, independent_pair_laws, pair_laws, power, table

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

T0 = datetime(2034, 2, 1, tzinfo=timezone.utc)
GRID = dict(grid_start=Decimal("0.5"), grid_step=Decimal("0.5"), grid_stop=Decimal("10"))
EPS = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
MICRO_EPS = [int(e * 1_000_000) for e in EPS]
CREATED = 2  # columns made when the values were contributed (ceiling 1.0); the rest by the extension
BOUNDARY = (CREATED - 1, CREATED)
FIRST_LAST = (0, len(EPS) - 1)
SCHEDULE = Schedule(start="1.0", cap="3.2", start_at=T0, end_at=T0 + timedelta(days=10))
#: The chain an extension would make if it skipped a grid point when it starts (1.0 -> 2.0 -> ... -> 3.5).
SKIPPED = EPS[:CREATED] + [e + 0.5 for e in EPS[CREATED:]]


def contribute_and_extend(attribute, raws, capture) -> tuple[list[Value], np.ndarray]:
    """Contribute ``raws`` under SCHEDULE, advance it to its cap, and return the stored chains (n, L, width)."""
    with time_machine.travel(T0, tick=False):
        values = contribute(attribute, raws, schedule=SCHEDULE)
    ids = [v.id for v in values]
    created = stored_chains(attribute)
    assert all(created[i][0].tolist() == MICRO_EPS[:CREATED] for i in ids)
    with time_machine.travel(T0 + timedelta(days=10), tick=False), capture(execute=True) as callbacks:
        assert schedules_advance() == len(values)
    assert len(callbacks) == 1
    stored = stored_chains(attribute)
    assert all(stored[i][0].tolist() == MICRO_EPS for i in ids), "every chain reaches 3.0, the last grid point"
    assert all(np.array_equal(stored[i][1][:CREATED], created[i][1]) for i in ids), "the made prefix is kept"
    return values, np.stack([stored[i][1] for i in ids])


def check_forward_chain_law(outputs: np.ndarray, truth: np.ndarray, m: int, divisor: int = 1) -> dict[str, np.ndarray]:
    """Chi-square of every column's marginal, the boundary pair and (first, last); returns the tables.

    ``divisor``: each output is drawn at the grid epsilon over it (strings' bits: 2 num_hashes)."""
    EPS = [e / divisor for e in globals()["EPS"]]  # noqa: N806
    n, L = outputs.shape
    assert L == len(EPS) and truth.shape == (n,)
    assert outputs.min() >= 0 and outputs.max() < m
    for k, eps in enumerate(EPS):
        stat, df, p = chi_square(table(truth, outputs[:, k], m, m), rr_matrix(eps, m))
        assert p > ALPHA, f"column {k} (epsilon {eps}) is not {eps}-k-RR: chi2={stat:.1f}, df={df}, p={p:.2e}"
    tables = {}
    for name, (i, j) in [("boundary", BOUNDARY), ("first-last", FIRST_LAST)]:
        counts = table(truth, outputs[:, i] * m + outputs[:, j], m, m * m)
        stat, df, p = chi_square(counts, pair_laws(EPS, m, i, j))
        assert p > ALPHA, f"{name} pair ({EPS[i]}, {EPS[j]}): chi2={stat:.1f}, df={df}, p={p:.2e}"
        tables[name] = counts
    tables["last"] = table(truth, outputs[:, -1], m, m)
    return tables


def wrong_laws(m: int, divisor: int = 1) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
    """Named wrong laws: (which table, exact law, wrong law)."""
    EPS = [e / divisor for e in globals()["EPS"]]  # noqa: N806
    SKIPPED = [e / divisor for e in globals()["SKIPPED"]]  # noqa: N806
    i, j = BOUNDARY
    return {
        "extension ignores the stored head": (
            "boundary", pair_laws(EPS, m, i, j), independent_pair_laws(EPS[i], EPS[j], m)),
        "extension skips a grid point": ("boundary", pair_laws(EPS, m, i, j), pair_laws(SKIPPED, m, i, j)),
        "last column one grid step low": ("last", rr_matrix(EPS[-1], m), rr_matrix(EPS[-2], m)),
        "chain stops one grid step early": (
            "first-last", pair_laws(EPS, m, *FIRST_LAST), pair_laws(EPS[:-1], m, 0, len(EPS) - 2)),
    }


def assert_power(tables, m, claims: dict[str, float], reject: tuple[str, ...] = (), divisor: int = 1):
    """Each named wrong law would be detected with at least the claimed probability; for ``reject`` the same
    data must already reject it (only for laws detected with probability above 1 - 1e-9)."""
    laws = wrong_laws(m, divisor)
    for name, at_least in claims.items():
        which, exact, wrong = laws[name]
        sizes = tables[which].sum(axis=1)
        got = power(sizes, exact, wrong)
        assert got >= at_least, f"{name}: power {got:.6f} < {at_least} with group sizes {sizes.tolist()}"
    for name in reject:
        which, _, wrong = laws[name]
        assert power(tables[which].sum(axis=1), laws[name][1], wrong) > 1 - 1e-9
        stat, df, p = chi_square(tables[which], wrong)
        assert p < ALPHA, f"the data do not reject '{name}' (p={p:.2e}): the test would not notice it"


def test_categorical_chains_have_the_forward_chain_law(django_capture_on_commit_callbacks):
    attribute = CategoricalAttributeFactory(labels=["red", "green", "blue"], **GRID)
    raws = ["red", "green", "blue"] * 2000
    values, outputs = contribute_and_extend(attribute, raws, django_capture_on_commit_callbacks)
    truth = np.array([attribute.labels.index(r) for r in raws])
    tables = check_forward_chain_law(outputs[:, :, 0], truth, 3)
    assert_power(tables, 3, {
        "extension ignores the stored head": 1 - 1e-12,
        "extension skips a grid point": 1 - 1e-12,
        "last column one grid step low": 1 - 1e-9,
        "chain stops one grid step early": 1 - 1e-6,
    }, reject=("extension ignores the stored head", "extension skips a grid point",
               "last column one grid step low"))


def test_binary_chains_have_the_forward_chain_law(django_capture_on_commit_callbacks):
    attribute = BinaryAttributeFactory(labels=["no", "yes"], **GRID)
    raws = ["no", "yes", "yes", "NO"] * 1000  # labels are matched case-insensitively
    values, outputs = contribute_and_extend(attribute, raws, django_capture_on_commit_callbacks)
    truth = np.array([1 if r == "yes" else 0 for r in raws])
    tables = check_forward_chain_law(outputs[:, :, 0], truth, 2)
    assert_power(tables, 2, {"extension ignores the stored head": 1 - 1e-12,
                             "extension skips a grid point": 1 - 1e-9},
                 reject=("extension ignores the stored head",))


def test_numeric_values_are_discretized_once_and_their_chains_have_the_forward_law(
        django_capture_on_commit_callbacks):
    """x in [0, 100] becomes z = 1 with probability x / 100 (stored sealed, never redrawn); the chain runs on z."""
    attribute = NumericAttributeFactory(low=Decimal("0"), high=Decimal("100"), **GRID)
    raws = ["20", "90.0", "0", "100"] * 1000
    values, outputs = contribute_and_extend(attribute, raws, django_capture_on_commit_callbacks)
    z = open_inputs(attribute, values)[:, 0]
    x = np.array([float(r) for r in raws])
    assert (z[x == 0] == 0).all() and (z[x == 100] == 1).all()
    for level, p_high in [(20.0, 0.2), (90.0, 0.9)]:
        k, n = int(z[x == level].sum()), int((x == level).sum())
        assert stats.binomtest(k, n, p_high).pvalue > ALPHA, f"z at x={level}: {k} of {n} high"
    tables = check_forward_chain_law(outputs[:, :, 0], z, 2)
    assert_power(tables, 2, {"extension ignores the stored head": 1 - 1e-12,
                             "extension skips a grid point": 1 - 1e-9})
    # the law of the outputs given x (a mixture over z) as a buyer sees it: last column
    for level, p_high in [(20.0, 0.2), (90.0, 0.9)]:
        P = (1 - p_high) * rr_matrix(EPS[-1], 2)[0] + p_high * rr_matrix(EPS[-1], 2)[1]
        counts = np.bincount(outputs[x == level, -1, 0], minlength=2)[None, :]
        assert chi_square(counts, P[None, :])[2] > ALPHA


def test_string_chains_run_on_every_bloom_bit(django_capture_on_commit_callbacks):
    attribute = StringAttributeFactory(num_bits=16, num_hashes=2, num_cohorts=4, **GRID)
    words = [f"word-{i}" for i in range(25)]
    raws = [words[i % len(words)] for i in range(800)]
    values, outputs = contribute_and_extend(attribute, raws, django_capture_on_commit_callbacks)
    cohorts = np.array([Value.objects.get(id=v.id).cohort for v in values])
    counts = np.bincount(cohorts, minlength=4)
    assert counts.sum() == 800 and chi_square(counts[None, :], np.full((1, 4), 0.25))[2] > ALPHA
    bits = bloom_bits(raws, cohorts, 16, 2).astype(np.int64)  # (n, 16)
    np.testing.assert_array_equal(open_inputs(attribute, values), bits)
    assert outputs.shape == (800, len(EPS), 16)
    per_bit = outputs.transpose(0, 2, 1).reshape(-1, len(EPS))  # one binary chain per (value, bit)
    # a release at epsilon must be epsilon-LDP for the whole filter: two strings differ in at most 2 h = 4
    # bits, so each bit is drawn at epsilon / 4 (at epsilon per bit the filter would be 4 epsilon-LDP)
    assert attribute.draw_divisor == 4
    tables = check_forward_chain_law(per_bit, bits.reshape(-1), 2, divisor=4)
    assert_power(tables, 2, {"extension ignores the stored head": 1 - 1e-9},
                 reject=("extension ignores the stored head",), divisor=4)


def open_inputs(attribute, values) -> np.ndarray:
    rows = list(Value.objects.filter(id__in=[v.id for v in values]).order_by("id")
                .values_list("id", "owner_id", "input_sealed"))
    order = {vid: k for k, (vid, _, _) in enumerate(rows)}
    payload = sealing.open_inputs([bytes(s) for _, _, s in rows], [o for _, o, _ in rows],
                                  [attribute.id] * len(rows), domain.payload_bytes(attribute))
    inputs = domain.from_payload(attribute, payload)
    return inputs[[order[v.id] for v in values]]
