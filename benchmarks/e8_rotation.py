"""E8: value-key rotation (docs/security.md#rotating-the-value-key): rows sealed again per second.

``E8_N`` values (default 10^5) of one categorical attribute (m = 5), each with its own owner, contributed through
``market.values.services.values_create_many`` (real raw values and inputs, chains at 0.1 .. 0.5 in blocks of
``LDP_CHAIN_BLOCK``), and ``E8_PURCHASES`` purchases (default 2) of every value (their released chunks), all under
key A.  Then the ring becomes ``B, A`` and ``market.values.rotation.rotate`` seals every row again under B, the
work ``manage.py rotate_value_key`` does: timed per table (values: a Fernet token and an input each; chain points:
one AES-GCM row per block and epsilon; purchase chunks: one AES-GCM row per 10^4 released outputs).  The rate to
set beside is E2's (chain extension, values per second: ``benchmarks/e2_extension.py``): a rotation walks every
value once, an extension grows each one.

Uses a dedicated database ``ldpbench_e8`` (created, migrated and dropped) on the server of ``E8_POSTGRES_URL`` or
``DATABASE_URL`` (default postgresql://postgres@127.0.0.1:5432/).

Run: ``python -m benchmarks e8``; figures go to ``benchmarks/results/e8_rotation.json``.
Quicker: ``E8_N=2e4 python -m benchmarks e8``.
"""
from __future__ import annotations

import os
import time
from decimal import Decimal

from . import _common
from ._postgres import admin, funded_buyer, server_url, setup_django, with_db

NAME = "e8_rotation"
DB_NAME = "ldpbench_e8"
N = int(float(os.environ.get("E8_N", "1e5")))
PURCHASES = int(os.environ.get("E8_PURCHASES", "2"))
BATCH = 10_000
KEY_B = "bench-R4tN8bX2cZ7lK5jH1gF9dS6aQ3wE0rT-new-value"


def _setup() -> int:
    from accounts.models import User
    from market.models import Attribute, Dataset
    from market.purchases import execution as purchases
    from market.values import services

    dataset = Dataset.objects.create(title=f"E8 benchmark {N}")
    attribute = Attribute.objects.create(dataset=dataset, name="category", kind=Attribute.Kind.CATEGORICAL,
                                         labels=[f"c{i}" for i in range(5)], grid_start=Decimal("0.1"),
                                         grid_step=Decimal("0.1"))
    labels = attribute.labels
    for lo in range(0, N, BATCH):
        owners = User.objects.bulk_create([User(username=f"e8-owner-{i}", role=User.Role.OWNER, password="!")
                                           for i in range(lo, min(lo + BATCH, N))])
        services.values_create_many(attribute=attribute, owners=owners,
                                    raws=[labels[(o.id * 7) % 5] for o in owners], ceiling="0.5")
    for k in range(PURCHASES):
        buyer = funded_buyer(f"e8-buyer-{k}", Decimal(10) ** 9)
        p, _ = purchases.purchase_claim(buyer=buyer, attribute=attribute, epsilon=f"0.{2 + k}5", cohort=None,
                                        idempotency_key=f"e8-{k}")
        purchases.purchase_execute(purchase_id=p.id)
    return attribute.id


def main() -> None:
    url = server_url("E8_POSTGRES_URL")
    admin(url, f"DROP DATABASE IF EXISTS {DB_NAME}")
    admin(url, f"CREATE DATABASE {DB_NAME}")
    try:
        setup_django(with_db(url, DB_NAME), DB_NAME)
        from django.conf import settings

        from market.values import rotation

        started = time.perf_counter()
        _setup()
        setup_seconds = time.perf_counter() - started
        old = settings.LDP_VALUE_KEYS[0]
        settings.LDP_VALUE_KEYS, settings.LDP_VALUE_KEY = [KEY_B, old], KEY_B
        before = rotation.remaining()
        done = rotation.rotate()
        after = rotation.remaining()
        assert all(t["older"] == 0 and t["retired"] == 0 for t in after.values()), after
        rows = [[table, before[table]["older"], done.rotated[table], f"{done.seconds[table]:.2f}",
                 f"{done.rate(table):,.0f}"] for table in rotation.TABLES]
        total = sum(done.rotated.values())
        seconds = sum(done.seconds.values())
        _common.print_table(["table", "under A", "sealed again", "seconds", "rows/s"], rows,
                            title=f"E8: rotating the value key, {N} values ({setup_seconds:.0f} s set-up)")
        print(f"all tables: {total} rows in {seconds:.2f} s ({total / seconds:,.0f} rows/s); values: "
              f"{done.rate('values'):,.0f}/s")
        path = _common.write_results(NAME, {
            "n": N, "purchases": PURCHASES, "chain_block": int(settings.LDP_CHAIN_BLOCK),
            "tables": {table: {"rows": done.rotated[table], "seconds": round(done.seconds[table], 3),
                               "rows_per_second": round(done.rate(table), 1)} for table in rotation.TABLES},
            "total_rows": total, "total_seconds": round(seconds, 3)})
        print(f"results: {path}")
    finally:
        from django.db import connections

        connections.close_all()
        admin(url, f"DROP DATABASE IF EXISTS {DB_NAME}")
