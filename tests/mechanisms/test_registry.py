"""The mechanism registry (docs/mechanisms.md#the-mechanism-registry): one record per mechanism, complete for its
role, with stable audit numbers; OLH's stored words round-trip."""
from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from mechanisms import olh, registry
from mechanisms.release_stats import Shape

#: The budget audit reads these numbers from stored data: a record may be added at the end, never renumbered.
NUMBERS = {"gradual_rr": 0, "urr": 1, "urap": 2, "rr3": 3, "lpp": 4, "private_sample": 5, "warner": 6, "simmons": 7,
           "christofides": 8, "improved_christofides": 9, "oue": 10, "olh": 11}


def test_audit_numbers_are_stable():
    assert {r.code: r.number for r in registry.RECORDS} == NUMBERS


@pytest.mark.parametrize("record", registry.RECORDS, ids=lambda r: r.code)
def test_every_record_is_complete_for_its_role(record):
    assert record.guarantee in (registry.NONE, registry.LDP, registry.ULDP, registry.PER_REPORT)
    assert record.title and record.short and record.owner_name and record.kinds
    if record.is_chain:
        assert record.guarantee == registry.NONE and not record.forms
        assert record.draw is record.estimate is record.predict is None
        return
    assert record.guarantee != registry.NONE and record.forms and record.predict is not None
    for form in record.forms:
        assert set(form.required) | set(form.optional) <= set(registry.PARAMS)
        assert ("epsilon" in form.required) != (form.level is not None), "an epsilon, or an exact level"
    if record.is_survey:
        assert record.kinds == (registry.BINARY,) and None not in (record.design, record.run, record.variance)
    else:
        assert None not in (record.honour, record.draw, record.estimate) and record.owner_explained


def test_forms_are_chosen_by_family_or_by_their_own_parameters():
    rr3 = registry.get("rr3")
    assert rr3.form_for({"epsilon": "1"}).family == "ewrr3"
    assert rr3.form_for({"eps1": "1", "eps2": None}).family == "rr3_ddagger"
    assert rr3.form_for({"family": "ewrr3", "eps1": "1"}).family == "ewrr3"
    with pytest.raises(registry.Refused) as exc:
        rr3.form_for({"family": "nope"})
    assert exc.value.field == "family"


def test_the_two_epsilon_level_is_the_one_exact_formula():
    level = registry.two_epsilon_level({"eps1": "1", "eps2": "2"})
    assert level == Decimal(2) and registry.two_epsilon_level({"eps1": "1", "eps2": "1"}) < Decimal(2)


def test_olh_outputs_round_trip_through_the_stored_signed_16_bit_words():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, size=5000)
    seeds, buckets = olh.olh_perturb(x, Decimal("2"), 1000, rng)
    stored = registry.olh_pack(seeds, buckets).astype("<i2")  # as PurchaseChunk keeps them
    back_seeds, back_buckets = registry.olh_unpack(stored.astype(np.int64))
    assert np.array_equal(back_seeds, seeds) and np.array_equal(back_buckets, buckets)
    assert registry.OLH.width(Shape("categorical", ("a", "b"))) == registry.OLH_WIDTH == stored.shape[1]


def test_olh_refuses_more_buckets_than_a_stored_word_holds():
    shape = Shape("categorical", ("a", "b"))
    registry.OLH.honour(shape, Decimal("10.39"), {})
    with pytest.raises(registry.Refused) as exc:
        registry.OLH.honour(shape, Decimal("10.4"), {})
    assert exc.value.field == "epsilon" and olh.olh_g(Decimal("10.4")) > registry.OLH_MAX_G
