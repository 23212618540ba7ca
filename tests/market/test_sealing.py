"""Values at rest (docs/quality-targets.md#reliability): sealed raw values and mechanism inputs, and what a database
dump shows."""
from __future__ import annotations

import os
import shutil
import subprocess
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection
from django.test import override_settings

from market.models import Value
from market.values import inputs as domain
from market.values import sealing
from market.values.sealing import SealBroken
from mechanisms.rappor import bloom_bits
from tests.factories import CategoricalAttributeFactory, NumericAttributeFactory, StringAttributeFactory, contribute

# ---------------------------------------------------------------------------------------------
# Raw values (Fernet)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", ["red", "73.918273645", "zebra-unique-7f3a", "ünïcødé ✓", "x" * 200])
def test_raw_values_round_trip_and_never_appear_in_the_token(raw):
    token = sealing.seal_raw(raw, owner_id=1, attribute_id=2)
    assert sealing.open_raw(token, owner_id=1, attribute_id=2) == raw
    assert raw.encode() not in token
    assert sealing.seal_raw(raw, owner_id=1, attribute_id=2) != token  # randomized encryption


def test_a_modified_raw_token_does_not_open():
    token = bytearray(sealing.seal_raw("secret", owner_id=1, attribute_id=2))
    for position in [0, 10, 30, len(token) // 2, len(token) - 1]:
        tampered = bytearray(token)
        tampered[position] ^= 0x04
        with pytest.raises(SealBroken):
            sealing.open_raw(bytes(tampered), owner_id=1, attribute_id=2)


def test_a_raw_token_does_not_open_under_another_key():
    token = sealing.seal_raw("secret", owner_id=1, attribute_id=2)
    with override_settings(LDP_VALUE_KEYS=["another-key"]), pytest.raises(SealBroken):
        sealing.open_raw(token, owner_id=1, attribute_id=2)


# ---------------------------------------------------------------------------------------------
# Mechanism inputs (AES single-block permutation with an authenticating header)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("payload_bytes", [1, 2, 6, 7, 12, 16, 64])
def test_inputs_round_trip(payload_bytes):
    rng = np.random.default_rng(payload_bytes)
    n = 50
    payload = rng.integers(0, 256, size=(n, payload_bytes), dtype=np.uint8)
    owners, attrs = np.arange(1, n + 1) * 7919, np.full(n, 42)
    sealed = sealing.seal_inputs(owners, attrs, payload)
    assert all(len(s) == 16 * sealing.blocks_for(payload_bytes) for s in sealed)
    np.testing.assert_array_equal(sealing.open_inputs(sealed, owners, attrs, payload_bytes), payload)
    assert sealing.open_inputs([], [], [], payload_bytes).shape == (0, payload_bytes)


def test_equal_inputs_of_different_values_seal_differently():
    payload = np.zeros((3, 2), dtype=np.uint8)
    sealed = sealing.seal_inputs([1, 2, 1], [5, 5, 6], payload)
    assert len(set(sealed)) == 3


@pytest.fixture
def sealed_pair():
    payload = np.array([[1, 0, 0, 0, 0, 0, 0, 9], [0, 0, 0, 0, 0, 0, 0, 3]], dtype=np.uint8)  # two blocks each
    return sealing.seal_inputs([11, 12], [5, 5], payload), payload


def test_inputs_moved_to_another_row_do_not_open(sealed_pair):
    sealed, payload = sealed_pair
    np.testing.assert_array_equal(sealing.open_inputs(sealed, [11, 12], [5, 5], 8), payload)
    with pytest.raises(SealBroken, match="2 sealed input"):
        sealing.open_inputs(sealed[::-1], [11, 12], [5, 5], 8)  # swapped between owners
    with pytest.raises(SealBroken):
        sealing.open_inputs(sealed[:1], [11], [6], 8)  # another attribute of the same owner
    with pytest.raises(SealBroken):
        sealing.open_inputs(sealed[:1], [12], [5], 8)  # another owner of the same attribute


def test_modified_or_rearranged_inputs_do_not_open(sealed_pair):
    sealed, _ = sealed_pair
    first = sealed[0]
    for position in range(len(first)):  # every byte of both blocks
        tampered = bytearray(first)
        tampered[position] ^= 0x80
        with pytest.raises(SealBroken):
            sealing.open_inputs([bytes(tampered)], [11], [5], 8)
    with pytest.raises(SealBroken):
        sealing.open_inputs([first[16:] + first[:16]], [11], [5], 8)  # blocks swapped within a value
    with pytest.raises(SealBroken):
        sealing.open_inputs([first[:16] + sealed[1][16:]], [11], [5], 8)  # a block spliced from another value
    with pytest.raises(SealBroken, match="wrong length"):
        sealing.open_inputs([first[:16]], [11], [5], 8)


def test_inputs_do_not_open_under_another_key(sealed_pair):
    sealed, _ = sealed_pair
    with override_settings(LDP_VALUE_KEYS=["another-key"]), pytest.raises(SealBroken):
        sealing.open_inputs(sealed, [11, 12], [5, 5], 8)


@pytest.mark.parametrize("num_bits", [8, 12, 16, 20, 64, 100])
def test_string_inputs_open_to_their_bloom_bits_for_any_filter_size(db, num_bits):
    """What chain extension opens must be exactly the Bloom bits the chain was made from."""
    attribute = StringAttributeFactory(num_bits=num_bits, num_hashes=3, num_cohorts=2)
    raws = ["alpha", "beta", "gamma", "delta", "epsilon-zeta"]
    values = contribute(attribute, raws, ceiling="0.2")
    rows = list(Value.objects.filter(id__in=[v.id for v in values]).order_by("id")
                .values_list("owner_id", "input_sealed", "cohort"))
    payload = sealing.open_inputs([bytes(s) for _, s, _ in rows], [o for o, _, _ in rows],
                                  [attribute.id] * len(rows), domain.payload_bytes(attribute))
    opened = domain.from_payload(attribute, payload)
    expected = bloom_bits(raws, [c for _, _, c in rows], num_bits, 3).astype(np.int64)
    np.testing.assert_array_equal(opened, expected)


# ---------------------------------------------------------------------------------------------
# Through the service: what the database holds
# ---------------------------------------------------------------------------------------------

RAW_STRINGS = ["zebra-unique-7f3a", "quokka-distinct-41c9"]
RAW_NUMBERS = ["73.918273645", "12.3456789012"]


def _contribute_distinctive_values():
    strings = StringAttributeFactory(name="favourite word")
    numbers = NumericAttributeFactory(name="weight", low=Decimal("0"), high=Decimal("100"))
    colours = CategoricalAttributeFactory(name="colour", labels=["crimson-label", "teal-label"])
    contribute(strings, RAW_STRINGS, prefix="dumpowner-s", ceiling="0.5")
    contribute(numbers, RAW_NUMBERS, prefix="dumpowner-n", ceiling="0.5")
    contribute(colours, ["crimson-label", "teal-label"], prefix="dumpowner-c", ceiling="0.5")
    return strings, numbers, colours


def _forms(raw: str) -> list[str]:
    """The raw text, and how it would look in a dump if stored unencrypted in a bytea/blob column."""
    b = raw.encode()
    return [raw, b.hex(), b.hex().upper(), raw.replace(".", "")]


def test_raw_values_are_stored_sealed_and_open_for_their_owner(db):
    strings, numbers, _ = _contribute_distinctive_values()
    for attribute, raws in [(strings, RAW_STRINGS), (numbers, RAW_NUMBERS)]:
        values = list(Value.objects.filter(attribute=attribute).order_by("id"))
        assert [sealing.raw_of(v) for v in values] == raws
        for value, raw in zip(values, raws):
            assert raw.encode() not in bytes(value.raw_sealed)


def test_a_raw_value_moved_to_another_row_does_not_open(db):
    strings, _, _ = _contribute_distinctive_values()
    first, second = Value.objects.filter(attribute=strings).order_by("id")[:2]
    with pytest.raises(sealing.SealBroken, match="another value"):
        sealing.open_raw(first.raw_sealed, owner_id=second.owner_id, attribute_id=second.attribute_id)


def _assert_dump_hides_raw_values(dump: str):
    # the dump is real: it holds the public catalog (labels, names) and the owners
    assert "crimson-label" in dump and "favourite word" in dump and "dumpowner-s-0" in dump
    for raw in RAW_STRINGS + RAW_NUMBERS:
        for form in _forms(raw):
            assert form not in dump, f"the dump reveals the raw value {raw!r} (as {form!r})"


@pytest.mark.django_db(transaction=True)
def test_a_sqlite_dump_does_not_reveal_raw_values():
    if connection.vendor != "sqlite":
        pytest.skip("the PostgreSQL variant below runs pg_dump")
    _contribute_distinctive_values()
    connection.ensure_connection()
    dump = "\n".join(connection.connection.iterdump())
    _assert_dump_hides_raw_values(dump)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_pg_dump_does_not_reveal_raw_values():
    if shutil.which("pg_dump") is None:
        pytest.skip("pg_dump is not installed")
    _contribute_distinctive_values()
    s = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": s.get("PASSWORD") or ""}
    cmd = ["pg_dump", "--no-owner", "-h", s.get("HOST") or "127.0.0.1", "-p", str(s.get("PORT") or 5432),
           "-U", s.get("USER") or "postgres", s["NAME"]]
    dump = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    _assert_dump_hides_raw_values(dump)
