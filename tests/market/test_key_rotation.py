"""Value-key rotation, online (issue 30 item 1, docs/security.md#rotating-the-value-key).

The ring (``LDP_VALUE_KEYS``): key ids, mixed keys in one batch, a row under a key no longer in the ring; the start-up
rules; and the runbook run on PostgreSQL while purchases and an extension run in other threads: afterwards every
row is under the new key, the old key leaves the ring, the service still opens everything, the audit passes and the
ledger's checkpoints still verify.
"""
from __future__ import annotations

import random
import secrets
import time
from decimal import Decimal

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.ledger.checkpoints import checkpoint_make
from accounts.models import LedgerCheckpoint, MoneyAccount, MoneyEntry, User
from accounts.services import budget_set_ceiling
from audit.budget_audit import audit_budgets
from ldpmarket.keys import value_key_id
from market.chains.extension import chains_extend
from market.models import Attribute, ChainPoint, Dataset, Purchase, PurchaseChunk, Value
from market.purchases import execution as purchases
from market.selectors import all_outputs
from market.values import owner_rows, rotation, sealing, services
from market.values.sealing import SealBroken
from tests.factories import stored_chains
from tests.market.test_purchase_concurrency import run_concurrently

KEY_B = "tst-n3wV4lu3-K8mQ2xZ9wL4kR8tB1nC6vJ3hG5dF0"
KEY_C = "tst-th1rdV4l-P2oI9uY7tR5eW3qA1sD4fG6hJ8kL0"


def use_ring(settings, *keys: str) -> None:
    """``LDP_VALUE_KEYS`` as the settings set it, with ``LDP_VALUE_KEY`` its first key."""
    settings.LDP_VALUE_KEYS, settings.LDP_VALUE_KEY = list(keys), keys[0]


# ------------------------------------------------------------------------------------------------- the ring

def test_a_key_id_is_stable_distinct_and_a_signed_int32(settings):
    a = settings.LDP_VALUE_KEYS[0]
    assert value_key_id(a) == value_key_id(a) != value_key_id(KEY_B)
    assert -2 ** 31 <= value_key_id(a) < 2 ** 31
    use_ring(settings, KEY_B, a)
    assert sealing.newest_key_id() == value_key_id(KEY_B) and sealing.ring_ids()[1] == value_key_id(a)


def test_a_batch_sealed_under_two_keys_opens_with_one_call_per_key(settings):
    a = settings.LDP_VALUE_KEYS[0]
    rng = np.random.default_rng(3)
    payload = rng.integers(0, 256, size=(40, 7), dtype=np.uint8)
    owners, attrs = np.arange(1, 41), np.full(40, 9)
    old = sealing.seal_inputs(owners[:20], attrs[:20], payload[:20])
    use_ring(settings, KEY_B, a)
    new = sealing.seal_inputs(owners[20:], attrs[20:], payload[20:])
    order = rng.permutation(40)  # interleaved
    sealed = [(old + new)[i] for i in order]
    key_ids = np.array([value_key_id(a) if i < 20 else value_key_id(KEY_B) for i in order])
    opened = sealing.open_inputs(sealed, owners[order], attrs[order], 7, key_ids)
    np.testing.assert_array_equal(opened, payload[order])
    assert sealing.key_groups(np.full(5, 7), 5) == [(7, None)]  # one key: the whole batch in one call
    with pytest.raises(SealBroken):  # a row opened with another key of the ring does not open
        sealing.open_inputs(sealed, owners[order], attrs[order], 7, key_ids[::-1])
    again = sealing.reseal_inputs(sealed, owners[order], attrs[order], key_ids)
    np.testing.assert_array_equal(sealing.open_inputs(again, owners[order], attrs[order], 7, value_key_id(KEY_B)),
                                  payload[order])


def test_a_row_under_a_key_not_in_the_ring_fails_naming_the_key(settings):
    a = settings.LDP_VALUE_KEYS[0]
    raw = sealing.seal_raw("red", owner_id=1, attribute_id=2)
    inputs = sealing.seal_inputs([1], [2], np.ones((1, 3), dtype=np.uint8))
    point = sealing.seal_points(np.zeros((4, 1)), attribute_id=2, block_id=3, epsilon=100_000, present=b"\x0f")
    chunk = sealing.seal_released(b"\x01\x00", purchase_id=5, seq=0, value_ids=b"\x01" + b"\x00" * 7)
    use_ring(settings, KEY_B)
    gone = value_key_id(a)
    with pytest.raises(SealBroken, match=f"value key {gone}, which is not in LDP_VALUE_KEYS"):
        sealing.open_raw(raw, owner_id=1, attribute_id=2, key_id=gone)
    with pytest.raises(SealBroken, match="not in LDP_VALUE_KEYS"):
        sealing.open_inputs(inputs, [1], [2], 3, [gone])
    with pytest.raises(SealBroken, match="block #3 is sealed under the value key"):
        sealing.open_points(point, attribute_id=2, block_id=3, epsilon=100_000, present=b"\x0f", width=1, key_id=gone)
    with pytest.raises(SealBroken, match="purchase #5 are sealed under the value key"):
        sealing.open_released(chunk, purchase_id=5, seq=0, value_ids=b"\x01" + b"\x00" * 7, key_id=gone)
    use_ring(settings, KEY_B, a)  # back in the ring: it opens again
    assert sealing.open_raw(raw, owner_id=1, attribute_id=2, key_id=gone) == "red"


def _start(env: dict):
    from tests.ldpmarket.test_deploy import production_env, run_python  # noqa: PLC0415 -- its subprocess set-up

    return run_python("import django; django.setup()\nfrom django.conf import settings\n"
                      "print(len(settings.LDP_VALUE_KEYS), len(settings.SECRET_KEY_FALLBACKS))\n",
                      production_env(**env))


def test_start_up_refuses_a_ring_without_the_ledger_keys_pinned_and_weak_fallbacks():
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    refused = _start({"LDP_VALUE_KEY": None, "LDP_VALUE_KEYS": f"{new},{old}"})
    assert refused.returncode != 0 and "LDP_LEDGER_SIGNING_KEYS or LDP_LEDGER_BLINDING_KEY is not set" in \
        refused.stderr.strip().splitlines()[-1]
    assert old not in refused.stderr and new not in refused.stderr
    first = _start({"LDP_VALUE_KEY": None, "LDP_VALUE_KEYS": f"{old},{new}", "LDP_LEDGER_SIGNING_KEYS": old,
                    "LDP_LEDGER_BLINDING_KEY": old})  # the runbook's step 1: the new key opens only
    assert first.returncode == 0 and first.stdout.split() == ["2", "0"], first.stderr[-2000:]
    pinned = _start({"LDP_VALUE_KEY": None, "LDP_VALUE_KEYS": f"{new},{old}", "LDP_LEDGER_SIGNING_KEYS": old,
                     "LDP_LEDGER_BLINDING_KEY": old,
                     "DJANGO_SECRET_KEY_FALLBACKS": secrets.token_urlsafe(50)})
    assert pinned.returncode == 0 and pinned.stdout.split() == ["2", "1"], pinned.stderr[-2000:]
    after = _start({"LDP_VALUE_KEY": None, "LDP_VALUE_KEYS": new, "LDP_LEDGER_SIGNING_KEYS": old,
                    "LDP_LEDGER_BLINDING_KEY": old})  # the rotation done: the ledger keeps the old key
    assert after.returncode == 0, after.stderr[-2000:]
    same = _start({"LDP_VALUE_KEY": None, "LDP_VALUE_KEYS": new, "LDP_LEDGER_BLINDING_KEY": new})
    assert same.returncode != 0 and "the same as" in same.stderr.strip().splitlines()[-1]
    weak = _start({"DJANGO_SECRET_KEY_FALLBACKS": "short-old-secret"})
    assert weak.returncode != 0 and "DJANGO_SECRET_KEY_FALLBACKS[0]" in weak.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------------------------------- the runbook, online

CEILINGS = ["0.3", "0.5", "1.0"]
EPSILONS = ["0.2", "0.4", "0.25", "0.6"]


def _buy(buyer, attribute, eps: str, key: str) -> Purchase:
    p, _ = purchases.purchase_claim(buyer=buyer, attribute=attribute, epsilon=eps, cohort=None, idempotency_key=key)
    return purchases.purchase_execute(purchase_id=p.id)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_rotation_online_with_purchases_in_flight_then_the_old_key_leaves_the_ring(settings):
    settings.LDP_CHAIN_BLOCK = 16
    old = settings.LDP_VALUE_KEYS[0]
    dataset = Dataset.objects.create(title="rotation")
    attribute = Attribute.objects.create(dataset=dataset, name="q", kind="categorical", labels=["a", "b", "c", "d"],
                                         grid_start=Decimal("0.1"), grid_step=Decimal("0.1"))
    rnd = random.Random(11)
    raws = {}
    for i, ceiling in enumerate(CEILINGS):
        owners = [User.objects.create(username=f"owner-{i}-{j}", role="owner") for j in range(20)]
        picked = [rnd.choice("abcd") for _ in owners]
        for v, r in zip(services.values_create_many(attribute=attribute, owners=owners, raws=picked,
                                                    ceiling=ceiling), picked):
            raws[v.id] = r
    held_owner = User.objects.create(username="holder", role="owner")
    held = services.value_create(owner=held_owner, attribute=attribute, ceiling="0.5", custody="owner")
    services.value_upload_chain(value_id=held.id, owner=held_owner, epsilons=[Decimal("0.1"), Decimal("0.2")],
                                outputs=[1, 2])
    buyers = [User.objects.create(username=f"buyer-{k}", role="buyer") for k in range(3)]
    for b in buyers:
        account = MoneyAccount.objects.create(user=b, kind="buyer_credit", balance=Decimal("20"))
        MoneyEntry.objects.create(account=account, amount=Decimal("20"), balance_after=Decimal("20"), memo="top-up")
    before = [_buy(buyers[0], attribute, "0.2", "before-0"), _buy(buyers[1], attribute, "0.3", "before-1")]
    outputs_before = {p.id: all_outputs(p) for p in before}
    assert checkpoint_make() is not None  # signed with the key derived from the old LDP_VALUE_KEY
    chains_before = stored_chains(attribute)

    # Step 1: pin the ledger's keys to the value key they were derived from; step 2: the new key first.
    settings.LDP_LEDGER_SIGNING_KEYS = [old]
    settings.LDP_LEDGER_BLINDING_KEY = old
    use_ring(settings, KEY_B, old)
    assert audit_budgets().ok
    new_id, old_id = value_key_id(KEY_B), value_key_id(old)
    assert rotation.remaining()["values"]["older"] == 61 - 1  # the owner-held value has nothing sealed

    # Step 3: rotate, in small batches, while purchases and an extension run.
    raise_to = [v for v in Value.objects.filter(attribute=attribute, custody="service").order_by("id")
                .values_list("id", flat=True)][:10]

    def buyer_job(k: int):
        def job():
            for j, eps in enumerate(EPSILONS):
                _buy(buyers[k], attribute, eps, f"during-{k}-{j}")
        return job

    def extension_job():
        for vid in raise_to:
            budget_set_ceiling(value_id=vid, ceiling="1.0")
        chains_extend(attribute_id=attribute.id)

    done, seen = [], []

    def progress(table, rows, total):  # what the purchases had completed at each batch (a pause between batches)
        seen.append(Purchase.objects.filter(status="completed").count())
        time.sleep(0.02)

    errors = run_concurrently([buyer_job(0), buyer_job(1), buyer_job(2), extension_job,
                               lambda: done.append(rotation.rotate(batch={"values": 7, "chain points": 3,
                                                                          "purchase chunks": 2}, progress=progress))])
    assert errors == []
    assert sum(done[0].rotated.values()) > 0 and done[0].broken == []
    assert len(set(seen)) > 1, seen  # purchases completed while the rotation ran
    call_command("rotate_value_key", "--no-progress")  # resumable: finishes what the run left (nothing, or a few)
    left = rotation.remaining()
    assert all(t["older"] == 0 and t["retired"] == 0 for t in left.values()), left
    assert not Value.objects.filter(input_sealed__isnull=False).exclude(value_key_id=new_id).exists()
    assert not ChainPoint.objects.exclude(value_key_id=new_id).exists()
    assert not PurchaseChunk.objects.exclude(value_key_id=new_id).exists()
    assert Purchase.objects.filter(status="completed").count() == 2 + 3 * len(EPSILONS)

    # Step 4: the old key leaves the ring; everything still opens, the audit passes, the checkpoints verify.
    use_ring(settings, KEY_B)
    report = audit_budgets()
    assert report.ok, report.as_text()
    assert report.stats["sealed_rows_under_older_value_keys"] == 0
    for p in before:  # the outputs sold before the rotation are read back unchanged
        ids, out = all_outputs(Purchase.objects.get(id=p.id))
        np.testing.assert_array_equal(ids, outputs_before[p.id][0])
        np.testing.assert_array_equal(out, outputs_before[p.id][1])
    after = stored_chains(attribute)
    for vid, (eps, out) in chains_before.items():  # every chain kept its points (and grew, for some)
        keep = np.isin(after[vid][0], eps)
        np.testing.assert_array_equal(after[vid][0][keep], eps)
        np.testing.assert_array_equal(after[vid][1][keep], out)
    for value in Value.objects.filter(id__in=list(raws)[:5]):
        assert owner_rows.open_raw(value) == raws[value.id]  # owners still see their raw values
    assert owner_rows.open_raw(Value.objects.get(id=held.id)) is None
    assert _buy(buyers[2], attribute, "0.9", "after").status == "completed"  # grows above the head (new points)
    budget_set_ceiling(value_id=raise_to[-1] + 1, ceiling="1.0")  # its chain grows (on commit, or here)
    chains_extend(attribute_id=attribute.id)
    assert stored_chains(attribute, [raise_to[-1] + 1])[raise_to[-1] + 1][0][-1] == 1_000_000
    assert checkpoint_make() is not None and LedgerCheckpoint.objects.count() >= 2
    report = audit_budgets()
    assert report.ok, report.as_text()
    call_command("rotate_value_key", "--dry-run")

    # Why step 1: with the ledger's keys derived from the value key again, every earlier checkpoint fails.
    settings.LDP_LEDGER_SIGNING_KEYS, settings.LDP_LEDGER_BLINDING_KEY = [], ""
    assert "Checkpoints" in {c.section for c in audit_budgets().failed}
    settings.LDP_LEDGER_SIGNING_KEYS, settings.LDP_LEDGER_BLINDING_KEY = [old], old

    # A ring without the key the rows are under: the audit names them, the command refuses.
    use_ring(settings, KEY_C, old)
    failed = {c.name: c for c in audit_budgets().failed}
    retired = failed["every sealed row is under a key of LDP_VALUE_KEYS (none under a retired key)"]
    assert any(f"under key {new_id}, not in LDP_VALUE_KEYS" in x for x in retired.examples)
    with pytest.raises(CommandError, match="no longer in LDP_VALUE_KEYS"):
        call_command("rotate_value_key", "--no-progress")
    assert old_id != new_id
