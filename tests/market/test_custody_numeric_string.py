"""Owner-held numeric and string values (docs/custody.md, issue 32): the device discretizes a number or hashes a
string into its Bloom filter and uploads binary chains; the service checks the upload's width, seals the points,
records the upload level, shows both guarantees, sells the values up to it and tests their chains (the privacy
audit's stay test, per Bloom bit at ``epsilon / draw_divisor``)."""
from __future__ import annotations

import uuid
from decimal import Decimal

import numpy as np
import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import LedgerEntry
from audit.budget_audit import audit_budgets
from market.chains.grow import draw_epsilon
from market.models import Purchase, Value
from market.purchases.pricing import DEFAULT_POLICY
from mechanisms.relaxation import chain as draw_chain
from tests.factories import BuyerFactory, NumericAttributeFactory, StringAttributeFactory, fund, stored_chains
from tests.market.api.conftest import assert_problem, buy
from tests.market.test_custody import contribute_held, grid_points, owner_client, upload

D = Decimal


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"custody-ns-tests-{uuid.uuid4()}"}}


@pytest.fixture
def numeric(db):
    return NumericAttributeFactory(price_policy=DEFAULT_POLICY)


@pytest.fixture
def strings(db):
    return StringAttributeFactory(price_policy=DEFAULT_POLICY)  # 16 bits, 2 hashes, 4 cohorts: draw_divisor 4


def bit_chain(z: int, epsilons: list[str], seed: int, divisor: int = 1) -> list[int]:
    """A binary chain of ``z`` through ``epsilons``, each drawn at ``epsilon / divisor`` (the service's law)."""
    eps = [draw_epsilon(int(D(e) * 10**6), divisor) for e in epsilons]
    return draw_chain(np.array([z]), eps, 2, np.random.default_rng(seed))[0].tolist()


def bloom_chain(bits: list[int], epsilons: list[str], seed: int, divisor: int) -> list[str]:
    """What a device uploads for a string: per epsilon, the Bloom bits' outputs as one text of 0/1."""
    eps = [draw_epsilon(int(D(e) * 10**6), divisor) for e in epsilons]
    rows = draw_chain(np.array(bits), eps, 2, np.random.default_rng(seed))  # (num_bits, L)
    return ["".join(str(int(b)) for b in rows[:, j]) for j in range(len(epsilons))]


def buyer_client():
    buyer = BuyerFactory()
    fund(buyer, "100")
    client = APIClient()
    _, key = AuthToken.objects.create(user=buyer)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_numeric_and_string_attributes_take_owner_held_values(numeric, strings):
    assert numeric.supports_owner_custody and strings.supports_owner_custody
    _, client = owner_client()
    body = contribute_held(client, numeric)
    assert body["custody"] == "owner" and body["kind"] == "numeric" and body["m"] == 2
    assert body["width"] == 1 and body["draw_divisor"] == 1
    assert (body["low"], body["high"]) == ("0", "100")
    s = contribute_held(client, strings)
    assert s["kind"] == "string" and s["width"] == 16 and s["draw_divisor"] == 4
    assert (s["num_bits"], s["num_hashes"]) == (16, 2) and 0 <= s["cohort"] < 4
    assert Value.objects.get(id=s["id"]).cohort == s["cohort"]


def test_owner_held_string_values_get_cohorts_spread_over_all_of_them(strings):
    from market.values.services import values_create_many
    from tests.factories import make_owners

    values = values_create_many(attribute=strings, owners=make_owners(200, f"coh-{uuid.uuid4().hex[:6]}"),
                                raws=None, ceiling="1", custody="owner", rng=np.random.default_rng(1))
    counts = np.bincount([v.cohort for v in values], minlength=4)
    assert counts.size == 4 and counts.min() >= 30, counts


def test_a_numeric_upload_is_stored_recorded_and_shows_both_guarantees(numeric):
    _, client = owner_client()
    body = contribute_held(client, numeric)
    eps = grid_points("0.1", "0.5") + ["0.55"]
    outs = bit_chain(1, eps, 3)
    r = upload(client, body["id"], eps, outs)
    assert r.status_code == 200, r.content
    got = r.json()
    assert got["upload_level"] == "0.55" and got["guarantee"] == {"buyers": "0", "service": "0.55"}
    stored_eps, stored_out = stored_chains(numeric, [body["id"]])[body["id"]]
    assert stored_eps.tolist() == [int(D(e) * 10**6) for e in eps]
    assert stored_out.reshape(-1).tolist() == outs
    kinds = list(LedgerEntry.objects.of_values([body["id"]]).order_by("id").values_list("kind",
                                                                                                    "epsilon"))
    assert kinds == [("ceiling", None), ("owner_custody", None), ("owner_upload", D("0.55"))]


def test_a_string_upload_is_stored_bit_by_bit_and_recorded(strings):
    _, client = owner_client()
    body = contribute_held(client, strings)
    eps = grid_points("0.1", "0.6")
    outs = bloom_chain([0] * 13 + [1, 0, 1], eps, 4, divisor=4)
    r = upload(client, body["id"], eps, outs)
    assert r.status_code == 200, r.content
    assert r.json()["upload_level"] == "0.6" and r.json()["guarantee"]["service"] == "0.6"
    stored_eps, stored_out = stored_chains(strings, [body["id"]])[body["id"]]
    assert stored_out.shape == (6, 16)
    assert ["".join(map(str, row)) for row in stored_out.tolist()] == outs
    more = grid_points("0.7", "0.8")
    r = upload(client, body["id"], more, ["0" * 16, "1" * 16])
    assert r.status_code == 200 and r.json()["head"] == "0.8"
    assert LedgerEntry.objects.of_values([body["id"]]).filter(kind="owner_upload").count() == 2
    assert audit_budgets().ok, [c for c in audit_budgets().failed]


@pytest.mark.parametrize("outputs,match", [
    (["0101010101010101", "010101010101010"], "16"),           # one bit short
    (["0101010101010101", "01010101010101011"], "16"),         # one bit too many
    (["0101010101010101", "010101010101010x"], "0"),            # not a bit
    (["0101010101010101", [0, 1] * 8], "text"),                 # a list, not a text
    (["0101010101010101", 1], "text"),                          # a number
    (["0101010101010101"], "one output per epsilon"),
])
def test_a_malformed_string_upload_is_refused_naming_outputs(strings, outputs, match):
    _, client = owner_client()
    body = contribute_held(client, strings)
    r = upload(client, body["id"], ["0.1", "0.2"], outputs)
    problem = assert_problem(r, 400)
    assert problem["type"].endswith("custody-refused"), problem
    assert "outputs" in problem["errors"] and match in str(problem["errors"]["outputs"]), problem
    assert stored_chains(strings, [body["id"]]).get(body["id"]) is None or \
        stored_chains(strings, [body["id"]])[body["id"]][0].size == 0


@pytest.mark.parametrize("outputs", [[0, 2], [0, "1"], [0, "high"]])
def test_a_numeric_upload_takes_bits_only(numeric, outputs):
    _, client = owner_client()
    body = contribute_held(client, numeric)
    problem = assert_problem(upload(client, body["id"], ["0.1", "0.2"], outputs), 400)
    assert "outputs" in problem["errors"], problem


def test_owner_held_numeric_and_string_values_are_sold_up_to_their_upload_level(numeric, strings):
    held = {}
    for attribute, outs in ((numeric, lambda e, k: bit_chain(k % 2, e, k)),
                            (strings, lambda e, k: bloom_chain([k % 2] * 16, e, k, 4))):
        for k in range(3):
            _, client = owner_client()
            body = contribute_held(client, attribute)
            if k < 2:
                eps = grid_points("0.1", "0.5")
                assert upload(client, body["id"], eps, outs(eps, k)).status_code == 200
            held.setdefault(attribute.id, []).append(body["id"])
    client = buyer_client()
    for attribute in (numeric, strings):
        r = buy(client, attribute.id, "0.35")
        assert r.status_code in (200, 201), r.content
        p = Purchase.objects.get(id=r.json()["id"])
        assert (p.included, p.excluded_awaiting_owner) == (2, 1), attribute.kind
        q = client.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "0.7"}, format="json")
        assert "3 await their owner's upload" in assert_problem(q, 400)["detail"]  # nothing to sell above it
    assert audit_budgets().ok, [c for c in audit_budgets().failed]


# ---------------------------------------------------------------------------------------------------------------
# The privacy audit's stay test (audit.privacy) on owner-held numeric and string chains
# ---------------------------------------------------------------------------------------------------------------

def held_market(attribute, n: int, device, seed: int = 0):
    from market.values.services import value_upload_chain, values_create_many
    from tests.factories import make_owners

    owners = make_owners(n, f"nsheld-{uuid.uuid4().hex[:6]}")
    values = values_create_many(attribute=attribute, owners=owners, raws=None, ceiling="1", custody="owner")
    rng = np.random.default_rng(seed)
    eps = grid_points("0.1", "0.6")
    for v, o in zip(values, owners):
        value_upload_chain(value_id=v.id, owner=o, epsilons=[D(e) for e in eps], outputs=device(attribute, eps, rng))
    return values


def honest(attribute, eps, rng):
    if attribute.kind == "string":
        bits = rng.integers(0, 2, attribute.num_bits)
        rows = draw_chain(bits, [draw_epsilon(int(D(e) * 10**6), attribute.draw_divisor) for e in eps], 2, rng)
        return ["".join(str(int(b)) for b in rows[:, j]) for j in range(len(eps))]
    return draw_chain(rng.integers(0, 2, 1), [D(e) for e in eps], 2, rng)[0].tolist()


def honest_at_the_full_epsilon(attribute, eps, rng):  # a string device forgetting draw_divisor: stays too often
    bits = rng.integers(0, 2, attribute.num_bits)
    rows = draw_chain(bits, [D(e) * 20 for e in eps], 2, rng)
    return ["".join(str(int(b)) for b in rows[:, j]) for j in range(len(eps))]


def stays(attribute, eps, rng):
    if attribute.kind == "string":
        return ["0110100000000001"] * len(eps)
    return [1] * len(eps)


@pytest.mark.parametrize("kind,device,flagged", [
    ("numeric", honest, False), ("numeric", stays, True),
    ("string", honest, False), ("string", stays, True), ("string", honest_at_the_full_epsilon, True),
])
def test_the_privacy_audit_tests_owner_held_numeric_and_string_chains(db, kind, device, flagged):
    from audit.privacy import privacy_audit

    attribute = NumericAttributeFactory() if kind == "numeric" else StringAttributeFactory()
    held_market(attribute, 60, device)
    report = privacy_audit(attribute_ids=[attribute.id], plot=False, rng=np.random.default_rng(3))
    audit = report.attributes[0]
    assert audit.owner_held == 60 and len(audit.steps) == 5, audit
    per_pair = 60 * (attribute.num_bits if kind == "string" else 1)
    assert all(t["n"] == per_pair for t in audit.steps)
    if kind == "string":
        assert audit.steps[0]["eps_from"] == str(draw_epsilon(100_000, 4))
    assert audit.not_random is flagged and report.ok is (not flagged)
