"""Contributing values: validation per attribute kind, all-or-nothing writes, and what a new value holds."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import numpy as np
import pytest

from accounts.models import BudgetAccount, LedgerBlock, LedgerEntry
from accounts.services import BudgetError, Schedule
from market.models import ChainBlock, ChainPoint, Value
from market.values import inputs as domain
from market.values import sealing
from market.values.inputs import InvalidValue
from market.values.services import value_create, values_create_many
from tests.factories import (
    BinaryAttributeFactory,
    BuyerFactory,
    CategoricalAttributeFactory,
    NumericAttributeFactory,
    OwnerFactory,
    StringAttributeFactory,
    chain_head,
    make_owners,
)

T0 = datetime(2035, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("factory,raw,message", [
    (CategoricalAttributeFactory, "purple", "not one of the choices: red, green, blue"),
    (CategoricalAttributeFactory, 1, "not one of the choices"),
    (BinaryAttributeFactory, "maybe", "not one of the choices: no, yes"),
    (NumericAttributeFactory, "heavy", "must be a number"),
    (NumericAttributeFactory, "100.0001", "between 0 and 100"),
    (NumericAttributeFactory, "-1", "between 0 and 100"),
    (NumericAttributeFactory, "nan", "between 0 and 100"),
    (NumericAttributeFactory, "inf", "between 0 and 100"),
    (StringAttributeFactory, "", "non-empty text of at most 200"),
    (StringAttributeFactory, "x" * 201, "non-empty text of at most 200"),
    (StringAttributeFactory, 42, "non-empty text"),
])
def test_invalid_raw_values_are_refused_with_a_clear_message_and_nothing_is_written(db, factory, raw, message):
    attribute = factory()
    owners = make_owners(2, "v")
    counts = [M.objects.count() for M in (Value, BudgetAccount, ChainBlock, ChainPoint, LedgerEntry, LedgerBlock)]
    valid = {"categorical": "red", "binary": "yes", "numeric": "50", "string": "ok"}[attribute.kind]
    with pytest.raises(InvalidValue, match=message):
        values_create_many(attribute=attribute, owners=owners, raws=[valid, raw], ceiling="1")
    assert [M.objects.count()
            for M in (Value, BudgetAccount, ChainBlock, ChainPoint, LedgerEntry, LedgerBlock)] == counts


@pytest.mark.parametrize("raw,index", [("no", 0), ("yes", 1), ("YES", 1), ("0", 0), ("1", 1), (True, 1),
                                       (False, 0), (0, 0), (1, 1), ("true", 1), ("False", 0)])
def test_binary_spellings(db, raw, index):
    attribute = BinaryAttributeFactory()
    inputs, payload, _ = domain.to_inputs(attribute, [raw])
    assert inputs.tolist() == [[index]]
    np.testing.assert_array_equal(domain.from_payload(attribute, payload), inputs)


def test_numeric_bounds_map_to_certain_bits(db):
    attribute = NumericAttributeFactory(low=Decimal("-5"), high=Decimal("5"))
    inputs, _, _ = domain.to_inputs(attribute, ["-5", "5", -5, 5.0] * 50)
    assert inputs[:, 0].tolist() == [0, 1, 0, 1] * 50


def test_the_service_refuses_contributions_that_break_the_rules(db):
    attribute = CategoricalAttributeFactory()
    owner = OwnerFactory()
    with pytest.raises(BudgetError, match="either a fixed ceiling or a schedule"):
        values_create_many(attribute=attribute, owners=[owner], raws=["red"])
    with pytest.raises(BudgetError, match="either a fixed ceiling or a schedule"):
        values_create_many(attribute=attribute, owners=[owner], raws=["red"], ceiling="1",
                           schedule=Schedule(start="0", cap="1", start_at=T0, end_at=T0 + timedelta(days=1)))
    with pytest.raises(BudgetError, match="Only owners"):
        values_create_many(attribute=attribute, owners=[BuyerFactory()], raws=["red"], ceiling="1")
    with pytest.raises(ValueError, match="same length"):
        values_create_many(attribute=attribute, owners=[owner], raws=["red", "blue"], ceiling="1")
    with pytest.raises(ValueError, match="finite"):
        values_create_many(attribute=attribute, owners=[owner], raws=["red"], ceiling="NaN")
    value_create(owner=owner, attribute=attribute, raw="red", ceiling="1")
    with pytest.raises(BudgetError, match="already contributed"):
        value_create(owner=owner, attribute=attribute, raw="blue", ceiling="1")
    assert Value.objects.filter(owner=owner).count() == 1


def test_a_new_value_holds_sealed_raw_and_input_a_budget_a_chain_and_one_ledger_entry(db):
    attribute = CategoricalAttributeFactory()
    owner = OwnerFactory()
    value = value_create(owner=owner, attribute=attribute, raw="blue", ceiling="0.25")
    value.refresh_from_db()
    assert sealing.raw_of(value) == "blue"
    payload = sealing.open_inputs([bytes(value.input_sealed)], [owner.id], [attribute.id],
                                  domain.payload_bytes(attribute))
    assert domain.from_payload(attribute, payload).tolist() == [[2]]
    budget = BudgetAccount.objects.get(value=value)
    assert (budget.ceiling, budget.loss, budget.paused, budget.scheduled) == (Decimal("0.25"), 0, False, False)
    assert chain_head(value) == (Decimal("0.2"), 2)
    [entry] = LedgerEntry.objects.filter(value=value)
    assert (entry.kind, entry.ceiling, entry.chain_loss_after, entry.epsilon) == ("ceiling", Decimal("0.25"), 0, None)
