"""The database refuses malformed attributes, duplicate or half-deleted values, and inconsistent chains."""
from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from market import chains
from market.models import Attribute, Chain, Value
from market.services import values_create_many
from tests.factories import DatasetFactory, NumericAttributeFactory, StringAttributeFactory, contribute

D = Decimal


def refused(fn):
    with pytest.raises(IntegrityError), transaction.atomic():
        fn()


def accepted(fn):
    with transaction.atomic():
        fn()


def _attribute(dataset, **fields):
    base = dict(dataset=dataset, name=f"a{Attribute.objects.count()}", kind="categorical", labels=["x", "y"])
    return Attribute.objects.create(**{**base, **fields})


@pytest.mark.parametrize("fields", [
    dict(kind="image"),
    dict(grid_step=D("0")),
    dict(grid_step=D("-0.1")),
    dict(grid_start=D("-0.1")),
    dict(grid_start=D("2"), grid_stop=D("1")),
    dict(grid_stop=D("30.000001")),
    dict(kind="numeric"),                                     # bounds required
    dict(kind="numeric", low=D("1"), high=D("1")),
    dict(kind="numeric", low=D("1"), high=D("0")),
    dict(kind="numeric", low=D("0")),                          # NULL high must not slip through the CHECK
    dict(kind="numeric", high=D("1")),
    dict(kind="string", num_bits=4, num_hashes=2, num_cohorts=1),
    dict(kind="string", num_bits=16, num_hashes=0, num_cohorts=1),
    dict(kind="string", num_bits=16, num_hashes=2, num_cohorts=0),
    dict(kind="string", num_hashes=2, num_cohorts=1),          # NULL num_bits
    dict(kind="string", num_bits=16, num_cohorts=1),
    dict(kind="string", num_bits=16, num_hashes=2),
], ids=repr)
def test_attribute_constraints(db, fields):
    dataset = DatasetFactory()
    refused(lambda: _attribute(dataset, **fields))


def test_valid_attributes_are_accepted_and_names_are_unique_per_dataset(db):
    dataset = DatasetFactory()
    accepted(lambda: _attribute(dataset, name="colour"))
    accepted(lambda: _attribute(dataset, kind="numeric", low=D("-5"), high=D("5")))
    accepted(lambda: _attribute(dataset, kind="string", num_bits=8, num_hashes=1, num_cohorts=1))
    accepted(lambda: _attribute(dataset, grid_start=D("0"), grid_stop=D("0")))
    accepted(lambda: _attribute(DatasetFactory(), name="colour"))
    refused(lambda: _attribute(dataset, name="colour"))


@pytest.fixture
def value(categorical):
    return contribute(categorical, ["green"], ceiling="0.5")[0]


def test_one_value_per_owner_and_attribute(value, categorical):
    refused(lambda: Value.objects.create(owner=value.owner, attribute=categorical, raw_sealed=b"x",
                                         input_sealed=b"y"))
    # the service path too: the same owner twice in one contribution
    refused(lambda: values_create_many(attribute=categorical, owners=[value.owner], raws=["red"], ceiling="1"))
    accepted(lambda: Value.objects.create(owner=value.owner, attribute=NumericAttributeFactory(), raw_sealed=b"x",
                                          input_sealed=b"y"))


@pytest.mark.parametrize("change", [
    dict(raw_sealed=None),                                   # the raw value without the input, or vice versa
    dict(input_sealed=None),
    dict(raw_sealed=None, input_sealed=None),                # deleted, but not marked as deleted
    dict(raw_deleted_at=timezone.now()),                     # marked deleted, but still there
], ids=repr)
def test_raw_value_and_input_live_and_die_together(value, change):
    refused(lambda: Value.objects.filter(id=value.id).update(**change))


def test_deleting_raw_value_and_input_together_is_accepted(value):
    accepted(lambda: Value.objects.filter(id=value.id).update(raw_sealed=None, input_sealed=None,
                                                              raw_deleted_at=timezone.now()))


def _chain_fields(eps, width=1):
    e, o, h = chains.encode(np.array(eps, dtype=np.int64), np.zeros((len(eps), width), dtype=np.int64))
    return dict(epsilons=e, outputs=o, head_output=h, length=len(eps), head=D(eps[-1]) / 10**6)


@pytest.mark.parametrize("change", [
    lambda f: dict(f, length=0),
    lambda f: dict(f, length=f["length"] + 1),                                    # blob shorter than the length
    lambda f: dict(f, epsilons=f["epsilons"][:-8]),
    lambda f: dict(f, epsilons=f["epsilons"] + b"\0" * 8),
    lambda f: dict(f, epsilons=f["epsilons"] + b"\0"),                             # not whole int64s
    lambda f: dict(f, outputs=f["outputs"][:-2]),
    lambda f: dict(f, outputs=f["outputs"] + b"\0\0"),
    lambda f: dict(f, head_output=b"\0\0\0\0"),                                    # width disagrees with outputs
    lambda f: dict(f, head=D("-0.1")),
], ids=["length 0", "length+1", "epsilons short", "epsilons long", "epsilons ragged", "outputs short",
        "outputs long", "head output width", "negative head"])
def test_chain_blobs_must_match_the_length(value, change):
    valid = _chain_fields([100_000, 200_000, 300_000, 400_000, 500_000])
    accepted(lambda: Chain.objects.filter(value=value).update(**valid))
    refused(lambda: Chain.objects.filter(value=value).update(**change(valid)))


def test_chain_with_wide_outputs_is_accepted(db):
    attribute = StringAttributeFactory(num_bits=16)
    value = contribute(attribute, ["hello"], ceiling="0.3")[0]
    chain = Chain.objects.get(value=value)
    assert len(chain.head_output) == 2 * 16 and len(chain.outputs) == 3 * 2 * 16 and chain.length == 3
    accepted(lambda: Chain.objects.filter(value=value).update(**_chain_fields([0, 1, 2], width=16)))
    refused(lambda: Chain.objects.filter(value=value).update(
        **dict(_chain_fields([0, 1, 2], width=8), head_output=b"\0" * 32)))


def test_one_chain_per_value(value):
    refused(lambda: Chain.objects.create(value=value, **_chain_fields([100_000])))
