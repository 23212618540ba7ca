"""The buyer API for one-shot mechanisms and surveys (issue 7): one POST /api/v1/purchases/ (plus the mechanism's
parameters), quotes, outputs and estimates per mechanism, POST/GET /api/v1/surveys/, clear 4xx for bad input,
idempotency, and the improved Christofides exposure test (no endpoint ever returns a survey's answers)."""
from __future__ import annotations

import csv
import io
import json
import uuid
from decimal import Decimal

import numpy as np
import pytest

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, Settlement
from market.models import Purchase, PurchaseChunk, Value
from market.purchases.pricing import PricePolicy
from market.values.services import value_delete_raw, value_set_pum_tag
from mechanisms import surveys
from tests.factories import (
    BinaryAttributeFactory,
    DistributionAttributeFactory,
    GraphAttributeFactory,
    TernaryAttributeFactory,
    UrapAttributeFactory,
    UrrAttributeFactory,
)
from tests.market.api.conftest import POLICY, assert_problem, client_for, contribute, credit

pytestmark = pytest.mark.django_db


@pytest.fixture
def oneshot(db):
    """One attribute of each one-shot mechanism with values (ceilings 5)."""
    urr = UrrAttributeFactory(price_policy=POLICY)
    vs = contribute(urr, ["a", "b", "c", "d", "e"] * 8, ceiling="5", seed=1)
    value_set_pum_tag(value_id=vs[2].id, tag="home")
    urap = UrapAttributeFactory(price_policy=POLICY)
    contribute(urap, ["a", "b", "c", "d", "e"] * 6, ceiling="5", seed=2)
    rr3 = TernaryAttributeFactory(price_policy=POLICY)
    contribute(rr3, ["none", "plus", "minus"] * 10, ceiling="5", seed=3)
    lpp = GraphAttributeFactory(price_policy=POLICY, labels=["w", "x", "y", "z"])
    contribute(lpp, [{"w": 0.5, "z": -1}, {}, {"x": 1}] * 8, ceiling="5", seed=4)
    dist = DistributionAttributeFactory(price_policy=POLICY)
    contribute(dist, [{"x": 0.5, "y": 0.5}, [0.1, 0.1, 0.8]] * 10, ceiling="5", seed=5)
    return {"urr": urr, "urap": urap, "rr3": rr3, "lpp": lpp, "private_sample": dist}


@pytest.fixture
def members(db):
    """A binary attribute for surveys: 60 members of the group among 200 owners."""
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    contribute(attribute, ["yes"] * 60 + ["no"] * 140, ceiling="5", seed=6)
    return attribute


REQUESTS = {"urr": {"epsilon": "1"}, "urap": {"epsilon": "1", "theta": "0.7"}, "rr3": {"eps1": "1", "eps2": "1"},
            "lpp": {"eps1": "1", "eps2": "2"}, "private_sample": {"epsilon": "2"}}
CHARGED = {"urr": "1.000000", "urap": "1.000000", "rr3": "1.379886", "lpp": "2.000000", "private_sample": "2.000000"}
SIZES = {"urr": 40, "urap": 30, "rr3": 30, "lpp": 24, "private_sample": 20}


def post(client, path, body, key=None):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex)


def test_catalog_describes_the_oneshot_attributes(api, oneshot):
    attrs = {a["mechanism"]: a for d in api.get("/api/v1/datasets/?histogram=full").json()["results"]
             for a in d["attributes"]}
    assert attrs["urr"]["sensitive"] == ["a", "b"] and attrs["urr"]["pum_tags"] == ["home", "work"]
    assert attrs["urr"]["labels"] == ["a", "b", "c", "d", "e"]
    assert attrs["rr3"]["kind"] == "ternary" and attrs["rr3"]["labels"] == ["none", "plus", "minus"]
    assert attrs["lpp"]["kind"] == "graph" and attrs["lpp"]["num_items"] == 4 and attrs["lpp"]["labels"] == list("wxyz")
    assert attrs["private_sample"]["prior"] == [0.2, 0.3, 0.5]
    hist = {h["epsilon"]: h["available"] for h in attrs["urr"]["histogram"]}
    assert hist["5.000000"] == 40 and hist["5.100000"] == 0


def test_histogram_of_a_oneshot_attribute_counts_losses_and_leaves_out_deleted_raw_values(api, oneshot, buyer):
    attribute = oneshot["rr3"]
    vs = list(Value.objects.filter(attribute=attribute).order_by("id"))
    value_delete_raw(value_id=vs[0].id)
    BudgetAccount.objects.filter(value=vs[1]).update(chain_loss=Decimal("0"), oneshot_loss=Decimal("3"))
    hist = {h["epsilon"]: h["available"] for d in api.get("/api/v1/datasets/?histogram=full").json()["results"]
            for a in d["attributes"] if a["id"] == attribute.id for h in a["histogram"]}
    assert hist["2.000000"] == 29 and hist["2.100000"] == 28 and hist["5.000000"] == 28
    for eps in ("2", "2.1"):
        q = post(api, "/api/v1/quotes/", {"attribute": attribute.id, "epsilon": eps}).json()
        assert q["included"] == hist[f"{Decimal(eps):.6f}"]
        assert q["excluded"]["no_raw"] == 1


@pytest.mark.parametrize("mechanism", list(REQUESTS))
def test_quote_then_purchase_of_each_oneshot_mechanism(api, buyer, oneshot, mechanism):
    attribute = oneshot[mechanism]
    body = {"attribute": attribute.id, **REQUESTS[mechanism]}
    q = post(api, "/api/v1/quotes/", body)
    assert q.status_code == 200, q.content
    quote = q.json()
    unit = PricePolicy.parse(POLICY).price(Decimal(CHARGED[mechanism]))
    assert (quote["mechanism"], quote["charged_epsilon"], quote["included"]) == (
        mechanism, CHARGED[mechanism], SIZES[mechanism])
    assert Decimal(quote["price"]) == unit * SIZES[mechanism] and quote["upgrade_credit"] == "0.0000"
    assert quote["guarantee"] == ("uldp" if mechanism in ("urr", "urap") else "ldp")
    predicted = quote["predicted_error"]
    if mechanism in ("urr", "urap"):
        assert predicted["expected_l2"] > 0 and len(predicted["per_category"]) == 7  # labels + 2 bots
    elif mechanism == "rr3":
        assert np.array(predicted["covariance"]).shape == (3, 3)
    elif mechanism == "lpp":
        assert predicted["target"] == "item_degree_weight"
        assert [row["label"] for row in predicted["per_category"]] == ["degree of an item", "weight of an item"]
        assert all(0 < row["standard_error"] <= row["worst_case_standard_error"] for row in predicted["per_category"])
    before = credit(buyer)
    r = post(api, "/api/v1/purchases/", {"quote": quote["quote"]})
    assert r.status_code == 201, r.content
    p = r.json()
    assert (p["mechanism"], p["charged_epsilon"], p["guarantee"], p["included"]) == (
        mechanism, CHARGED[mechanism], quote["guarantee"], SIZES[mechanism])
    assert p["parameters"] == Purchase.objects.get(id=p["id"]).parameters
    assert credit(buyer) == before - Decimal(p["price"])
    rows = api.get(f"/api/v1/purchases/{p['id']}/outputs/?page_size=100").json()["results"]
    assert len(rows) == SIZES[mechanism] and {r["epsilon"] for r in rows} == {CHARGED[mechanism]}
    outputs = [r["output"] for r in rows]
    if mechanism == "urr":
        assert set(outputs) <= {"a", "b", "c", "d", "e", "⊥home", "⊥work"}
    elif mechanism == "urap":
        assert all(len(o) == 7 and set(o) <= {0, 1} for o in outputs)
    elif mechanism == "lpp":
        assert all(o.split(":")[0] in "wxyz" and o.split(":")[1] in ("none", "+1", "-1") for o in outputs)
    elif mechanism == "rr3":
        assert set(outputs) <= {"none", "plus", "minus"}
    else:
        assert set(outputs) <= {"x", "y", "z"}
    body_csv = b"".join(api.get(f"/api/v1/purchases/{p['id']}/outputs/?format=csv").streaming_content).decode()
    lines = list(csv.reader(io.StringIO(body_csv)))
    assert lines[0] == ["pseudonym", "epsilon", "output"] and len(lines) == SIZES[mechanism] + 1
    if mechanism == "urap":
        assert all(len(line[2]) == 7 and set(line[2]) <= {"0", "1"} for line in lines[1:])
    est = api.get(f"/api/v1/purchases/{p['id']}/estimate/")
    assert est.status_code == 200, est.content
    e = est.json()
    assert e["mechanism"] == mechanism and e["n"] == SIZES[mechanism] and e["guarantee"] == quote["guarantee"]
    if mechanism == "lpp":
        assert [i["item"] for i in e["graph"]["items"]] == list("wxyz") and e["graph"]["users"] == 24
        assert sum(i["samples"] for i in e["graph"]["items"]) == 24
        for i in e["graph"]["items"]:
            for name in ("degree", "weight"):
                if i["samples"]:
                    se = i[f"{name}_standard_error"]
                    assert se >= 0 and i[f"{name}_ci95_low"] == pytest.approx(i[name] - 1.959963984540054 * se)
                    assert i[f"{name}_ci95_high"] == pytest.approx(i[name] + 1.959963984540054 * se)
                else:
                    assert i[name] is None and i[f"{name}_standard_error"] is None
    else:
        assert e["graph"] is None and len(e["frequencies"]) == {"urr": 7, "urap": 7}.get(mechanism, 3)
        assert all(0 <= f["projected"] <= 1 for f in e["frequencies"])


def test_oneshot_purchases_are_idempotent_and_conflicts_are_409(api, buyer, oneshot):
    attribute = oneshot["lpp"]
    key = str(uuid.uuid4())
    first = post(api, "/api/v1/purchases/", {"attribute": attribute.id, "eps1": "1", "eps2": "1"}, key)
    assert first.status_code == 201
    balance, entries = credit(buyer), LedgerEntry.objects.count()
    again = post(api, "/api/v1/purchases/", {"attribute": attribute.id, "eps1": "1", "eps2": "1"}, key)
    assert again.status_code == 200 and again.json() == first.json()
    assert credit(buyer) == balance and LedgerEntry.objects.count() == entries
    other = post(api, "/api/v1/purchases/", {"attribute": attribute.id, "eps1": "1", "eps2": "2"}, key)
    assert_problem(other, 409)
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("oneshot_loss", flat=True)) == {
        Decimal("1.379886")}


def test_two_purchases_compose_additively_through_the_api(api, oneshot):
    attribute = oneshot["urr"]
    for _ in range(2):
        assert post(api, "/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "2.5"}).status_code == 201
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("oneshot_loss", flat=True)) == {
        Decimal("5")}
    problem = assert_problem(post(api, "/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "0.1"}), 400)
    # the ceiling (5) is not below 0.1: the 5 already spent leaves no remaining budget, and the problem says so
    assert (problem["excluded"]["ceiling"], problem["excluded"]["budget"]) == (0, 40)
    assert "40 have too little budget remaining" in problem["detail"]
    assert "0 have a ceiling below it" in problem["detail"]


BAD = [
    ("urr", {"epsilon": "1", "theta": "0.5"}, "theta"),
    ("urr", {"epsilon": "1", "eps1": "1"}, "eps1"),
    ("urr", {}, "epsilon"),
    ("urap", {"epsilon": "1", "theta": "1"}, "theta"),
    ("urap", {"epsilon": "1", "theta": "NaN"}, "theta"),
    ("urap", {"epsilon": "1", "theta": -0.5}, "theta"),
    ("urap", {"epsilon": "1", "theta": "0.1234567"}, "theta"),
    ("rr3", {"family": "rr3_club", "epsilon": "1"}, "family"),
    ("rr3", {"family": "rr3_ddagger", "eps1": "1"}, "eps2"),
    ("rr3", {"family": "ewrr3", "eps1": "1", "eps2": "1"}, "eps1"),
    ("lpp", {"epsilon": "1"}, "epsilon"),
    ("lpp", {"eps1": "1", "eps2": "-1"}, "eps2"),
    ("lpp", {"eps1": "inf", "eps2": "1"}, "eps1"),
    ("lpp", {"eps1": "1e308", "eps2": "1"}, "eps1"),
    ("lpp", {"eps1": "31", "eps2": "1"}, "eps1"),
    ("lpp", {"eps1": 0, "eps2": "1"}, "eps1"),
    ("lpp", {"eps1": [1], "eps2": "1"}, "eps1"),
    ("private_sample", {"epsilon": "1", "family": "ewrr3"}, "family"),
    ("urr", {"epsilon": "45"}, "epsilon"),          # cells below 2^-64: the sampler cannot honour it
    ("lpp", {"eps1": "1", "eps2": "45"}, "eps2"),
]


@pytest.mark.parametrize("endpoint", ["quotes", "purchases"])
@pytest.mark.parametrize("mechanism, body, field", BAD, ids=[f"{m}-{f}-{i}" for i, (m, _, f) in enumerate(BAD)])
def test_bad_mechanism_parameters_are_400_problems_naming_the_field(api, oneshot, endpoint, mechanism, body, field):
    r = post(api, f"/api/v1/{endpoint}/", {"attribute": oneshot[mechanism].id, **body})
    problem = assert_problem(r, 400)
    assert field in problem["errors"], problem
    assert not Purchase.objects.exists()


def test_chain_attributes_refuse_oneshot_parameters_and_surveys_go_to_their_endpoint(api, categorical, members):
    problem = assert_problem(post(api, "/api/v1/purchases/", {"attribute": categorical.id, "epsilon": "1",
                                                             "eps2": "1"}), 400)
    assert "eps2" in problem["errors"]
    q = post(api, "/api/v1/quotes/", {"attribute": members.id, "mechanism": "warner", "epsilon": "1"}).json()
    problem = assert_problem(post(api, "/api/v1/purchases/", {"quote": q["quote"]}), 400)
    assert "surveys" in problem["errors"]["quote"][0]
    assert_problem(post(api, "/api/v1/quotes/", {"attribute": categorical.id, "mechanism": "warner",
                                                 "epsilon": "1"}), 400)
    assert_problem(post(api, "/api/v1/quotes/", {"attribute": members.id, "mechanism": "crystal_ball",
                                                 "epsilon": "1"}), 400)
    assert not Purchase.objects.exists()


# ---------------------------------------------------------------------------------------------------- surveys

SURVEY_BODIES = {"warner": {}, "simmons": {"pi_b": "0.4"}, "christofides": {"p2": "0.1"},
                 "improved_christofides": {"p2": "0.1"}}


@pytest.mark.parametrize("mechanism", list(SURVEY_BODIES))
def test_surveys_return_only_the_aggregate(api, buyer, members, mechanism):
    body = {"attribute": members.id, "mechanism": mechanism, "epsilon": "1", **SURVEY_BODIES[mechanism]}
    q = post(api, "/api/v1/quotes/", body)
    assert q.status_code == 200, q.content
    quote = q.json()
    assert quote["predicted_error"]["target"] == "proportion" and quote["predicted_error"]["variance"] > 0
    r = post(api, "/api/v1/surveys/", body)
    assert r.status_code == 201, r.content
    survey = r.json()
    assert r["Location"] == f"/api/v1/surveys/{survey['id']}/"
    assert survey["respondents"] == 200 and survey["status"] == "completed"
    result = survey["result"]
    assert set(result) == {"estimate", "variance", "standard_error", "ci95_low", "ci95_high", "n", "variance_note",
                           "mechanism", "epsilon", "guarantee", "guarantee_label"}
    assert result["n"] == 200 and result["ci95_low"] < result["estimate"] < result["ci95_high"]
    assert survey["charged_epsilon"] == quote["charged_epsilon"] == result["epsilon"]
    if mechanism == "improved_christofides":
        assert survey["guarantee"] == "per_report_non_collusion"
        assert survey["guarantee_label"] == "per-report eps, non-collusion assumption"
        assert Decimal(survey["charged_epsilon"]) <= Decimal("1")
        assert survey["parameters"]["deck"] == surveys.ic_deck_counts(200, 1.0, 0.1).tolist()
    else:
        assert survey["guarantee"] == "ldp" and survey["charged_epsilon"] == "1.000000"
    assert api.get(f"/api/v1/surveys/{survey['id']}/").json() == survey
    assert [s["id"] for s in api.get("/api/v1/surveys/").json()["results"]] == [survey["id"]]
    # a survey is not a purchase: no outputs, no estimate endpoint, not listed with purchases
    assert api.get("/api/v1/purchases/").json()["results"] == []
    for path in (f"/api/v1/purchases/{survey['id']}/", f"/api/v1/purchases/{survey['id']}/outputs/",
                 f"/api/v1/purchases/{survey['id']}/estimate/", f"/api/v1/surveys/{survey['id']}/outputs/"):
        assert_problem(api.get(path), 404)
    assert not PurchaseChunk.objects.filter(purchase_id=survey["id"]).exists()
    # replay: the same survey, charged once
    balance = credit(buyer)
    key = str(uuid.uuid4())
    first = post(api, "/api/v1/surveys/", body, key)
    assert post(api, "/api/v1/surveys/", body, key).json() == first.json() and credit(buyer) < balance
    assert_problem(post(api, "/api/v1/surveys/", {**body, "epsilon": "0.5"}, key), 409)


def test_survey_from_a_quote_and_errors(api, members, categorical):
    q = post(api, "/api/v1/quotes/", {"attribute": members.id, "mechanism": "simmons", "epsilon": "0.5",
                                      "pi_b": "0.3"}).json()
    r = post(api, "/api/v1/surveys/", {"quote": q["quote"]})
    assert r.status_code == 201 and r.json()["parameters"] == {"pi_b": "0.300000"}
    purchase_quote = post(api, "/api/v1/quotes/", {"attribute": members.id, "epsilon": "0.5"}).json()
    problem = assert_problem(post(api, "/api/v1/surveys/", {"quote": purchase_quote["quote"]}), 400)
    assert "purchases" in problem["errors"]["quote"][0]
    cases = [({"attribute": members.id, "epsilon": "1"}, "mechanism"),
             ({"attribute": categorical.id, "mechanism": "warner", "epsilon": "1"}, "attribute"),
             ({"attribute": members.id, "mechanism": "simmons", "epsilon": "1"}, "pi_b"),
             ({"attribute": members.id, "mechanism": "christofides", "epsilon": "1", "p2": "1"}, "p2"),
             ({"attribute": members.id, "mechanism": "warner", "epsilon": "1", "theta": "0.5"}, "theta"),
             ({"attribute": members.id, "mechanism": "warner", "epsilon": "NaN"}, "epsilon"),
             ({"attribute": members.id, "mechanism": "warner"}, "epsilon"),
             ({"attribute": members.id, "mechanism": "nope", "epsilon": "1"}, "mechanism")]
    for body, field in cases:
        problem = assert_problem(post(api, "/api/v1/surveys/", body), 400)
        assert field in problem["errors"], (body, problem)
    assert_problem(post(api, "/api/v1/surveys/", {"quote": q["quote"], "epsilon": "1"}), 400)


def test_an_ic_survey_too_small_for_its_deck_is_a_clear_400(api, db):
    tiny = BinaryAttributeFactory(price_policy=POLICY)
    contribute(tiny, ["yes", "no", "no"], ceiling="5", seed=9)
    problem = assert_problem(post(api, "/api/v1/surveys/", {"attribute": tiny.id, "mechanism": "improved_christofides",
                                                            "epsilon": "0.1", "p2": "0.1"}), 400)
    assert problem["detail"]
    assert not LedgerEntry.objects.filter(kind="oneshot_release").exists()


def test_improved_christofides_answers_never_leave_the_server(members, buyer, auditor, staff, owner, monkeypatch,
                                                              settings):
    """The deal's reports are recorded as they are drawn; afterwards no response of any endpoint, for any role, and
    no stored row contains them: only the aggregate estimate leaves, and the ledger shows the distinct guarantee."""
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 10 ** 9
    dealt = []
    real = surveys.improved_christofides_deal

    def recording(values, counts, rng=None):
        reports = real(values, counts, rng)
        dealt.append(np.array(reports))
        return reports

    monkeypatch.setattr(surveys, "improved_christofides_deal", recording)
    api = client_for(buyer)
    r = post(api, "/api/v1/surveys/", {"attribute": members.id, "mechanism": "improved_christofides", "epsilon": "1",
                                       "p2": "0.2"})
    assert r.status_code == 201, r.content
    sid = r.json()["id"]
    assert len(dealt) == 1 and dealt[0].size == 200
    reports = dealt[0]
    responses = []
    for user in (buyer, auditor, staff, owner):
        client = client_for(user)
        for path in ("/api/v1/surveys/", f"/api/v1/surveys/{sid}/", "/api/v1/purchases/",
                     f"/api/v1/purchases/{sid}/", f"/api/v1/purchases/{sid}/outputs/",
                     f"/api/v1/purchases/{sid}/outputs/?format=csv", f"/api/v1/purchases/{sid}/estimate/",
                     "/api/v1/datasets/", "/api/v1/audit/ledger/?page_size=1000"):
            resp = client.get(path)
            body = b"".join(resp.streaming_content) if resp.streaming else resp.content
            responses.append((user.role, path, resp.status_code, body.decode()))
    as_text = [",".join(map(str, reports[:30].tolist())), ", ".join(map(str, reports[:30].tolist()))]
    for role, path, status, text in responses:
        assert "reports" not in text and "cards" not in text, (role, path)
        assert not any(seq in text for seq in as_text), (role, path)
        if text.startswith("{") or text.startswith("["):
            _assert_no_report_vectors(json.loads(text), reports, (role, path))
    survey = Purchase.objects.get(id=sid)
    assert not PurchaseChunk.objects.filter(purchase=survey).exists()
    assert not any(isinstance(v, list) for v in survey.result.values())
    assert set(LedgerEntry.objects.filter(purchase=survey).values_list("guarantee", flat=True)) == {
        "per_report_non_collusion"}
    buyer_view = client_for(buyer).get(f"/api/v1/surveys/{sid}/").json()
    auditor_view = client_for(auditor).get(f"/api/v1/surveys/{sid}/").json()
    assert buyer_view["result"]["estimate"] == survey.result["estimate"]
    assert auditor_view["result"] is None and auditor_view["guarantee"] == "per_report_non_collusion"
    assert client_for(owner).get(f"/api/v1/surveys/{sid}/").status_code == 403


def _assert_no_report_vectors(body, reports, where):
    """No list in the body holds the respondents' reports (or any 200 values drawn from 1..3)."""
    if isinstance(body, dict):
        for v in body.values():
            _assert_no_report_vectors(v, reports, where)
    elif isinstance(body, list):
        if len(body) >= 20 and all(isinstance(x, int) and 1 <= x <= 3 for x in body):
            raise AssertionError(f"a list of card-like values in {where}")
        for v in body:
            _assert_no_report_vectors(v, reports, where)


@pytest.mark.parametrize("mechanism", list(REQUESTS))
@pytest.mark.parametrize("level", ["tiny", "high", "huge", "huger"])
def test_extreme_epsilons_quote_buy_and_estimate_without_a_server_error(api, mechanism, level):
    """Up to the service's limit, 30, a purchase quotes, runs and estimates; above, the request is a 400 naming
    the limit (docs/mechanisms.md)."""
    factory = {"urr": UrrAttributeFactory, "urap": UrapAttributeFactory, "rr3": TernaryAttributeFactory,
               "lpp": GraphAttributeFactory, "private_sample": DistributionAttributeFactory}[mechanism]
    attribute = factory(price_policy=POLICY)
    raws = {"urr": ["a", "c"], "urap": ["b", "e"], "rr3": ["none", "minus"], "lpp": [{"0": 1}, {}],
            "private_sample": [[1, 0, 0], [0.2, 0.3, 0.5]]}[mechanism] * 5
    contribute(attribute, raws, ceiling="700", seed=7)
    # 30 is the largest epsilon the service sells (docs/mechanisms.md, "The epsilon limit"); 40 is within the
    # one-shot samplers' own limits (about 43.67) but above the service's, 699 above both
    eps = {"tiny": "0.000001", "high": "30", "huge": "40", "huger": "699"}[level]
    body = {"attribute": attribute.id, **({"eps1": eps, "eps2": eps} if mechanism in ("lpp", "rr3") and level == "tiny"
                                          else {"eps1": "1", "eps2": eps} if mechanism in ("lpp", "rr3")
                                          else {"epsilon": eps})}
    if level in ("huge", "huger"):
        for endpoint in ("quotes", "purchases"):
            problem = assert_problem(post(api, f"/api/v1/{endpoint}/", body), 400)
            assert "largest epsilon" in problem["detail"] or "must be at most" in problem["detail"], problem
        return
    q = post(api, "/api/v1/quotes/", body)
    assert q.status_code == 200, q.content
    r = post(api, "/api/v1/purchases/", body)
    assert r.status_code == 201, r.content
    pid = r.json()["id"]
    assert api.get(f"/api/v1/purchases/{pid}/outputs/").status_code == 200
    est = api.get(f"/api/v1/purchases/{pid}/estimate/")
    assert est.status_code == 200, est.content


@pytest.mark.parametrize("path, body", [
    ("/api/v1/purchases/", {"epsilon": "1"}),
    ("/api/v1/surveys/", {"mechanism": "christofides", "epsilon": "1", "p2": "0.2"}),
])
def test_large_oneshot_purchases_and_surveys_run_in_celery(api, members, oneshot, settings, path, body,
                                                           django_capture_on_commit_callbacks):
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 5
    attribute = oneshot["urr"] if "purchases" in path else members
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        r = post(api, path, {"attribute": attribute.id, **body})
    assert r.status_code == 202, r.content
    # run_purchase enqueued on the claim's commit, settle_earnings on the purchase's (both ran: Celery is eager in
    # tests): the owners are paid
    assert len(callbacks) == 2
    assert Settlement.objects.filter(shard=attribute.id).exists()
    assert MoneyAccount.objects.get(kind="owners_pending", shard=attribute.id).balance == 0
    detail = api.get(r["Location"]).json()
    assert detail["status"] == "completed" and detail["charged_epsilon"] == "1.000000"
    assert Purchase.objects.get(id=detail["id"]).included == (40 if "purchases" in path else 200)
