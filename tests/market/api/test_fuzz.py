"""Every operation of the OpenAPI schema fuzzed with schemathesis: no input makes a 5xx
(docs/quality-targets.md#reliability).

The schema is loaded in-process from the Django WSGI application (``/api/schema/``) and every operation it
declares is fuzzed -- new endpoints are picked up without touching this file.  The data is real, so that the
generated requests reach deep code paths and not only validation: a buyer with credit (authenticated with a
token on every call), an attribute of each kind with values and a valid price policy, and completed purchases
(so outputs, CSV and estimates have something to serve).  Sequences are reset, so the small integers the
fuzzer favours are the ids of real datasets, attributes and purchases.

``Idempotency-Key``: a fresh UUID per call, so generated purchases really run; except when the generated key is
not a valid one (then it is sent as generated, to fuzz the key's validation) or is a short one (sent as it is,
so keys repeat: replays with the same or a different body).

Bounded and reproducible: a fixed seed, deterministic generation, at most ``MAX_EXAMPLES`` generated cases per
operation and phase, no example database.  Checks: ``not_a_server_error`` for every call, and the response
conforms to the schema (status code, content type, body).  The traceback of any server error is collected
(``got_request_exception``) and shown in the failure, so a 5xx is reported with its cause.

The owner API (``/api/v1/owner/``) is fuzzed the same way as an owner (the buyer only ever gets its 403s).  Then,
case by case, the inputs a red-team run found to make a 500 or to be read leniently as numbers (malformed ids in
paths, integers beyond ``bigint``, times out of range, cursors, ``"1_000"``, ``"+5"``, ``"١٠"``, ...): each is a
4xx ``application/problem+json`` (docs/errors.md#numbers-in-requests).
"""
from __future__ import annotations

import base64
import os
import traceback
import uuid
from collections import Counter, defaultdict
from decimal import Decimal
from urllib.parse import quote

import numpy as np
import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from knox.models import AuthToken
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ldpmarket.api import KEY_RE
from market import selectors
from market.models import Value
from market.purchases import oneshot, oneshot_specs
from market.purchases import quotes as market_quotes
from market.purchases.execution import purchase_claim, purchase_execute
from market.values.services import values_create_many
from tests.factories import (
    AuditorFactory,
    BinaryAttributeFactory,
    BuyerFactory,
    CategoricalAttributeFactory,
    DatasetFactory,
    GraphAttributeFactory,
    NumericAttributeFactory,
    OwnerFactory,
    StaffFactory,
    StringAttributeFactory,
    UrrAttributeFactory,
)
from tests.market.api.conftest import LABELS, POLICY, client_for, contribute, fund

# One test item (schemathesis runs each operation as a subtest of it); a hard time limit if the machine crawls.
pytestmark = [pytest.mark.django_db(transaction=True, reset_sequences=True), pytest.mark.timeout(600)]

#: Not a 5xx, and the response is what the schema says (status code, content type, headers, body).  Left out:
#: ``positive_data_acceptance`` (the schema cannot say everything the API refuses: epsilon "0" matches the string
#: pattern, a cohort is only valid for string attributes, ...) and ``ignored_auth`` (every call carries the token).
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
#: Operations whose documented responses are known to be incomplete (reported; remove the entry once fixed):
#: their status codes are not checked against the schema -- not a 5xx, content types and bodies still are.
KNOWN_GAPS: dict[str, str] = {}
#: Deeper or different runs by hand: LDP_FUZZ_EXAMPLES=400 LDP_FUZZ_SEED=7 pytest tests/market/api/test_fuzz.py
SEED = int(os.environ.get("LDP_FUZZ_SEED", "20250101"))
MAX_EXAMPLES = int(os.environ.get("LDP_FUZZ_EXAMPLES", "30"))
#: Who calls (token auth): the buyer; by hand, another role's fixture (``LDP_FUZZ_ROLE=staff``, ``owner``,
#: ``auditor``: other code paths).
ROLE = os.environ.get("LDP_FUZZ_ROLE", "buyer")
#: Operations that revoke the calling token: they get a throwaway token of their own.
REVOKING = {"POST /api/v1/auth/logout/", "POST /api/v1/auth/logout-all/"}
#: Epsilons the fixtures' values can be sold at (their ceilings are 2 and 3) and some they cannot.
EPSILONS = ["0.5", "1", "1.5", "0.25", "2", "0.1", "2.5"]


class Fuzz:
    """What the run saw: status codes per operation, and the tracebacks of server errors."""

    def __init__(self):
        self.statuses: dict[str, Counter] = defaultdict(Counter)
        self.tracebacks: list[str] = []

    def record_exception(self, sender, request=None, **kwargs):
        self.tracebacks.append(f"{getattr(request, 'method', '?')} {request.get_full_path() if request else '?'}\n"
                               + traceback.format_exc())


@pytest.fixture
def world(settings, request):
    """Committed data for the WSGI app: a funded buyer, one attribute of each kind, completed purchases, quotes."""
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 25  # categorical, binary: the Celery path (eager in tests), 202
    # The string attribute comes first: id 1, the id generated bodies favour.  Its 40 values exceed the threshold
    # (Celery, 202) while one RAPPOR cohort of it does not (sold in the request, 201), so generated purchases reach
    # both paths whatever else the request bodies' forms (several since the one-shot mechanisms) make of them.
    string = StringAttributeFactory(price_policy=POLICY, num_bits=16, num_hashes=2, num_cohorts=2)
    dataset = DatasetFactory()
    categorical = CategoricalAttributeFactory(dataset=dataset, labels=LABELS, price_policy=POLICY)
    binary = BinaryAttributeFactory(dataset=dataset, price_policy=POLICY)
    numeric = NumericAttributeFactory(price_policy=POLICY)
    contribute(categorical, LABELS * 10, ceiling="2", seed=1)
    contribute(binary, ["yes"] * 30 + ["no"] * 20, ceiling="3", seed=2)
    contribute(numeric, [str(x) for x in range(0, 100, 5)], ceiling="3", seed=3)
    contribute(string, ["apple", "pear", "plum", "fig"] * 10, ceiling="2", seed=4)
    assert string.id == 1 and 0 < Value.objects.filter(attribute=string, cohort=0).count() <= 25
    # one-shot attributes (uRR with PUM tags, an LPP graph): their ceilings leave room for many purchases
    urr = UrrAttributeFactory(dataset=dataset, price_policy=POLICY)
    graph = GraphAttributeFactory(dataset=dataset, price_policy=POLICY)
    contribute(urr, ["a", "b", "c", "d", "e"] * 4, ceiling="600", seed=5)
    contribute(graph, [{"0": 0.5}, {}, [1, None, -1, None]] * 4, ceiling="600", seed=6)
    binary_surveys = BinaryAttributeFactory(price_policy=POLICY)
    contribute(binary_surveys, ["yes"] * 30 + ["no"] * 70, ceiling="600", seed=7)
    buyer = BuyerFactory()
    fund(buyer, "1000000")
    other = BuyerFactory()
    fund(other, "100")
    purchases = []
    for who, attribute, epsilon in [(buyer, categorical, "0.5"), (buyer, binary, "1"), (buyer, numeric, "1.5"),
                                    (buyer, string, "0.7"), (other, categorical, "1")]:
        purchase, _ = purchase_claim(buyer=who, attribute=attribute, epsilon=epsilon, cohort=None,
                                     idempotency_key=uuid.uuid4().hex)
        purchases.append(purchase_execute(purchase_id=purchase.id))
    for attribute, request in [(urr, {"epsilon": "1"}), (graph, {"eps1": "1", "eps2": "1"}),
                               (binary_surveys, {"mechanism": "improved_christofides", "epsilon": "1", "p2": "0.1"}),
                               (binary_surveys, {"mechanism": "warner", "epsilon": "1"})]:
        spec = oneshot_specs.parse_spec(attribute, **request)
        claimed, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attribute, spec=spec, cohort=None,
                                           idempotency_key=uuid.uuid4().hex)
        purchases.append(purchase_execute(purchase_id=claimed.id))
    # quotes the buyer can turn into purchases (the fuzzer cannot forge one): body.quote draws from them
    quotes = [market_quotes.quote_issue(buyer_id=buyer.id, attribute=attribute, epsilon=Decimal(epsilon),
                                        cohort=None, policy=selectors.price_policy_or_none(attribute)).token
              for attribute, epsilon in [(categorical, "0.6"), (binary, "2"), (numeric, "0.3"), (string, "1"),
                                         (numeric, "0.5"), (string, "0.5")]]
    # (the generated bodies' favourite attribute id, 1, is the categorical one: Celery, 202; most quotes are for
    # attributes sold in the request, 201, so both paths are reached)
    quotes += [market_quotes.oneshot_quote_issue(buyer_id=buyer.id, attribute=attribute, cohort=None,
                                                 spec=oneshot_specs.parse_spec(attribute, **request),
                                                 policy=selectors.price_policy_or_none(attribute)).token
               for attribute, request in [(urr, {"epsilon": "0.5"}), (graph, {"eps1": "0.5", "eps2": "1"}),
                                          (binary_surveys, {"mechanism": "simmons", "epsilon": "1", "pi_b": "0.3"})]]
    user = buyer if ROLE == "buyer" else request.getfixturevalue(ROLE)
    _, token = AuthToken.objects.create(user=user)
    ids = ({a.id for a in (categorical, binary, numeric, string, urr, graph, binary_surveys)}
           | {a.dataset_id for a in (categorical, numeric)} | {p.id for p in purchases})
    # body.attribute: the attributes themselves (half of them sold in the request, half in Celery), so that
    # generated purchases, whose bodies now have several forms, still often reach the real work
    attributes = sorted(a.id for a in (categorical, binary, numeric, string, urr, graph, binary_surveys))
    return {"ids": sorted(ids), "attributes": attributes, "quotes": quotes, "token": token}


@pytest.fixture
def fuzz(world):
    """Server errors' tracebacks and every response's status; afterwards, that the fuzz got past validation."""
    seen = Fuzz()
    signals.got_request_exception.connect(seen.record_exception)
    # Keep the one database connection across requests, as Django's test client does (speed).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield seen
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
        signals.got_request_exception.disconnect(seen.record_exception)
    print("responses per operation:", {k: dict(v) for k, v in seen.statuses.items()})
    # the fuzz reached the real work, not only the validation (if not: the data or the dictionaries need a look)
    if not seen.tracebacks and ROLE == "buyer":
        made = seen.statuses["POST /api/v1/purchases/"]
        assert made[201] and made[202], f"no generated purchase succeeded: {dict(made)}"
        for label in ("GET /api/v1/purchases/{id}/outputs/", "GET /api/v1/purchases/{id}/estimate/",
                      "POST /api/v1/quotes/", "GET /api/v1/surveys/{id}/"):
            assert seen.statuses[label][200], f"{label} never succeeded: {dict(seen.statuses[label])}"


@pytest.fixture
def api_schema(world, request):
    """The schema as the app serves it, with the fuzzing configuration (seed, bounds, auth, dictionaries)."""
    if not hasattr(request.node, "_nodeid"):
        # schemathesis (4.32) names each operation's subtest through ``item._nodeid``: pytest 9.2 no longer has it
        request.node._nodeid = request.node.nodeid
    config = schemathesis.Config.from_dict({
        "seed": SEED,
        "headers": {"Authorization": f"Token {world['token']}"},
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none",
                       "with-security-parameters": False},
        "phases": {"stateful": {"enabled": False}},
        # Half the time, ids and epsilons that exist and sell (the rest: whatever the schema allows, or not).
        "dictionaries": {"ids": {"values": world["ids"]}, "attributes": {"values": world["attributes"]},
                         "epsilons": {"values": EPSILONS},
                         "quotes": {"values": world["quotes"]}},
        "parameters": {"path.id": {"dictionary": "ids", "probability": 0.5},
                       "query.attribute": {"dictionary": "ids", "probability": 0.5},
                       "query.dataset": {"dictionary": "ids", "probability": 0.5},
                       "body.attribute": {"dictionary": "attributes", "probability": 0.5},
                       "body.epsilon": {"dictionary": "epsilons", "probability": 0.5},
                       "body.quote": {"dictionary": "quotes", "probability": 0.5}},
    })
    return schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(), config=config)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
def test_no_input_makes_a_server_error(case, fuzz):
    """Every operation of the schema, generated inputs valid and invalid: never a 5xx, always as documented."""
    if case.headers and "Idempotency-Key" in case.headers:
        key = case.headers["Idempotency-Key"]
        if KEY_RE.match(key) and len(key) > 2:
            case.headers["Idempotency-Key"] = str(uuid.uuid4())
    before = len(fuzz.tracebacks)
    headers = {}
    if case.operation.label in REVOKING:  # revoking the run's own token would leave every later call a 401
        headers["Authorization"] = f"Token {AuthToken.objects.create(user=BuyerFactory())[1]}"
    response = case.call(headers=headers)
    kind = response.status_code
    if 400 <= kind < 500 and response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        kind = f"{kind} {response.json()['type'].rsplit('/', 1)[-1]}"
    fuzz.statuses[case.operation.label][kind] += 1
    assert response.status_code < 500, (
        f"{case.operation.label} answered {response.status_code}\n{case.as_curl_command()}\n"
        + "\n".join(fuzz.tracebacks[before:]))
    checks = CHECKS
    if case.operation.label in KNOWN_GAPS:
        checks = [check for check in CHECKS if check is not status_code_conformance]
    case.validate_response(response, checks=checks)


# ======================================================================= the owner API, fuzzed as an owner

@pytest.fixture
def owner_world():
    """An owner (token auth) with an owner-held value (chain uploads), a service-held one and an attribute to
    contribute to; other owners' values (404 for this one)."""
    held_attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=POLICY)
    numeric = NumericAttributeFactory(price_policy=POLICY)
    binary = BinaryAttributeFactory(price_policy=POLICY)
    owner = OwnerFactory()
    held = values_create_many(attribute=held_attribute, owners=[owner], raws=None, ceiling="1", custody="owner")
    service = values_create_many(attribute=numeric, owners=[owner], raws=["42"], ceiling="2",
                                 rng=np.random.default_rng(1))
    others = contribute(held_attribute, LABELS * 2, ceiling="2", seed=2)
    _, token = AuthToken.objects.create(user=owner)
    ids = sorted(v.id for v in held + service + others)
    return {"token": token, "ids": ids, "attributes": sorted({held_attribute.id, numeric.id, binary.id}),
            "held": held[0].id}


@pytest.fixture
def owner_api_schema(owner_world, request):
    if not hasattr(request.node, "_nodeid"):  # as api_schema
        request.node._nodeid = request.node.nodeid
    config = schemathesis.Config.from_dict({
        "seed": SEED,
        "headers": {"Authorization": f"Token {owner_world['token']}"},
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none",
                       "with-security-parameters": False},
        "phases": {"stateful": {"enabled": False}},
        "dictionaries": {"ids": {"values": owner_world["ids"]}, "attributes": {"values": owner_world["attributes"]},
                         "epsilons": {"values": ["0.1", "0.2", "0.3", "1", "0.15"]}},
        "parameters": {"path.id": {"dictionary": "ids", "probability": 0.5},
                       "query.value": {"dictionary": "ids", "probability": 0.5},
                       "body.attribute": {"dictionary": "attributes", "probability": 0.5},
                       "body.ceiling": {"dictionary": "epsilons", "probability": 0.5}},
    })
    return schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(), config=config)


owner_schema = schemathesis.pytest.from_fixture("owner_api_schema").include(path_regex=r"^/api/v1/owner/")


@pytest.fixture
def owner_fuzz(owner_world):
    seen = Fuzz()
    signals.got_request_exception.connect(seen.record_exception)
    try:
        yield seen
    finally:
        signals.got_request_exception.disconnect(seen.record_exception)
    print("responses per operation:", {k: dict(v) for k, v in seen.statuses.items()})


@owner_schema.parametrize()
def test_no_owner_api_input_makes_a_server_error(case, owner_fuzz):
    """The owner API (``/api/v1/owner/``) as an owner, generated inputs valid and invalid: never a 5xx."""
    before = len(owner_fuzz.tracebacks)
    response = case.call()
    owner_fuzz.statuses[case.operation.label][response.status_code] += 1
    assert response.status_code < 500, (
        f"{case.operation.label} answered {response.status_code}\n{case.as_curl_command()}\n"
        + "\n".join(owner_fuzz.tracebacks[before:]))
    case.validate_response(response, checks=CHECKS)


# ================================================== malformed numbers, times and cursors, case by case
# Each case found a 500 (or a lenient number read as a number) before ldpmarket.numbers; each is now a 4xx
# application/problem+json: 404 for an id in a path (no route), 400 invalid-input for anything else.

#: Ids in a path that are no id: not ASCII digits, a sign, exponent, NUL, "null", other digits, out of range.
BAD_PATH_IDS = ["abc", "1e3", "%00", "null", "+5", "-1", "0", "1_0", "%D9%A1%D9%A0", "%C2%B2", "%201", "1.0",
                "99999999999999999999", "9223372036854775808"]
#: Integers in a query parameter that Python reads but are no plain ASCII integer, or out of bigint range.
BAD_INTS = ["+1", "1_0", "%D9%A1", "%C2%B2", "%201", "1e3", "1.0", "99999999999999999999", "9223372036854775808"]
#: Decimals in a JSON string that Python reads but are no plain ASCII decimal.
LENIENT_DECIMALS = ["+1", "1_0", "\u0661", "\u0661.\u0665", "1e0", "0x1", "\u00b9"]
ARABIC = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")
PROBLEM_TYPE = "application/problem+json"


def _cursor(text: str) -> str:
    """A page cursor as REST framework's CursorPagination writes one (base64 of a query string)."""
    return quote(base64.b64encode(text.encode()).decode())


def _answer(client, method: str, url: str, body=None) -> tuple[int, str]:
    client.raise_request_exception = False  # a view's exception is the 500 it would be in production
    response = getattr(client, method)(url, body, format="json") if body is not None else getattr(client, method)(url)
    return response.status_code, response.get("Content-Type", "")


def _refused(client, cases, status: int | tuple = (400, 404)) -> list[str]:
    """The cases (method, url, body) not answered with ``status`` and application/problem+json."""
    wanted = (status,) if isinstance(status, int) else status
    wrong = []
    for method, url, body in cases:
        code, kind = _answer(client, method, url, body)
        if code not in wanted or kind != PROBLEM_TYPE:
            wrong.append(f"{method.upper()} {url} {body if body is not None else ''} -> {code} {kind}")
    return wrong


@pytest.fixture
def market_of_numbers(settings):
    """A purchase, an owner with a service-held and an owner-held value, token clients of every role."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"numbers-{uuid.uuid4()}"}}
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=POLICY)
    contribute(attribute, LABELS * 10, ceiling="2", seed=1)
    numeric = NumericAttributeFactory(price_policy=POLICY)
    buyer = BuyerFactory()
    fund(buyer, "1000")
    owner = OwnerFactory()
    held = values_create_many(attribute=attribute, owners=[owner], raws=None, ceiling="1", custody="owner")[0]
    service = values_create_many(attribute=numeric, owners=[owner], raws=["42"], ceiling="2",
                                 rng=np.random.default_rng(3))[0]
    clients = {"buyer": client_for(buyer), "owner": client_for(owner), "auditor": client_for(AuditorFactory()),
               "staff": client_for(StaffFactory())}
    r = clients["buyer"].post("/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "0.5"}, format="json",
                              HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
    assert r.status_code == 201, r.content
    return {"clients": clients, "attribute": attribute, "numeric": numeric, "purchase": r.json()["id"],
            "held": held.id, "service": service.id, "buyer": buyer, "owner": owner}


def test_malformed_ids_in_owner_api_paths_are_404_problems(market_of_numbers):
    """/api/v1/owner/values/{abc|1e3|%00|null|...}/ and .../chain/ were a 500 (``int(self.kwargs["pk"])``)."""
    owner = market_of_numbers["clients"]["owner"]
    cases = [("get", f"/api/v1/owner/values/{x}/", None) for x in BAD_PATH_IDS]
    cases += [("post", f"/api/v1/owner/values/{x}/chain/", {"epsilons": ["0.1"], "outputs": [0]})
              for x in BAD_PATH_IDS]
    wrong = _refused(owner, cases, 404)
    assert not wrong, "\n".join(wrong)


def test_ids_in_paths_are_plain_ascii_digits_everywhere(market_of_numbers):
    """An existing id written "+7", " 7", "07.0", in Arabic-Indic digits, ...: was read as the id (a 200); now no
    route matches (404), on every detail route; the id itself still works."""
    m = market_of_numbers
    buyer, owner, p = m["clients"]["buyer"], m["clients"]["owner"], m["purchase"]
    def spellings(n: int) -> list[str]:
        return [f"+{n}", f"%20{n}", str(n).translate(ARABIC), f"{n}.0", f"{n}_", f"{n}%00", f"{n}e0", f"-{n}"]

    cases = [("get", f"/api/v1/purchases/{x}/", None) for x in spellings(p) + BAD_PATH_IDS]
    cases += [("get", f"/api/v1/purchases/{x}/outputs/", None) for x in spellings(p)]
    cases += [("get", f"/api/v1/purchases/{x}/estimate/", None) for x in spellings(p)]
    cases += [("get", f"/api/v1/surveys/{x}/", None) for x in BAD_PATH_IDS]
    cases += [("get", f"/api/v1/datasets/{x}/", None) for x in spellings(m["attribute"].dataset_id) + BAD_PATH_IDS]
    wrong = _refused(buyer, cases, 404)
    wrong += _refused(owner, [("get", f"/api/v1/owner/values/{x}/", None) for x in spellings(m["service"])], 404)
    assert not wrong, "\n".join(wrong)
    assert buyer.get(f"/api/v1/purchases/{p}/").status_code == 200
    assert buyer.get(f"/api/v1/purchases/{p}/outputs/").status_code == 200
    assert owner.get(f"/api/v1/owner/values/{m['service']}/").status_code == 200


def test_a_chain_output_beyond_int64_is_a_400_problem(market_of_numbers):
    """``outputs: [2**63]`` in an owner chain upload overflowed numpy's int64 (a 500)."""
    owner, held = market_of_numbers["clients"]["owner"], market_of_numbers["held"]
    cases = [("post", f"/api/v1/owner/values/{held}/chain/", {"epsilons": ["0.1"], "outputs": [o]})
             for o in (2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 30)]
    wrong = _refused(owner, cases, 400)
    assert not wrong, "\n".join(wrong)
    ok = owner.post(f"/api/v1/owner/values/{held}/chain/", {"epsilons": ["0.1"], "outputs": [1]}, format="json")
    assert ok.status_code == 200, ok.content


def test_times_out_of_range_are_400_problems_and_any_offset_is_compared_in_utc(market_of_numbers):
    """``created_after=2759-11-21T18:02:46.4+16:50`` was a 500 on PostgreSQL (an offset beyond +-15:59 sent to the
    database), and ``9999-12-31T23:59:59-10:00`` (past the year 9999 in UTC) a 500 everywhere: now a time is
    converted to UTC first (any offset Python reads, as the money API already did), and one outside the years
    1-9999 in UTC is a 400."""
    m = market_of_numbers
    out_of_range = ["9999-12-31T23:59:59-10:00", "0001-01-01T00:00:00+01:00", "\u0662\u0660\u0662\u0660-01-01"]
    in_range = ["2759-11-21T18:02:46.4+16:50", "2020-01-01T00:00:00+23:59", "2020-01-01T00:00:00-23:59"]
    endpoints = [("auditor", "/api/v1/audit/ledger/", ("created_after", "created_before")),
                 ("buyer", "/api/v1/account/statement/", ("since", "until")),
                 ("staff", "/api/v1/staff/fees/", ("since", "until"))]
    wrong = []
    for role, url, names in endpoints:
        client = m["clients"][role]
        for name in names:
            wrong += _refused(client, [("get", f"{url}?{name}={quote(t)}", None) for t in out_of_range], 400)
            for t in in_range:
                code, kind = _answer(client, "get", f"{url}?{name}={quote(t)}")
                if code != 200:
                    wrong.append(f"GET {url}?{name}={t} -> {code} {kind} (a valid time)")
    assert not wrong, "\n".join(wrong)


def test_malformed_and_out_of_range_integer_query_parameters_are_400_problems(market_of_numbers):
    """``value=99999999999999999999`` (audit receipts) and ids beyond bigint in other filters were a 500 (the
    database, or SQLite's driver, refused them); integers Python reads leniently were taken."""
    m = market_of_numbers
    v = m["service"]
    by_role = {
        "auditor": ["/api/v1/audit/receipts/?value={x}", f"/api/v1/audit/receipts/?value={v}&tree_size={{x}}",
                    f"/api/v1/audit/receipts/?value={v}&after={{x}}",
                    "/api/v1/audit/ledger/?attribute={x}", "/api/v1/audit/ledger/?value={x}",
                    "/api/v1/audit/ledger/?purchase={x}"],
        "owner": ["/api/v1/owner/receipts/?value={x}", "/api/v1/owner/receipts/?tree_size={x}",
                  "/api/v1/owner/receipts/?after={x}"],
        "buyer": ["/api/v1/ledger/consistency/?first=1&second={x}", "/api/v1/ledger/consistency/?first={x}&second=1",
                  "/api/v1/purchases/?attribute={x}", "/api/v1/purchases/?dataset={x}",
                  f"/api/v1/purchases/{m['purchase']}/outputs/?page_size={{x}}"],
    }
    wrong = []
    for role, urls in by_role.items():
        wrong += _refused(m["clients"][role], [("get", u.format(x=x), None) for u in urls for x in BAD_INTS], 400)
    assert not wrong, "\n".join(wrong)


def test_users_named_by_id_take_plain_ascii_ids(market_of_numbers):
    """``buyer`` and ``owner`` filters and the top-up's ``buyer`` take an id or a username: "²" passed
    ``str.isdigit()`` and then made ``int()`` fail (a 500); "+7" or Arabic-Indic digits found the user with that
    id; an id beyond bigint reached the database."""
    m = market_of_numbers
    auditor, staff, buyer_id = m["clients"]["auditor"], m["clients"]["staff"], m["buyer"].id
    wrong = []
    for name in ("buyer", "owner"):
        for x in ["%C2%B2", "99999999999999999999", "9223372036854775808", str(buyer_id).translate(ARABIC)]:
            code, kind = _answer(auditor, "get", f"/api/v1/audit/ledger/?{name}={x}")
            rows = auditor.get(f"/api/v1/audit/ledger/?{name}={x}").json().get("results") if code == 200 else None
            if code != 200 or rows:
                wrong.append(f"GET /api/v1/audit/ledger/?{name}={x} -> {code} {kind} {len(rows or [])} rows")
    for who in ["\u00b2", f"+{buyer_id}", str(buyer_id).translate(ARABIC), f"{buyer_id}_", "99999999999999999999"]:
        staff.raise_request_exception = False
        response = staff.post("/api/v1/staff/topups/", {"buyer": who, "amount": "1.00", "reason": "x"},
                              format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
        if response.status_code != 400 or response["Content-Type"] != PROBLEM_TYPE:
            wrong.append(f"POST /api/v1/staff/topups/ buyer={who!r} -> {response.status_code}")
    assert not wrong, "\n".join(wrong)


def test_malformed_cursors_are_400_problems(market_of_numbers):
    """A page cursor whose position is not an integer (``p=1'``) reached the database as the filter's value (a
    500); offsets and directions Python reads leniently were taken."""
    m = market_of_numbers
    bad = ["p=1'", "p=abc", "p=2020-01-01", "p=99999999999999999999", "p=+1", "p=1_0", "p=\u0661", "o=+1", "o=1_0",
           "o=\u0661", "r=+1", "r=2", "x=1", "p=1&p=2"]
    lists = [("buyer", "/api/v1/account/statement/"), ("buyer", "/api/v1/purchases/"),
             ("buyer", "/api/v1/surveys/"), ("buyer", "/api/v1/datasets/"), ("buyer", "/api/v1/ledger/checkpoints/"),
             ("auditor", "/api/v1/audit/ledger/"), ("staff", "/api/v1/staff/fees/"), ("owner", "/api/v1/owner/values/")]
    wrong = []
    for role, url in lists:
        wrong += _refused(m["clients"][role], [("get", f"{url}?cursor={_cursor(c)}", None) for c in bad], 400)
    outputs = f"/api/v1/purchases/{m['purchase']}/outputs/"
    wrong += _refused(m["clients"]["buyer"], [("get", f"{outputs}?cursor={_cursor(c).rstrip('%3D')}", None)
                                              for c in ["o:1'", "o:1_0", "o:+5", "o:\u0661", "o:-1", "o: 1"]], 400)
    assert not wrong, "\n".join(wrong)
    # the links the pages give still work
    first = m["clients"]["buyer"].get(f"{outputs}?page_size=5").json()
    assert m["clients"]["buyer"].get(first["next"]).status_code == 200


def test_lenient_numbers_in_bodies_are_400_problems(market_of_numbers):
    """Amounts, epsilons, probabilities, ids, cohorts and values written "1_0", "+1", "١" or "1e0" were read as
    numbers; they are invalid input now (plain ASCII decimals only, docs/errors.md#numbers-in-requests)."""
    m = market_of_numbers
    buyer, owner, staff = m["clients"]["buyer"], m["clients"]["owner"], m["clients"]["staff"]
    a = m["attribute"].id
    other = NumericAttributeFactory(price_policy=POLICY)  # the owner has no value of it yet
    held = m["held"]
    cases = []  # (role, url, body, the field the 400 names)
    for x in LENIENT_DECIMALS:
        cases += [("buyer", "/api/v1/quotes/", {"attribute": a, "epsilon": x}, "epsilon"),
                  ("buyer", "/api/v1/purchases/", {"attribute": a, "epsilon": x}, "epsilon"),
                  ("buyer", "/api/v1/quotes/", {"attribute": a, "epsilon": "0.5", "mechanism": "warner", "p2": x},
                   "p2"),
                  ("staff", "/api/v1/staff/topups/", {"buyer": m["buyer"].username, "amount": x, "reason": "x"},
                   "amount"),
                  ("owner", "/api/v1/owner/values/", {"attribute": other.id, "ceiling": x, "value": "1"}, "ceiling"),
                  ("owner", "/api/v1/owner/values/", {"attribute": other.id, "ceiling": "1", "value": x}, "value"),
                  ("owner", f"/api/v1/owner/values/{held}/chain/", {"epsilons": [x], "outputs": [0]}, "epsilons")]
    for x in [f"+{a}", str(a).translate(ARABIC), f"{a}.0", f" {a}", f"{a}_"]:
        cases += [("buyer", "/api/v1/quotes/", {"attribute": x, "epsilon": "0.5"}, "attribute"),
                  ("owner", "/api/v1/owner/values/", {"attribute": x.replace(str(a), str(other.id)),
                                                      "ceiling": "1", "value": "1"}, "attribute")]
    for x in ["+0", "\u0660", "0.0", "0_0"]:
        cases += [("buyer", "/api/v1/quotes/", {"attribute": a, "epsilon": "0.5", "cohort": x}, "cohort")]
    wrong = []
    for role, url, body, field in cases:
        m["clients"][role].raise_request_exception = False
        response = m["clients"][role].post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
        named = response.json().get("errors", {}) if response["Content-Type"] == PROBLEM_TYPE else {}
        if response.status_code != 400 or response["Content-Type"] != PROBLEM_TYPE or field not in named:
            wrong.append(f"POST {url} {body} as {role} -> {response.status_code} {named}")
    assert not wrong, "\n".join(wrong)
    assert not Value.objects.filter(attribute=other).exists()
    # plain numbers still work
    assert buyer.post("/api/v1/quotes/", {"attribute": a, "epsilon": " 0.5 "}, format="json").status_code == 200
    assert owner.post("/api/v1/owner/values/", {"attribute": other.id, "ceiling": " 1 ", "value": "12.5"},
                      format="json").status_code == 201
    assert staff.post("/api/v1/staff/topups/", {"buyer": str(m["buyer"].id), "amount": "10.50", "reason": "x"},
                      format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex).status_code == 201


def test_errors_of_list_items_are_named_fields(market_of_numbers):
    """The owner fuzz found it: the errors of a list's items came nested (``{"epsilons": {"0": [...]}}``), not as
    the documented ``{field: [messages]}``; they are named like the detail names them."""
    owner, held = market_of_numbers["clients"]["owner"], market_of_numbers["held"]
    r = owner.post(f"/api/v1/owner/values/{held}/chain/", {"epsilons": [""], "outputs": [None]}, format="json")
    assert r.status_code == 400 and r["Content-Type"] == PROBLEM_TYPE
    errors = r.json()["errors"]
    assert set(errors) == {"epsilons.0", "outputs.0"}, errors
    assert all(isinstance(m, list) and all(isinstance(x, str) for x in m) for m in errors.values())
