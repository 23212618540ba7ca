"""The database refuses malformed attributes, duplicate or half-deleted values, and inconsistent chain blocks,
points and slots."""
from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from market.chains import store
from market.models import Attribute, ChainBlock, ChainPoint, Value
from market.values import sealing
from market.values.services import values_create_many
from tests.factories import DatasetFactory, NumericAttributeFactory, StringAttributeFactory, contribute, stored_chains

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
], ids=["raw only", "input only", "both, unmarked", "marked, still there"])  # ids stable across xdist workers
def test_raw_value_and_input_live_and_die_together(value, change):
    refused(lambda: Value.objects.filter(id=value.id).update(**change))


def test_deleting_raw_value_and_input_together_is_accepted(value):
    accepted(lambda: Value.objects.filter(id=value.id).update(raw_sealed=None, input_sealed=None,
                                                              raw_deleted_at=timezone.now()))


def _block(value) -> ChainBlock:
    return ChainBlock.objects.get(id=value.block_id)


@pytest.mark.parametrize("change", [
    lambda b: dict(capacity=0, size=0, heads=b""),                                 # an empty block
    lambda b: dict(size=b.capacity + 1),                                           # more slots used than it has
], ids=["capacity 0", "size above capacity"])
def test_chain_block_size(value, change):
    block = _block(value)
    assert (block.index, block.size, block.capacity) == (0, 1, settings.LDP_CHAIN_BLOCK)
    accepted(lambda: ChainBlock.objects.filter(id=block.id).update(size=block.capacity))
    refused(lambda: ChainBlock.objects.filter(id=block.id).update(**change(block)))


@pytest.mark.parametrize("change", [
    lambda h: h[:-8],                                                              # one slot short
    lambda h: h + b"\0" * 8,                                                       # one slot too many
    lambda h: h + b"\0",                                                           # not whole int64s
    lambda h: b"",
], ids=["short", "long", "ragged", "empty"])
def test_chain_block_heads_length(value, change):
    """``heads`` is one little-endian int64 per slot: its length is 8 x capacity."""
    block = _block(value)
    heads = bytes(block.heads)
    assert len(heads) == 8 * block.capacity
    assert np.frombuffer(heads, dtype="<i8")[value.slot] == 500_000  # the head, at the ceiling 0.5
    accepted(lambda: ChainBlock.objects.filter(id=block.id).update(heads=bytes(8 * block.capacity)))
    refused(lambda: ChainBlock.objects.filter(id=block.id).update(heads=change(heads)))


def test_chain_block_index_unique_per_attribute(value, categorical):
    block = _block(value)
    refused(lambda: ChainBlock.objects.create(attribute=categorical, index=block.index, capacity=4, size=0,
                                              heads=bytes(32)))
    accepted(lambda: ChainBlock.objects.create(attribute=categorical, index=block.index + 1, capacity=4, size=0,
                                               heads=bytes(32)))


def _point(block: ChainBlock, epsilon: int) -> ChainPoint:
    present = store.bitmap(np.zeros(block.capacity, dtype=bool))
    out = np.full((block.capacity, 1), -1)
    return ChainPoint(block=block, attribute_id=block.attribute_id, epsilon=epsilon, present=present,
                      sealed=sealing.seal_points(out, attribute_id=block.attribute_id, block_id=block.id,
                                                 epsilon=epsilon, present=present))


def test_chain_point_unique(value):
    """A point row is inserted once per (block, epsilon): a second row at a stored epsilon is refused (two
    writers from the same state cannot fork a chain), another epsilon or another block is accepted."""
    block = _block(value)
    stored = sorted(ChainPoint.objects.filter(block=block).values_list("epsilon", flat=True))
    assert stored == [100_000, 200_000, 300_000, 400_000, 500_000]
    refused(lambda: ChainPoint.objects.bulk_create([_point(block, 300_000)]))
    refused(lambda: _point(block, 500_000).save())
    accepted(lambda: _point(block, 550_000).save())
    other = ChainBlock.objects.create(attribute_id=block.attribute_id, index=block.index + 1, capacity=8, size=0,
                                      heads=bytes(64))
    accepted(lambda: _point(other, 300_000).save())


@pytest.mark.parametrize("epsilon, ok", [(-1, False), (0, True), (700_000_000, True), (700_000_001, False)])
def test_chain_point_epsilon(value, epsilon, ok):
    """Micro-epsilons lie in [0, 700] (the epsilon fields' range), inserted or updated.  (A negative epsilon
    cannot even be sealed: the row's sealed bytes here are a stand-in.)"""
    block = _block(value)
    point = _point(block, 600_000)
    point.epsilon, point.sealed = epsilon, b"\0" * 28
    (accepted if ok else refused)(lambda: point.save())
    ChainPoint.objects.filter(block=block, epsilon=epsilon).delete()
    first = ChainPoint.objects.filter(block=block).order_by("epsilon").first()
    (accepted if ok else refused)(lambda: ChainPoint.objects.filter(id=first.id).update(epsilon=epsilon))


def test_value_block_slot_unique(value, categorical):
    """One value per slot: a second value in a taken (block, slot) is refused (one chain per value)."""
    other = contribute(categorical, ["red"], ceiling="0.5", prefix="other")[0]
    assert (other.block_id, other.slot) == (value.block_id, value.slot + 1)
    refused(lambda: Value.objects.filter(id=other.id).update(slot=value.slot))
    accepted(lambda: Value.objects.filter(id=other.id).update(slot=value.slot + 2))


@pytest.mark.parametrize("change", [dict(block=None), dict(slot=None)], ids=["slot without block",
                                                                           "block without slot"])
def test_value_block_and_slot_together(value, change):
    refused(lambda: Value.objects.filter(id=value.id).update(**change))
    accepted(lambda: Value.objects.filter(id=value.id).update(block=None, slot=None))  # a one-shot value's


def test_chain_with_wide_outputs_is_accepted(db):
    attribute = StringAttributeFactory(num_bits=16)
    value = contribute(attribute, ["hello"], ceiling="0.3")[0]
    eps, out = stored_chains(attribute)[value.id]
    assert eps.tolist() == [100_000, 200_000, 300_000] and out.shape == (3, 16)
    assert set(np.unique(out).tolist()) <= {0, 1}
    block = _block(value)
    assert len(bytes(block.heads)) == 8 * block.capacity
    sealed = ChainPoint.objects.filter(block=block).values_list("sealed", flat=True)
    assert {len(bytes(s)) for s in sealed} == {12 + 2 * 16 * block.capacity + 16}  # nonce, int16s, GCM tag
