"""``privacy_audit``: honest chains sit at or above the Bayes bound; chains that leak their value are flagged."""
from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.privacy import privacy_audit
from market.models import ChainPoint
from mechanisms.audit import bayes_error_bound
from tests.factories import (
    BinaryAttributeFactory,
    CategoricalAttributeFactory,
    NumericAttributeFactory,
    StringAttributeFactory,
    contribute,
    replace_chain,
    stored_chains,
)

LABELS = ["red", "green", "blue"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def honest(db):
    attribute = CategoricalAttributeFactory(grid_stop="1")
    contribute(attribute, LABELS * 120, prefix="honest", ceiling="1", rng=np.random.default_rng(11))
    return attribute


@pytest.fixture
def leaky(db):
    """Chains whose every output is the true value, written straight into the database (each value's slot of its
    block's points, sealed again: a leak the seal cannot see, only the attackers)."""
    attribute = CategoricalAttributeFactory(grid_stop="1")
    values = contribute(attribute, LABELS * 40, prefix="leaky", ceiling="1", rng=np.random.default_rng(12))
    stored = stored_chains(attribute)
    for value, label in zip(values, LABELS * 40):
        eps, out = stored[value.id]
        replace_chain(value, eps, np.full_like(out, LABELS.index(label)))
    after = stored_chains(attribute)
    assert all(np.array_equal(after[v.id][0], stored[v.id][0]) and (after[v.id][1] == LABELS.index(label)).all()
               for v, label in zip(values, LABELS * 40))
    return attribute


def test_honest_chains_pass_and_sit_on_the_bound(honest):
    report = privacy_audit(sample=360, levels=5, rng=np.random.default_rng(1))
    assert report.ok, report.as_text()
    (a,) = report.attributes
    assert a.sampled == 360 and a.common_epsilons == 10 and len(a.levels) == 5
    top = a.levels[-1]
    assert top.epsilon == pytest.approx(1.0) and top.n == 360
    assert top.bound == pytest.approx(bayes_error_bound(1.0, 3))
    for name in ("last_output", "mle"):  # the optimal attackers: on the bound, within 4 standard errors
        r = top.attackers[name]
        assert abs(r["error_rate"] - top.bound) < 4 * np.sqrt(top.bound * (1 - top.bound) / top.n)
    for name in ("highest_frequency", "weighted_highest_frequency"):
        assert top.attackers[name]["error_rate"] > top.bound - 4 * np.sqrt(top.bound * (1 - top.bound) / top.n)
    assert report.png.startswith(PNG)


def test_planted_leak_is_flagged_and_the_command_exits_non_zero(honest, leaky, tmp_path):
    report = privacy_audit(sample=500, levels=4, rng=np.random.default_rng(2))
    by_id = {a.attribute_id: a for a in report.attributes}
    assert by_id[honest.id].ok and not by_id[leaky.id].ok and not report.ok
    assert all(lv.attackers["last_output"]["error_rate"] == 0 and lv.attackers["last_output"]["flag"]
               for lv in by_id[leaky.id].levels)
    out = io.StringIO()
    with pytest.raises(CommandError, match=f"privacy audit FAILED for attribute\\(s\\) {leaky.id}"):
        call_command("privacy_audit", "--out", str(tmp_path), "--seed", "3", "--levels", "3", stdout=out,
                     stderr=io.StringIO())
    text = out.getvalue()
    assert f"[FAIL] attribute {leaky.id}" in text and f"[PASS] attribute {honest.id}" in text and "!" in text
    assert (tmp_path / "privacy_audit.png").read_bytes().startswith(PNG)
    body = json.loads((tmp_path / "privacy_audit.json").read_text())
    assert body["ok"] is False and {a["attribute"] for a in body["attributes"] if a["leak"]} == {leaky.id}
    assert re.search(r"\b(red|green|blue)\b", text) is None  # no raw value in the report


@pytest.mark.parametrize("tamper", ["sealed", "present", "epsilon"])
def test_a_tampered_chain_point_is_reported_broken_not_read(honest, tamper, tmp_path):
    """A chain point row changed in the database (its ciphertext, its bitmap of slots, or moved to another
    epsilon) no longer opens: the audit reports the attribute as failed with the broken seal, it does not attack
    whatever the row now holds."""
    point = ChainPoint.objects.filter(attribute=honest).order_by("epsilon").last()
    if tamper == "sealed":
        sealed = bytearray(bytes(point.sealed))
        sealed[-1] ^= 1
        ChainPoint.objects.filter(id=point.id).update(sealed=bytes(sealed))
    elif tamper == "present":
        present = bytearray(bytes(point.present))
        present[0] ^= 1
        ChainPoint.objects.filter(id=point.id).update(present=bytes(present))
    else:
        ChainPoint.objects.filter(id=point.id).update(epsilon=point.epsilon + 50_000)
    report = privacy_audit(sample=360, levels=5, rng=np.random.default_rng(1))
    (a,) = report.attributes
    assert not report.ok and a.status == "FAIL" and not a.levels
    assert "stored chain points do not open" in a.error and "does not open" in a.error, a.error
    with pytest.raises(CommandError, match=f"privacy audit FAILED for attribute\\(s\\) {honest.id} "
                                           f"\\(stored chain points do not open"):
        call_command("privacy_audit", "--out", str(tmp_path), "--seed", "3", stdout=io.StringIO(),
                     stderr=io.StringIO())


def test_command_passes_on_honest_chains(honest, tmp_path):
    out = io.StringIO()
    call_command("privacy_audit", "--out", str(tmp_path), "--seed", "4", "--attribute", str(honest.id),
                 stdout=out, stderr=io.StringIO())
    assert "RESULT: PASS" in out.getvalue() and (tmp_path / "privacy_audit.png").exists()


def test_binary_numeric_and_string_attributes_and_chains_of_different_lengths(db):
    rng = np.random.default_rng(5)
    binary = BinaryAttributeFactory(grid_stop="2")
    contribute(binary, ["yes", "no"] * 60, prefix="bin", ceiling="2", rng=rng)
    numeric = NumericAttributeFactory(grid_stop="1")
    contribute(numeric, [str(x) for x in np.linspace(0, 100, 120)], prefix="num", ceiling="0.5", rng=rng)
    # Chains of different lengths (different ceilings): the common path is what most chains hold.
    contribute(binary, ["yes", "no"] * 5, prefix="bin-short", ceiling="0.3", rng=rng)
    string = StringAttributeFactory(grid_stop="1")  # every Bloom bit is a binary chain
    contribute(string, [f"word{i % 7}" for i in range(40)], prefix="str", ceiling="1", rng=rng)
    report = privacy_audit(sample=1000, levels=3, rng=rng)
    assert report.ok, report.as_text()
    by_id = {a.attribute_id: a for a in report.attributes}
    assert by_id[string.id].m == 2 and by_id[string.id].levels[-1].n > 40
    assert by_id[binary.id].m == 2 and by_id[binary.id].levels[-1].epsilon == pytest.approx(2.0)
    assert by_id[binary.id].levels[0].n >= by_id[binary.id].levels[-1].n
    assert by_id[numeric.id].levels


def test_attribute_without_values_is_reported_not_failed(db):
    CategoricalAttributeFactory()
    report = privacy_audit(sample=10)
    assert report.ok and "no stored chains" in report.attributes[0].note and report.png is None


def test_an_attribute_with_nothing_sampled_is_skipped_not_passed(db, honest, tmp_path):
    """Issue 13: an attribute whose chains were never attacked (no values, or a one-shot mechanism) was printed as
    [PASS]; it is [SKIPPED], and the result says how many attributes were audited."""
    from tests.factories import UrrAttributeFactory

    empty = CategoricalAttributeFactory()
    oneshot = UrrAttributeFactory()
    report = privacy_audit(sample=360, levels=2, rng=np.random.default_rng(3))
    by_id = {a.attribute_id: a for a in report.attributes}
    assert report.ok  # skipping is no failure
    assert (by_id[empty.id].status, by_id[oneshot.id].status, by_id[honest.id].status) == ("SKIPPED", "SKIPPED", "PASS")
    text = report.as_text()
    assert f"[SKIPPED] attribute {empty.id} " in text and f"[PASS] attribute {empty.id} " not in text
    assert f"[SKIPPED] attribute {oneshot.id} " in text and f"[PASS] attribute {honest.id} " in text
    assert "RESULT: PASS (1 attribute audited, 2 skipped;" in text
    assert {a["attribute"]: a["status"] for a in report.as_dict()["attributes"]}[empty.id] == "SKIPPED"


def test_the_audit_shows_the_right_m_for_every_kind(db):
    """Issue 13: every attribute but a categorical one was shown with m = 2 (a ternary value has 3 states, a
    distribution as many labels as it has, a graph 3 states per item)."""
    from tests.factories import (
        DistributionAttributeFactory,
        GraphAttributeFactory,
        TernaryAttributeFactory,
        UrrAttributeFactory,
    )

    expected = {CategoricalAttributeFactory(): (3, "m = 3"), BinaryAttributeFactory(): (2, "m = 2"),
                NumericAttributeFactory(): (2, "m = 2 (discretized to its bounds)"),
                StringAttributeFactory(): (2, "m = 2 per Bloom bit"), TernaryAttributeFactory(): (3, "m = 3 states"),
                GraphAttributeFactory(): (3, "m = 3 states per item"),
                DistributionAttributeFactory(): (3, "m = 3"), UrrAttributeFactory(): (5, "m = 5")}
    report = privacy_audit(sample=10, plot=False)
    by_id = {a.attribute_id: a for a in report.attributes}
    text = report.as_text()
    for attribute, (m, words) in expected.items():
        assert (by_id[attribute.id].m, by_id[attribute.id].domain) == (m, words), attribute.kind
        assert f"attribute {attribute.id} {attribute} ({words}, {attribute.kind})" in text
