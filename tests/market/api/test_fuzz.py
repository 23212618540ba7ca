"""Every operation of the OpenAPI schema fuzzed with schemathesis: no input makes a 5xx (docs/quality-targets.md#reliability).

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
"""
from __future__ import annotations

import os
import traceback
import uuid
from collections import Counter, defaultdict
from decimal import Decimal

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from knox.models import AuthToken
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                               response_schema_conformance, status_code_conformance)

from market import quotes as market_quotes
from market import oneshot, selectors
from market.models import Value
from ldpmarket.api import KEY_RE
from market.purchases import purchase_claim, purchase_execute
from tests.market.api.conftest import LABELS, POLICY, contribute, fund
from tests.factories import (BinaryAttributeFactory, BuyerFactory, CategoricalAttributeFactory, DatasetFactory,
                             GraphAttributeFactory, NumericAttributeFactory, StringAttributeFactory,
                             UrrAttributeFactory)
from market import oneshot_specs

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
