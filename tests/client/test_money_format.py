"""The client's money formatter (client/ldpmarket_client/money.py) follows the service's rule exactly
(docs/money.md#how-amounts-are-shown): 2 places for whole cents, else 4, never rounded; it agrees with
``accounts.money.format`` on every case (tests/accounts/test_money_precision.py checks every stored amount)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from accounts.money.format import format_money, machine_amount
from ldpmarket_client.money import amount_decimal, format_amount_text, format_money_text

CASES = [  # what the API gives -> what people read
    ("15.0400", "15.04 EUR"), ("0.0128", "0.0128 EUR"), ("0.0080", "0.0080 EUR"), ("1.7550", "1.7550 EUR"),
    ("-1.7600", "-1.76 EUR"), ("0.0000", "0.00 EUR"), ("-0.0000", "0.00 EUR"), ("100.0000", "100.00 EUR"),
    ("0.0001", "0.0001 EUR"), (" 2.5000 ", "2.50 EUR"), ("15.0400000000000", "15.04 EUR"),
]


@pytest.mark.parametrize("api, human", CASES)
def test_people_read_the_exact_amount_with_its_currency(api, human, settings):
    settings.LDP_CURRENCY = "EUR"
    assert format_money_text(api, "EUR") == human
    assert format_money(Decimal(api.strip())) == human  # the service says the same
    assert format_money_text(machine_amount(Decimal(api.strip())), "EUR") == human


@pytest.mark.parametrize("bad", ["0.00005", "1.23456", "abc", "", "NaN", "Infinity", True, None, "1e400"])
def test_what_is_not_an_exact_amount_is_refused(bad):
    with pytest.raises(ValueError):
        format_money_text(bad, "EUR")


def test_numbers_of_every_type_the_api_or_a_program_may_pass():
    assert format_amount_text(Decimal("12.5")) == "12.50"
    assert format_amount_text(3) == "3.00"
    with pytest.raises(ValueError):
        format_amount_text(0.1)  # a float is never an exact amount (the API gives strings)
    assert amount_decimal("0.008") == Decimal("0.0080") and str(amount_decimal("-0")) == "0.0000"
