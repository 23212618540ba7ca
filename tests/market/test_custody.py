"""Owner-held values (docs/custody.md): contributed and uploaded through the owner API, never holding the raw value
or the mechanism input; sold up to their upload level (stored, bridged, tightened) and left out above it as
``awaiting owner``; never grown by the service; recorded in the ledger and checked by the audit."""
from __future__ import annotations

import os
import subprocess
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import BudgetAccount, LedgerEntry
from accounts.roles import grant_role
from accounts.services import budget_set_ceiling
from audit.budget_audit import audit_budgets
from market.chains.extension import chains_extend
from market.models import Purchase, Value
from market.purchases.pricing import DEFAULT_POLICY
from mechanisms.relaxation import chain as draw_chain
from tests.factories import BuyerFactory, CategoricalAttributeFactory, contribute, fund, stored_chains
from tests.market.api.conftest import assert_problem, buy

D = Decimal
LABELS = ["red", "green", "blue", "amber"]


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"custody-tests-{uuid.uuid4()}"}}


def owner_client(name: str | None = None):
    """An owner as a deployment makes one (a user given the owner role) with a token client."""
    user = get_user_model().objects.create_user(username=name or f"o-{uuid.uuid4().hex[:8]}", password="pw-123456!")
    grant_role(user, "owner")
    client = APIClient()
    _, key = AuthToken.objects.create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return user, client


def grid_points(start: str, stop: str, step: str = "0.1") -> list[str]:
    out, e = [], D(start)
    while e <= D(stop):
        out.append(str(e))
        e += D(step)
    return out


def device_chain(value: int, epsilons: list[str], seed: int) -> list[int]:
    """What an owner's device uploads: the chain of its value through ``epsilons`` (the same exact law)."""
    return draw_chain(np.array([value]), [D(e) for e in epsilons], len(LABELS), np.random.default_rng(seed))[0].tolist()


def contribute_held(client, attribute, ceiling="1"):
    r = client.post("/api/v1/owner/values/", {"attribute": attribute.id, "custody": "owner", "ceiling": ceiling},
                    format="json")
    assert r.status_code == 201, r.content
    return r.json()


def upload(client, value_id, epsilons, outputs):
    return client.post(f"/api/v1/owner/values/{value_id}/chain/", {"epsilons": epsilons, "outputs": outputs},
                       format="json")


@pytest.fixture
def attribute(db):
    return CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)


def test_an_owner_held_value_is_contributed_and_uploaded_and_shows_both_guarantees(attribute):
    user, client = owner_client()
    body = contribute_held(client, attribute, ceiling="1")
    assert body["custody"] == "owner" and body["upload_level"] is None and body["head"] is None
    assert body["guarantee"] == {"buyers": "0", "service": "0"}
    assert body["needs_upload"] is True and body["m"] == 4 and body["labels"] == LABELS
    eps = grid_points("0.1", "0.5")
    r = upload(client, body["id"], eps, device_chain(2, eps, 1))
    assert r.status_code == 200, r.content
    got = r.json()
    assert got["upload_level"] == "0.5" and got["guarantee"]["service"] == "0.5" and got["needs_upload"] is True
    # continue past the ceiling with an off-grid upload level: nothing above the ceiling is sold
    more = grid_points("0.6", "1.2") + ["1.25"]
    r = upload(client, body["id"], more, device_chain(2, more, 2))
    assert r.status_code == 200, r.content
    assert r.json()["upload_level"] == "1.25" and r.json()["needs_upload"] is False
    listed = client.get("/api/v1/owner/values/").json()["results"]
    assert [v["id"] for v in listed] == [body["id"]]
    value = Value.objects.get(id=body["id"])
    eps_stored, _ = stored_chains(attribute, [value.id])[value.id]
    assert eps_stored.tolist()[-1] == 1_250_000 and len(eps_stored) == 13
    kinds = list(LedgerEntry.objects.of_values([value.id]).order_by("id").values_list("kind", "epsilon"))
    assert kinds == [("ceiling", None), ("owner_custody", None), ("owner_upload", D("0.5")),
                     ("owner_upload", D("1.25"))]
    assert audit_budgets().ok, [c for c in audit_budgets().failed]


def test_a_service_held_value_shows_no_guarantee_against_the_service(attribute):
    user, client = owner_client()
    r = client.post("/api/v1/owner/values/", {"attribute": attribute.id, "value": "green", "ceiling": "1"},
                    format="json")
    assert r.status_code == 201, r.content
    assert r.json()["custody"] == "service" and r.json()["guarantee"]["service"] == "none"
    assert r.json()["head"] == "1" and r.json()["needs_upload"] is False
    r = upload(client, r.json()["id"], ["1.1"], [0])
    body = assert_problem(r, 400)
    assert body["type"].endswith("custody-refused") and "value" in body["errors"]


def test_the_database_never_receives_an_owner_held_raw_value_or_input(attribute, transactional_db):
    """Every column of every row that names the value, and a dump of the database: nothing but the chain."""
    user, client = owner_client()
    body = contribute_held(client, attribute)
    eps = grid_points("0.1", "1.0")
    assert upload(client, body["id"], eps, device_chain(3, eps, 5)).status_code == 200
    value = Value.objects.get(id=body["id"])
    assert value.raw_sealed is None and value.input_sealed is None and value.raw_deleted_at is None
    with connection.cursor() as cur:
        cur.execute("SELECT raw_sealed IS NULL AND input_sealed IS NULL FROM market_value WHERE id = %s", [value.id])
        assert cur.fetchone() == (True,)
    if connection.vendor != "postgresql":
        return
    settings_dict = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": settings_dict.get("PASSWORD") or ""}
    dump = subprocess.run(["pg_dump", "--data-only", "--table=market_value", "-h", settings_dict["HOST"] or "127.0.0.1",
                           "-p", str(settings_dict["PORT"] or 5432), "-U", settings_dict["USER"],
                           settings_dict["NAME"]], capture_output=True, text=True, env=env, check=True).stdout
    rows = [line.split("\t") for line in dump.splitlines() if line.startswith(f"{value.id}\t")]
    assert len(rows) == 1
    columns = next(line for line in dump.splitlines() if line.startswith("COPY public.market_value"))
    names = columns[columns.index("(") + 1:columns.index(")")].split(", ")
    row = dict(zip(names, rows[0]))
    assert row["raw_sealed"] == row["input_sealed"] == "\\N" and row["custody"] == "owner"


@pytest.mark.parametrize("epsilons,outputs,field", [
    (["0.2", "0.3"], [0, 1], "epsilons"),            # does not start at the grid start
    (["0.1", "0.1"], [0, 1], "epsilons"),            # not strictly increasing
    (["0.1", "0.15", "0.2"], [0, 1, 2], "epsilons"),  # off the grid before the last point
    (["0.1", "0.3"], [0, 1], "epsilons"),            # skips a grid point
    (["0.1", "0.25"], [0, 1], "epsilons"),           # skips a grid point before an off-grid upload level
    (["0.1", "0.1000001"], [0, 1], "epsilons"),      # more than 6 decimals
    (["0.1", "x"], [0, 1], "epsilons"),              # not a number
    ([], [], "epsilons"),                            # empty
    (["0.1", "0.2"], [0], "outputs"),                # one output per epsilon
    (["0.1", "0.2"], [0, 4], "outputs"),             # out of range
    (["0.1", "0.2"], [0, "violet"], "outputs"),      # not a label
    (["0.1", "0.2"], [0, True], "outputs"),          # not an index
])
def test_bad_uploads_get_a_400_naming_the_field(attribute, epsilons, outputs, field):
    user, client = owner_client()
    body = contribute_held(client, attribute)
    problem = assert_problem(upload(client, body["id"], epsilons, outputs), 400)
    assert field in problem["errors"], problem
    assert Value.objects.get(id=body["id"]).block_id is not None
    assert stored_chains(attribute, [body["id"]]).get(body["id"], (np.array([]),))[0].size == 0


def test_uploads_continue_from_the_stored_head_and_respect_the_cap(attribute):
    attribute.grid_stop = D("1")
    attribute.save()
    user, client = owner_client()
    body = contribute_held(client, attribute)
    eps = grid_points("0.1", "0.3")
    assert upload(client, body["id"], eps, device_chain(1, eps, 3)).status_code == 200
    problem = assert_problem(upload(client, body["id"], ["0.3", "0.4"], [0, 1]), 400)
    assert "epsilons" in problem["errors"] and "0.4" in problem["detail"]
    assert upload(client, body["id"], ["0.4", "0.45"], [0, 1]).status_code == 200  # off-grid upload level 0.45
    problem = assert_problem(upload(client, body["id"], ["0.55"], [0]), 400)  # after 0.45 comes grid point 0.5
    assert "0.5" in problem["detail"]
    rest = grid_points("0.5", "1.1")
    problem = assert_problem(upload(client, body["id"], rest, [0] * len(rest)), 400)
    assert "cap" in problem["detail"]


def test_owners_see_only_their_own_values_and_only_owners_use_the_api(attribute):
    _, alice = owner_client()
    _, bob = owner_client()
    body = contribute_held(alice, attribute)
    assert_problem(bob.get(f"/api/v1/owner/values/{body['id']}/"), 404)
    assert_problem(upload(bob, body["id"], ["0.1"], [0]), 404)
    assert bob.get("/api/v1/owner/values/").json()["results"] == []
    buyer = BuyerFactory()
    client = APIClient()
    _, key = AuthToken.objects.create(user=buyer)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert_problem(client.get("/api/v1/owner/values/"), 403)
    assert_problem(APIClient().get("/api/v1/owner/values/"), 401)


def test_owner_custody_is_refused_where_the_device_cannot_draw_the_chain(db):
    from tests.factories import TernaryAttributeFactory

    strings = TernaryAttributeFactory()  # one-shot: no chain for a device to draw
    _, client = owner_client()
    r = client.post("/api/v1/owner/values/", {"attribute": strings.id, "custody": "owner", "ceiling": "1"},
                    format="json")
    assert "custody" in assert_problem(r, 400)["errors"]
    r = client.post("/api/v1/owner/values/", {"attribute": strings.id, "custody": "owner", "value": "x",
                                              "ceiling": "1"}, format="json")
    assert "value" in assert_problem(r, 400)["errors"]


def test_purchases_sell_owner_held_values_up_to_their_upload_level_and_count_the_rest(attribute):
    """Three owner-held values uploaded to 0.5, one never uploaded, and two service-held values; ceilings 1."""
    contribute(attribute, ["red", "blue"], ceiling="1")
    held = []
    for k in range(4):
        _, client = owner_client()
        body = contribute_held(client, attribute)
        if k < 3:
            eps = grid_points("0.1", "0.5")
            assert upload(client, body["id"], eps, device_chain(k, eps, 10 + k)).status_code == 200
        held.append(body["id"])
    buyer = BuyerFactory()
    fund(buyer, "100")
    client = APIClient()
    _, key = AuthToken.objects.create(user=buyer)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    quote = client.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "0.35"}, format="json").json()
    assert "included" in quote, quote
    assert quote["included"] == 5 and quote["excluded"]["awaiting_owner"] == 1 and quote["excluded"]["no_raw"] == 0
    r = buy(client, attribute.id, "0.35")  # bridged between 0.3 and 0.4 for every chain
    assert r.status_code in (200, 201), r.content
    p = Purchase.objects.get(id=r.json()["id"])
    assert p.included == 5 and p.excluded_awaiting_owner == 1 and r.json()["excluded"]["awaiting_owner"] == 1
    low = client.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "0.05"}, format="json")
    assert low.json()["included"] == 5, low.content  # tightened below the first point
    quote = client.post("/api/v1/quotes/", {"attribute": attribute.id, "epsilon": "0.7"}, format="json").json()
    assert quote["included"] == 2 and quote["excluded"]["awaiting_owner"] == 4
    r = buy(client, attribute.id, "0.7")
    p = Purchase.objects.get(id=r.json()["id"])
    assert p.included == 2 and p.excluded_awaiting_owner == 4 and p.excluded_no_raw == 0
    losses = dict(BudgetAccount.objects.filter(value_id__in=held).values_list("value_id", "chain_loss"))
    assert [losses[v] for v in held] == [D("0.35")] * 3 + [D(0)]
    assert audit_budgets().ok, [c for c in audit_budgets().failed]


def test_the_service_never_grows_an_owner_held_chain(attribute):
    _, client = owner_client()
    body = contribute_held(client, attribute, ceiling="0.3")
    eps = grid_points("0.1", "0.3")
    assert upload(client, body["id"], eps, device_chain(0, eps, 4)).status_code == 200
    budget_set_ceiling(value_id=body["id"], ceiling="2")
    chains_extend(attribute_id=attribute.id)
    got = client.get(f"/api/v1/owner/values/{body['id']}/").json()
    assert got["upload_level"] == "0.3" and got["needs_upload"] is True and got["ceiling"] == "2"
    assert stored_chains(attribute, [body["id"]])[body["id"]][0].tolist() == [100_000, 200_000, 300_000]


def test_the_audit_catches_a_value_whose_custody_was_changed(attribute, transactional_db):
    values = contribute(attribute, ["red"], ceiling="1")
    _, client = owner_client()
    body = contribute_held(client, attribute)
    eps = grid_points("0.1", "0.4")
    assert upload(client, body["id"], eps, device_chain(0, eps, 4)).status_code == 200
    assert audit_budgets().ok, [c for c in audit_budgets().failed]
    with connection.cursor() as cur:  # a service-held value passed off as owner-held
        cur.execute("UPDATE market_value SET custody = 'owner', raw_sealed = NULL, input_sealed = NULL "
                    "WHERE id = %s", [values[0].id])
    report = audit_budgets()
    failed = {c.name for c in report.failed}
    assert "a value is held by its owner exactly when the ledger records that custody" in failed
    assert "each owner-held chain's head is the last upload level in the ledger; service-held values have no upload" \
        in failed


# ---------------------------------------------------------------------------------------------------------------
# The privacy audit's stay test of owner-held chains (audit.privacy, docs/custody.md#the-ledger-and-the-audit)
# ---------------------------------------------------------------------------------------------------------------

def held_market(attribute, n: int, device, seed: int = 0):
    """``n`` owner-held values (service path) whose device uploads ``device(values, epsilons, rng)`` up to 0.6."""
    from market.values.services import value_upload_chain, values_create_many
    from tests.factories import make_owners

    owners = make_owners(n, f"held-{uuid.uuid4().hex[:6]}")
    values = values_create_many(attribute=attribute, owners=owners, raws=None, ceiling="1", custody="owner")
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, len(LABELS), n)
    eps = grid_points("0.1", "0.6")
    outputs = device(truth, eps, rng)
    for v, o, out in zip(values, owners, outputs):
        value_upload_chain(value_id=v.id, owner=o, epsilons=[D(e) for e in eps], outputs=out.tolist())
    return values


def honest(truth, eps, rng):
    return draw_chain(truth, [D(e) for e in eps], len(LABELS), rng)


def stays_too_often(truth, eps, rng):  # a device that uploads the raw value at every point: no randomness at all
    return np.repeat(truth[:, None], len(eps), axis=1)


def draws_afresh(truth, eps, rng):  # k-RR drawn afresh at each point: each is eps-LDP, together they add up
    from mechanisms.rr import perturb

    return np.stack([perturb(truth, D(e), len(LABELS), rng) for e in eps], axis=1)


@pytest.mark.parametrize("device,flagged", [(honest, False), (stays_too_often, True), (draws_afresh, True)])
def test_the_privacy_audit_flags_owner_held_chains_that_are_not_random(attribute, device, flagged):
    from audit.privacy import privacy_audit

    held_market(attribute, 150, device)
    report = privacy_audit(attribute_ids=[attribute.id], plot=False, rng=np.random.default_rng(3))
    audit = report.attributes[0]
    assert audit.owner_held == 150 and len(audit.steps) == 5
    assert all(t["n"] == 150 for t in audit.steps)
    assert audit.not_random is flagged and report.ok is (not flagged)
    assert "owner-held chains (150)" in report.as_text()


def test_an_owner_held_value_has_no_raw_value_to_delete(attribute):
    from ldpmarket.problems import BudgetError
    from market.values.services import value_delete_raw

    user, client = owner_client()
    body = contribute_held(client, attribute)
    with pytest.raises(BudgetError, match="kept on your device"):
        value_delete_raw(value_id=body["id"])
    assert Value.objects.get(id=body["id"]).raw_deleted_at is None


def test_the_portal_offers_no_raw_deletion_for_an_owner_held_value_and_shows_both_guarantees(attribute, client):
    user, api = owner_client()
    held = contribute_held(api, attribute)
    eps = grid_points("0.1", "0.3")
    assert upload(api, held["id"], eps, device_chain(1, eps, 2)).status_code == 200
    other = CategoricalAttributeFactory(labels=LABELS, dataset=attribute.dataset, name="second question")
    served = api.post("/api/v1/owner/values/", {"attribute": other.id, "value": "blue", "ceiling": "1"},
                      format="json").json()
    client.force_login(user)
    page = client.get(f"/portal/values/{held['id']}/").content.decode()
    assert "against the service ε 0.3" in page and "delete-raw" not in page
    r = client.post(f"/portal/values/{held['id']}/delete-raw/")
    assert r.status_code == 302 and Value.objects.get(id=held["id"]).raw_deleted_at is None
    page = client.get(f"/portal/values/{served['id']}/").content.decode()
    assert "against the service none: the service holds your value" in page
