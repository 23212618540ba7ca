"""The owner SDK with numeric and string values (docs/custody.md, issue 32) against a live server: contribute, upload
(the device discretizes the number or hashes the string, and draws the binary chains), extend, sell, fetch and verify
the receipts, audit; the number, its discretized bit, the string and its Bloom filter are in no request body, no
stored row and (PostgreSQL) no dump of the database."""
from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection

from accounts.models import LedgerEntry
from accounts.services import budget_set_ceiling
from audit.budget_audit import audit_budgets
from ldpmarket_client import cli, sampler
from market.models import ChainPoint, Purchase, Value
from market.purchases.pricing import DEFAULT_POLICY
from tests.audit.conftest import buy
from tests.client import test_owner_sdk as base
from tests.factories import BuyerFactory, NumericAttributeFactory, StringAttributeFactory, fund, stored_chains

# the owner SDK's live fixtures (a token-signed Owner with a seeded word source, every request recorded)
owner_user, owner_for, sent = base.owner_user, base.owner_for, base.sent
Seeded, points = base.Seeded, base.points

NUMBER = "73.2519"  # the owner's raw number: digits that appear nowhere else in the exchange
TEXT = "zebracorn-périwinkle"  # the owner's raw string


@pytest.fixture
def numeric(transactional_db):
    return NumericAttributeFactory(price_policy=DEFAULT_POLICY)


@pytest.fixture
def strings(transactional_db):
    return StringAttributeFactory(price_policy=DEFAULT_POLICY)  # 16 bits, 2 hashes: draw_divisor 4


def bodies(requests_sent) -> list[dict]:
    return [json.loads(b) for m, _, b in requests_sent if m == "POST" and b]


def test_a_numeric_value_is_discretized_once_on_the_device_and_only_its_bit_chain_is_uploaded(owner_for, sent,
                                                                                          numeric):
    owner = owner_for(seed=5)
    got = owner.contribute(numeric.id, NUMBER, ceiling="1", upload_to="0.5")
    assert got["custody"] == "owner" and got["upload_level"] == "0.5" and got["kind"] == "numeric"
    state = json.loads(owner.state.path.read_text())["values"][str(got["id"])]
    assert state["value"] == NUMBER and state["z"] in (0, 1) and state["kind"] == "numeric"
    # the same words again: one for z, then the chain of z, bit for bit what was uploaded
    words = Seeded(5)
    z = sampler.discretize(NUMBER, "0", "100", words)
    eps = points("0.1", "0.5")
    expected = [row[0] for row in sampler.bits_chain([z], eps, 1, words)]
    assert z == state["z"]
    stored_eps, stored_out = stored_chains(numeric, [got["id"]])[got["id"]]
    assert stored_out.reshape(-1).tolist() == expected and stored_eps.tolist() == [int(Decimal(e) * 10**6)
                                                                                   for e in eps]
    # extend after the ceiling moves: the same z, from the stored head; z is never drawn again
    budget_set_ceiling(value_id=got["id"], ceiling="0.8")
    (result,) = owner.extend()
    assert result["uploaded"] == ["0.6", "0.7", "0.8"] and result["value"]["upload_level"] == "0.8"
    after = json.loads(owner.state.path.read_text())["values"][str(got["id"])]
    assert after["z"] == state["z"] and after["head"]["epsilon"] == "0.8"
    posted = bodies(sent)
    assert posted[0] == {"attribute": numeric.id, "custody": "owner", "ceiling": "1"}
    assert all(set(b) == {"epsilons", "outputs"} and set(b["outputs"]) <= {0, 1} for b in posted[1:])
    assert not any(NUMBER in (b or "") or "73.25" in (b or "") for _, _, b in sent)


def test_a_string_value_is_hashed_on_the_device_and_only_its_bits_chains_are_uploaded(owner_for, sent, strings):
    owner = owner_for(seed=8)
    got = owner.contribute(strings.id, TEXT, ceiling="1", upload_to="0.6")
    assert got["kind"] == "string" and got["width"] == 16 and got["upload_level"] == "0.6"
    value = Value.objects.get(id=got["id"])
    assert got["cohort"] == value.cohort
    bloom = sampler.bloom_bits(TEXT, value.cohort, 16, 2)
    eps = points("0.1", "0.6")
    expected = ["".join(map(str, r)) for r in sampler.bits_chain(bloom, eps, 4, Seeded(8))]
    stored = stored_chains(strings, [got["id"]])[got["id"]][1]
    assert ["".join(map(str, r)) for r in stored.tolist()] == expected
    budget_set_ceiling(value_id=got["id"], ceiling="0.8")
    (result,) = owner.extend()
    assert result["uploaded"] == ["0.7", "0.8"]
    posted = bodies(sent)
    assert all(set(b) == {"epsilons", "outputs"} for b in posted[1:])
    assert all(isinstance(o, str) and len(o) == 16 and not o.strip("01") for b in posted[1:] for o in b["outputs"])
    filt = "".join(map(str, bloom))
    for _, _, body in sent:
        assert TEXT not in (body or "") and "zebracorn" not in (body or "")
        assert filt not in (body or ""), "the Bloom filter itself went out"
    positions = sorted({i for i, b in enumerate(bloom) if b})
    assert not any(json.dumps(positions) in (b or "") for _, _, b in sent)


def test_held_numeric_and_string_values_sell_get_receipts_and_pass_the_audits(owner_for, numeric, strings, tmp_path,
                                                                                live_server, capsys, monkeypatch,
                                                                                client_for, owner_user):
    owner = owner_for(seed=13)
    held = [owner.contribute(numeric.id, NUMBER, ceiling="1", upload_to="0.5")["id"],
            owner.contribute(strings.id, TEXT, ceiling="1", upload_to="0.5")["id"]]
    buyer = BuyerFactory()
    fund(buyer, "100")
    rng = np.random.default_rng(4)
    for attribute in (numeric, strings):
        buy(buyer, attribute, "0.35", rng)
        p = Purchase.objects.filter(attribute=attribute).latest("id")
        assert (p.status, p.included) == ("completed", 1)
    kinds = sorted(LedgerEntry.objects.of_values(held).values_list("kind", flat=True))
    assert kinds == sorted(["ceiling", "owner_custody", "owner_upload", "chain_release"] * 2)
    assert audit_budgets().ok
    from audit.privacy import privacy_audit

    report = privacy_audit(attribute_ids=[numeric.id, strings.id], plot=False, rng=np.random.default_rng(1))
    assert [a.owner_held for a in report.attributes] == [1, 1] and report.ok
    # receipts: fetched and verified with the client alone
    call_command("ledger_checkpoint", stdout=open(os.devnull, "w"))
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LDPMARKET_CONFIG", str(tmp_path / "config.json"))
    token = client_for(owner_user).token

    def verb(*argv):
        code = cli.main(["--url", live_server.url, "--token", token, *argv])
        out, err = capsys.readouterr()
        return code, out + err

    assert verb("ledger", "public-key", "--out", str(tmp_path / "key.pem"))[0] == 0
    assert verb("ledger", "checkpoint", "--out", str(tmp_path / "checkpoint.json"))[0] == 0
    code, text = verb("owner", "receipts", "--out", str(tmp_path / "receipts.json"))
    assert code == 0, text
    bundle = json.loads((tmp_path / "receipts.json").read_text())
    assert sorted(r["entry"]["kind"] for r in bundle["receipts"]) == kinds
    code, text = verb("verify", str(tmp_path / "receipts.json"), "--checkpoint", str(tmp_path / "checkpoint.json"),
                      "--public-key", str(tmp_path / "key.pem"))
    assert code == 0 and "verified: 8 receipts of 2 values" in text, text
    # no stored row holds the raw values: the values' sealed columns are empty, and no row of the tables that name
    # them (nor any sealed chain point) contains their text
    assert not Value.objects.filter(id__in=held).exclude(raw_sealed=None, input_sealed=None).exists()
    needles = [NUMBER.encode(), TEXT.encode(), "zebracorn".encode()]
    for model in (Value, ChainPoint, LedgerEntry):
        for row in model.objects.all().values():
            blob = repr(row).encode() + b"".join(bytes(v) for v in row.values() if isinstance(v, (bytes, memoryview)))
            assert not any(n in blob for n in needles), model
    if connection.vendor != "postgresql":
        return
    settings_dict = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": settings_dict.get("PASSWORD") or ""}
    dump = subprocess.run(["pg_dump", "--data-only", "-h", settings_dict["HOST"] or "127.0.0.1",
                           "-p", str(settings_dict["PORT"] or 5432), "-U", settings_dict["USER"],
                           settings_dict["NAME"]], capture_output=True, env=env, check=True).stdout
    assert b"market_value" in dump and not any(n in dump for n in needles)
