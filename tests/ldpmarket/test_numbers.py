"""Numbers from requests (``ldpmarket.numbers``, ``ldpmarket.fields``; docs/errors.md#numbers-in-requests): plain ASCII
decimals only, in one place, for every interface (paths, query parameters, JSON strings, forms)."""
from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from rest_framework import serializers

from accounts.epsilon import parse
from accounts.money import services
from ldpmarket.fields import (
    IdConverter,
    StrictDecimalFormField,
    StrictIntegerField,
    StrictIntegerFormField,
    parse_when,
)
from ldpmarket.numbers import (
    BIGINT_MAX,
    NumberError,
    as_id,
    is_ascii_int,
    parse_ascii_decimal,
    parse_ascii_int,
)
from ldpmarket.problems import EpsilonError, InvalidValue, MoneyError
from market.values.inputs import _number

#: What Python's int(), Decimal() or float() read, or str.isdigit() accepts, that is no plain ASCII number.
LENIENT = ["1_000", "+5", " 5", "5 ", "\u0661\u0660", "\u00b2", "\uff15", "1e3", "0x10", "5.", "", "-", ".",
           "\u0665.\u0665", "\u00a05", "5\n", "NaN", "Infinity", "1.5.1"]


@pytest.mark.parametrize("text", LENIENT)
def test_lenient_numbers_are_no_numbers(text):
    assert not is_ascii_int(text)
    with pytest.raises(NumberError):
        parse_ascii_int(text)
    with pytest.raises(NumberError):
        parse_ascii_decimal(text, signed=True)
    assert as_id(text) is None


def test_plain_numbers():
    assert parse_ascii_int("0") == 0 and parse_ascii_int("007") == 7
    assert parse_ascii_int(str(BIGINT_MAX)) == BIGINT_MAX
    with pytest.raises(NumberError):
        parse_ascii_int(str(BIGINT_MAX + 1))
    with pytest.raises(NumberError):
        parse_ascii_int("9" * 100_000)  # refused unread (int() would refuse it past 4300 digits, slowly)
    assert parse_ascii_int("0" * 100_000 + "12") == 12
    with pytest.raises(NumberError):
        parse_ascii_int("3", min=4)
    assert [as_id(x) for x in ("1", "0", str(BIGINT_MAX), str(BIGINT_MAX + 1), "-1")] == [1, None, BIGINT_MAX, None,
                                                                                         None]
    assert parse_ascii_decimal("12") == 12 and parse_ascii_decimal("0.5") == Decimal("0.5")
    assert parse_ascii_decimal(".5") == Decimal("0.5")
    assert parse_ascii_decimal("-0.5", signed=True) == Decimal("-0.5")
    with pytest.raises(NumberError):
        parse_ascii_decimal("-0.5")  # unsigned
    with pytest.raises(NumberError):
        parse_ascii_decimal("1" * 1000)
    with pytest.raises(NumberError):
        parse_ascii_decimal(5)  # text only


@pytest.mark.parametrize("text", ["1_0", "+1", "\u0661", "1e0", "1 0", "\u0661.\u0665", "0x1", "1."])
def test_epsilons_amounts_and_raw_values_take_plain_decimals(text):
    with pytest.raises(EpsilonError):
        parse(text)
    with pytest.raises(MoneyError):
        services.parse_amount(text)
    with pytest.raises(InvalidValue):
        _number(text, "a weight")


def test_epsilons_amounts_and_values_still_read_plain_decimals_and_json_numbers():
    assert parse("0.5") == Decimal("0.5") and parse(Decimal("1E-1")) == Decimal("0.1") and parse(2) == 2
    with pytest.raises(EpsilonError, match="greater than 0"):
        parse("-1", allow_zero=False)  # the sign is read, for its own message
    assert services.parse_amount(" 100.50 ") == Decimal("100.50") and services.parse_amount(Decimal("1E+2")) == 100
    with pytest.raises(MoneyError, match="positive"):
        services.parse_amount("-5")
    assert _number("-0.25", "a weight") == -0.25 and _number(0.5, "a weight") == 0.5


def test_the_id_converter():
    converter = IdConverter()
    assert converter.to_python("42") == 42 and converter.to_url(42) == "42"
    for bad in ("0", str(BIGINT_MAX + 1)):
        with pytest.raises(ValueError):
            converter.to_python(bad)
    with pytest.raises(ValueError):
        converter.to_url(0)


@pytest.mark.urls("ldpmarket.urls")
def test_api_detail_routes_take_ids_only():
    assert resolve("/api/v1/purchases/12/").kwargs == {"pk": 12}
    assert resolve(f"/api/v1/owner/values/{BIGINT_MAX}/chain/").kwargs == {"pk": BIGINT_MAX}
    for bad in ("abc", "+5", "\u0661", "1e3", "0", str(BIGINT_MAX + 1), "1_0", "%00", "null"):
        for path in (f"/api/v1/purchases/{bad}/", f"/api/v1/owner/values/{bad}/", f"/api/v1/datasets/{bad}/",
                     f"/api/v1/surveys/{bad}/", f"/api/v1/owner/values/{bad}/chain/"):
            with pytest.raises(Resolver404):
                resolve(path)
    with pytest.raises(NoReverseMatch):
        reverse("api:purchase-detail", kwargs={"pk": 0})


def test_the_rest_framework_integer_field():
    field = StrictIntegerField(min_value=1)
    assert field.run_validation("12") == 12 and field.run_validation(12) == 12
    for bad in ["1_0", "+1", "\u0661", " 1", "1.0", "1e0", True, 1.0, Decimal(1), "", str(BIGINT_MAX + 1),
                "9" * 2000, "0", 0]:
        with pytest.raises(serializers.ValidationError):
            field.run_validation(bad)


def test_the_form_fields():
    integer = StrictIntegerFormField(min_value=1)
    assert integer.clean(" 12 ") == 12  # a person typed it
    for bad in ["1_0", "+1", "\u0661", "1.0", "1e0"]:
        with pytest.raises(ValidationError):
            integer.clean(bad)
    assert StrictIntegerFormField(signed=True, required=False).clean("-3") == -3
    query = StrictIntegerFormField(strip=False)
    with pytest.raises(ValidationError):
        query.clean(" 1")
    decimal = StrictDecimalFormField(max_digits=10, decimal_places=2)
    assert decimal.clean(" 12.50 ") == Decimal("12.50")
    for bad in ["1_0", "+1", "\u0661", "1e2", "-1", "NaN"]:
        with pytest.raises(ValidationError):
            decimal.clean(bad)
    assert StrictDecimalFormField(signed=True).clean("-1.5") == Decimal("-1.5")


def test_times_are_ascii_iso_8601_compared_in_utc():
    assert parse_when("2020-01-01") == datetime(2020, 1, 1, tzinfo=UTC)
    assert parse_when("2000-01-01T00:00:00+16:00") == datetime(1999, 12, 31, 8, tzinfo=UTC)
    assert parse_when("2759-11-21T18:02:46.4+16:50").tzinfo == UTC
    for bad in ["9999-12-31T23:59:59-10:00", "0001-01-01T00:00:00+01:00", "\u0662\u0660\u0662\u0660-01-01",
                "2020-13-01", "yesterday", "2020-02-30"]:
        with pytest.raises(ValueError):
            parse_when(bad)
