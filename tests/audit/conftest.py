"""Fixtures for the audit console tests: a small market built through the services, and tampering helpers."""
from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import User
from accounts.money.services import earnings_settle
from accounts.roles import grant_role
from accounts.services import Schedule, budget_set_ceiling, budget_set_paused
from market.models import Attribute, Purchase, Value
from market.purchases.execution import purchase_claim, purchase_execute
from market.purchases.pricing import DEFAULT_POLICY
from market.values.services import value_delete_raw
from tests.factories import BuyerFactory, CategoricalAttributeFactory, OwnerFactory, StaffFactory, contribute, fund

LEDGER_TABLES = ["accounts_ledgerevent", "accounts_ledgerrelease", "accounts_ledgerblock", "accounts_moneyentry",
                 "accounts_ledgercheckpoint", "accounts_ledgercheckpointleaf", "accounts_settlement"]


@contextlib.contextmanager
def tampering():
    """Let a test write to the append-only tables directly: on PostgreSQL, disable their user triggers meanwhile.

    ``ALTER TABLE`` is transactional in PostgreSQL: inside the test's transaction
    it is rolled back with everything else even if the test fails.
    """
    pg = connection.vendor == "postgresql"

    def alter(action: str) -> None:
        with connection.cursor() as cur:
            # Deferred foreign-key checks still pending in this transaction must fire before ALTER TABLE.
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for t in LEDGER_TABLES:
                cur.execute(f"ALTER TABLE {t} {action} TRIGGER USER")
            cur.execute("SET CONSTRAINTS ALL DEFERRED")

    if pg:
        alter("DISABLE")
    try:
        yield
    finally:
        if pg:
            alter("ENABLE")


def sql(statement: str, params=None) -> int:
    with connection.cursor() as cur:
        cur.execute(statement, params or [])
        return cur.rowcount




def buy(buyer, attribute, epsilon, rng) -> Purchase:
    purchase, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon=Decimal(str(epsilon)), cohort=None,
                                 idempotency_key=uuid.uuid4().hex)
    return purchase_execute(purchase_id=purchase.id, rng=rng)


@dataclass
class Market:
    attribute: Attribute
    fixed: list[Value]
    scheduled: list[Value]
    buyer: User
    purchases: list[Purchase]


@pytest.fixture
def market(db) -> Market:
    """An attribute (m = 3) with 24 fixed-ceiling and 12 scheduled values, two purchases (one an upgrade; the
    owners' earnings of the first settled, of the second pending), a pause, a lowered ceiling and a deleted raw
    value: every kind of ledger entry but one-shot releases."""
    rng = np.random.default_rng(7)
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    raws = ["red", "green", "blue"] * 8
    fixed = contribute(attribute, raws, prefix=f"fx{attribute.id}", ceiling="2", rng=rng)
    now = timezone.now().replace(microsecond=0)
    schedule = Schedule(start=Decimal("0.5"), cap=Decimal("3"), start_at=now - timedelta(days=1),
                        end_at=now + timedelta(days=9), shape="steps", steps=10)
    scheduled = contribute(attribute, ["red", "green", "blue"] * 4, prefix=f"sc{attribute.id}", schedule=schedule,
                           rng=rng)
    buyer = BuyerFactory()
    fund(buyer, "50")
    budget_set_paused(value_id=fixed[0].id, paused=True)
    purchases = [buy(buyer, attribute, "0.5", rng)]
    earnings_settle(shard=attribute.id)  # the first purchase's earnings settled, the second's still pending
    budget_set_ceiling(value_id=fixed[1].id, ceiling="0.7")
    purchases.append(buy(buyer, attribute, "1.0", rng))  # an upgrade for most values
    value_delete_raw(value_id=fixed[2].id)
    budget_set_paused(value_id=fixed[0].id, paused=False)
    return Market(attribute, fixed, scheduled, buyer, purchases)


@pytest.fixture
def staff(db) -> User:
    return grant_role(StaffFactory(), User.Role.STAFF)


@pytest.fixture
def superuser(db) -> User:
    return User.objects.create_superuser("root", "root@example.org", "pw-root-123", role=User.Role.STAFF)


@pytest.fixture
def owner(db) -> User:
    return OwnerFactory()


@pytest.fixture
def policy_witness(db, tmp_path, settings):
    """A witness of the log's policy, made as a deployment makes it: a line of the LDP_WITNESS_POLICY file, read by
    the service (``accounts.ledger.witnesses.sync_witnesses``).  Nothing listens at its URL."""
    from accounts.ledger.witnesses import sync_witnesses
    from accounts.models import LedgerWitness
    from ldpmarket_client.tlog.note import COSIGNATURE_V1, Signer

    witness = Signer.generate("witness.test/w1", COSIGNATURE_V1)
    policy = tmp_path / "policy.txt"
    policy.write_text(f"witness w1 {witness.verifier.vkey} http://127.0.0.1:9/\nquorum w1\n")
    settings.LDP_WITNESS_POLICY = str(policy)
    (witness_id,) = sync_witnesses()
    return LedgerWitness.objects.get(pk=witness_id)
