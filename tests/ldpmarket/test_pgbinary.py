"""``ldpmarket.pgbinary``: binary COPY rows built from numpy read back by PostgreSQL exactly as meant."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection

from accounts.ledger.hashchain import micros
from ldpmarket import pgbinary
from ldpmarket.pgbinary import Column

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _read_back(table: str, columns: dict[str, Column], n: int, ddl: str) -> list[tuple]:
    with connection.cursor() as wrapper:
        wrapper.execute(f"CREATE TEMP TABLE {table} ({ddl})")
        pgbinary.copy_columns(wrapper.cursor, table, columns, n)
        wrapper.execute(f"SELECT * FROM {table} ORDER BY id")
        rows = wrapper.fetchall()
        wrapper.execute(f"DROP TABLE {table}")
    return rows


def test_numeric_fixed_round_trips_exact_decimals_of_any_sign_and_scale():
    units = np.array([0, 1, -1, 9999, 10_000, -123_456_789, 35, 10**15 - 1, -(10**15 - 1), 700_000_000])
    for scale in (0, 4, 6):
        rows = _read_back("ldp_num", {"id": Column.int8(np.arange(units.size)),
                                      "x": Column.numeric(units, scale)}, units.size,
                          "id bigint, x numeric")
        assert [r[1] for r in rows] == [Decimal(int(u)).scaleb(-scale) for u in units.tolist()]


def test_nulls_texts_and_timestamps_in_one_copy():
    n = 7
    now = datetime(2026, 11, 22, 4, 30, 15, 123456, tzinfo=timezone.utc)
    stamps = np.array([micros(now + timedelta(days=d, microseconds=d)) for d in range(n)])
    null_eps = np.array([False, True, False, True, False, False, True])
    null_at = np.array([True, False, False, False, True, False, False])
    codes = np.array([0, 1, 2, 1, 0, 2, 2])
    choices = ["purchase", "platform fee", ""]
    rows = _read_back("ldp_mixed", {
        "id": Column.int8(np.arange(n)),
        "eps": Column.numeric(np.arange(n) * 50_000, 6, null=null_eps),
        "memo": Column.text(codes, choices),
        "at": Column.timestamp(stamps, null=null_at),
        "k": Column.int4(np.arange(n) - 3),
    }, n, "id bigint, eps numeric(12, 6), memo text, at timestamptz, k integer")
    assert [r[0] for r in rows] == list(range(n))
    for i, (_, eps, memo, at, k) in enumerate(rows):
        assert eps == (None if null_eps[i] else Decimal(i * 50_000).scaleb(-6))
        assert memo == choices[codes[i]]
        assert at == (None if null_at[i] else now + timedelta(days=i, microseconds=i))
        assert k == i - 3


def test_numeric_refuses_values_beyond_its_digits():
    with pytest.raises(ValueError):
        pgbinary.numeric_fixed(np.array([10_000 * 10**6]), 6, int_digits=1)
