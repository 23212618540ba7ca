"""Problem types (docs/errors.md): every error class declares its own status, type and title; each comes out of the
API with its own type; a 503 carries Retry-After; bodies nested too deep and requests to paths without their
trailing slash are clear 4xx problems, never a 500."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from ldpmarket import problems
from tests.market.api.conftest import PROBLEM, assert_problem, buy

pytestmark = pytest.mark.django_db

TAG = "tag:ldpmarket,2025:problems/"
PACKAGES = ("accounts", "market", "audit", "portal", "ldpmarket")
DOCS = Path(__file__).resolve().parents[3] / "docs" / "errors.md"
#: Errors the API never returns as such (it checks first and answers with another type, or they belong to the
#: portal, the admin or the commands), so the OpenAPI schema does not list them; docs/errors.md does.
NOT_FROM_THE_API = {
    "ldpmarket.problems.BudgetError": "the owner portal",
    "ldpmarket.problems.RoleError": "grant_role, called by operators",
    "ldpmarket.problems.InvalidValue": "contributing a value (the portal)",
    "ldpmarket.problems.InvalidAttribute": "turned into invalid-parameter by market.purchases.oneshot.parse_spec",
    "ldpmarket.problems.QuoteInvalid": "turned into invalid-input on the field quote",
    "ldpmarket.problems.PolicyError": "turned into not-for-sale",
    "ldpmarket.problems.SealBroken": "a fault (500), logged",
    "ldpmarket.problems.LockOrderViolation": "a fault (500), logged: a bug, caught in tests (accounts.locks)",
    "ldpmarket.problems.CopyFormatError": "a fault (500), logged",
    "ldpmarket.problems.RestoreInputError": "manage.py verify_restore (exit 2)",
    "ldpmarket.api.TrailingSlashRequired": "the middleware, for paths that are no operation",
    "ldpmarket.problems.EpsilonError": "sent as invalid-input, the generic type of invalid fields",
    "ldpmarket.problems.MoneyError": "sent as invalid-input on the field amount",
    "ldpmarket.problems.NumberError": "sent as invalid-input on the field, a 404 for a path id",
    "ldpmarket.problems.PayoutRefused": "the owner portal, the admin and settle_payouts",
    "ldpmarket.problems.SignUpRefused": "the buyer pages' sign-up (accounts.services.buyer_signup)",
    "ldpmarket.problems.TokenRefused": "the buyer pages' token page (accounts.tokens.token_create)",
    "ldpmarket.problems.NoSuchToken": "the buyer pages' token page (accounts.tokens.token_revoke)",
}


def error_classes() -> dict[str, type]:
    """Every exception class defined in the service's packages (migrations aside), by dotted name."""
    found = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")
                             if ".migrations" not in m.name]
        for name in names:
            module = importlib.import_module(name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == name:
                    found[f"{name}.{cls.__qualname__}"] = cls
    return found


def concrete() -> dict[str, type]:
    return {name: cls for name, cls in error_classes().items() if not cls.__dict__.get("abstract")}


def declared(cls) -> tuple[int, str, str]:
    from ldpmarket.problems import attributes_of

    found = attributes_of(cls)
    assert found is not None, f"{cls.__module__}.{cls.__qualname__} declares no status, slug and title of its own"
    return found


def test_every_error_class_declares_its_own_status_type_and_title():
    classes = concrete()
    # the enumeration finds the errors of every layer (a broken walk would make the rest vacuous)
    assert {"ldpmarket.problems.PriceChanged", "ldpmarket.problems.PurchaseConflict",
            "ldpmarket.problems.ParameterError", "ldpmarket.problems.BudgetError",
            "market.api.problems.NoOutputs"} <= set(classes)
    types = {}
    for name, cls in sorted(classes.items()):
        status, slug, title = declared(cls)
        assert isinstance(status, int) and 400 <= status <= 599, name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", slug), (name, slug)
        assert title and title[0].isupper(), name
        types.setdefault(slug, []).append(name)
        if status == 503:
            assert getattr(cls, "retry_after", None), f"{name} is a 503 without retry_after"
    shared = {slug: names for slug, names in types.items() if len(names) > 1}
    assert not shared, f"problem types shared by several errors: {shared}"
    assert "invalid-input" not in {declared(c)[1] for n, c in classes.items() if n != "ldpmarket.problems.EpsilonError"}


def test_every_type_is_documented_and_every_type_the_api_returns_is_in_the_schema(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema, docs = out.read_text(), DOCS.read_text()
    classes = concrete()
    assert set(NOT_FROM_THE_API) <= set(classes), set(NOT_FROM_THE_API) - set(classes)
    for name, cls in classes.items():
        slug = declared(cls)[1]
        assert f"`{slug}`" in docs, f"{name}: type {slug} is not in docs/errors.md"
        if name not in NOT_FROM_THE_API:
            assert TAG + slug in schema, f"{name}: type {slug} is not documented in the OpenAPI schema"
    for generic in ("invalid-input", "malformed-request"):
        assert TAG + generic in schema and f"`{generic}`" in docs


def test_each_service_error_comes_out_with_its_own_type_status_and_title():
    from ldpmarket.api import problem_exception_handler

    for name, cls in concrete().items():
        if name in NOT_FROM_THE_API and name != "ldpmarket.api.TrailingSlashRequired":
            continue
        status, slug, title = declared(cls)
        exc = cls("eps1", "eps1 is out of range") if "ParameterError" in name else cls("it went wrong")
        response = problem_exception_handler(exc, {})
        body = json.loads(response.content)
        assert (response.status_code, response["Content-Type"]) == (status, PROBLEM), name
        assert (body["type"], body["title"], body["status"]) == (TAG + slug, title, status), name


# ------------------------------------------------------------------------------------ through the API

def test_a_quote_whose_price_went_up_is_price_changed(api, categorical):
    """The view's own check (the price quoted against the price now)."""
    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "1"}, format="json").json()
    categorical.price_policy = {"points": [["0", "0"], ["1", "0.02"], ["10", "0.1"]], "owner_share": "0.8"}
    categorical.save()
    body = assert_problem(api.post("/api/v1/purchases/", {"quote": quote["quote"]}, format="json",
                                   HTTP_IDEMPOTENCY_KEY="q"), 409)
    assert body["type"] == TAG + "price-changed" and body["title"] == "Price changed"


def test_a_price_rise_found_while_the_purchase_runs_is_price_changed(api, categorical, monkeypatch):
    """The purchase's own check, under its locks (``PriceChanged`` from ``lock_payment``): the view is made to see
    the quoted price, the purchase then finds the real one."""
    from market import selectors

    quote = api.post("/api/v1/quotes/", {"attribute": categorical.id, "epsilon": "1"}, format="json").json()
    categorical.price_policy = {"points": [["0", "0"], ["1", "0.02"], ["10", "0.1"]], "owner_share": "0.8"}
    categorical.save()
    real = selectors.quote
    monkeypatch.setattr(selectors, "quote", lambda **kw: dataclasses.replace(real(**kw),
                                                                             price=Decimal(quote["price"])))
    body = assert_problem(api.post("/api/v1/purchases/", {"quote": quote["quote"]}, format="json",
                                   HTTP_IDEMPOTENCY_KEY="q"), 409)
    assert body["type"] == TAG + "price-changed", body


def test_a_concurrent_change_is_a_503_with_retry_after(api, categorical, monkeypatch):
    from ldpmarket.problems import PurchaseConflict
    from market.purchases import execution as purchases

    def conflict(**kwargs):
        raise PurchaseConflict("A value was added while this purchase read its values; retry.")

    monkeypatch.setattr(purchases, "purchase_execute", conflict)
    r = buy(api, categorical.id, "1")
    body = assert_problem(r, 503)
    assert body["type"] == TAG + "purchase-conflict" and int(r["Retry-After"]) >= 1
    monkeypatch.undo()
    assert buy(api, categorical.id, "1", key=None).status_code == 201  # and a retry goes through


def test_an_invalid_parameter_found_by_the_purchase_names_its_field(api, categorical, monkeypatch):
    from market.purchases import execution as purchases

    def invalid(**kwargs):
        raise problems.ParameterError("eps2", "eps2 must be a number in (0, 700]")

    monkeypatch.setattr(purchases, "purchase_execute", invalid)
    body = assert_problem(buy(api, categorical.id, "1"), 400)
    assert body["type"] == TAG + "invalid-parameter"
    assert body["errors"] == {"eps2": ["eps2 must be a number in (0, 700]"]}


# ---------------------------------------------------------------------------------------- bodies

def nested(depth: int, kind: str = "list") -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("kind", ["list", "object"])
@pytest.mark.parametrize("depth", [33, 900, 5000, 100_000])
def test_json_nested_too_deep_is_a_400_even_anonymously(kind, depth):
    r = Client().post("/api/v1/auth/token/", nested(depth, kind), content_type="application/json")
    body = assert_problem(r, 400)
    assert body["type"] == TAG + "malformed-request" and "nested" in body["detail"]


def test_json_nested_to_the_limit_is_read(api, categorical):
    r = Client().post("/api/v1/auth/token/", '{"username": ' + nested(31) + "}", content_type="application/json")
    assert assert_problem(r, 400)["type"] == TAG + "invalid-input"  # parsed, then refused field by field
    deep = api.post("/api/v1/quotes/", '{"attribute": ' + nested(40, "object") + "}", content_type="application/json")
    assert assert_problem(deep, 400)["type"] == TAG + "malformed-request"


def test_forms_with_too_many_fields_or_too_large_and_unsupported_bodies_are_4xx_problems(settings):
    anon = Client()
    fields = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    r = anon.post("/api/v1/auth/token/", fields, content_type="application/x-www-form-urlencoded")
    assert assert_problem(r, 400)["type"] == TAG + "malformed-request"
    too_large = "username=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert_problem(anon.post("/api/v1/auth/token/", too_large, content_type="application/x-www-form-urlencoded"), 413)
    r = anon.post("/api/v1/auth/token/", {"username": "a", "password": "b"})  # multipart: not accepted here
    assert_problem(r, 415)
    r = anon.post("/api/v1/auth/token/", "username=" + "[" * 10000, content_type="application/x-www-form-urlencoded")
    assert_problem(r, 400)  # a form is flat: read, then refused as a wrong password


# ------------------------------------------------------------------------------------- trailing slash

@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_a_request_with_a_body_to_a_path_without_its_slash_is_a_404_that_says_so(settings, debug, method):
    settings.DEBUG = debug
    r = getattr(Client(), method)("/api/v1/auth/token?x=1", "{}", content_type="application/json")
    body = assert_problem(r, 404)
    assert body["type"] == TAG + "trailing-slash-required"
    assert "/api/v1/auth/token/?x=1" in body["detail"] and "slash" in body["detail"]


def test_outside_the_api_it_is_a_plain_404_that_says_so_and_gets_are_still_redirected(settings, api):
    settings.DEBUG = True
    r = Client().post("/portal/signup", {"username": "x"})
    assert r.status_code == 404 and r["Content-Type"].startswith("text/plain")
    assert "/portal/signup/" in r.content.decode()
    get = api.get("/api/v1/datasets")
    assert get.status_code == 301 and get["Location"] == "/api/v1/datasets/"


def test_no_anonymous_body_to_the_token_endpoint_is_a_5xx():
    anon = Client()
    for body, content_type in [(b"\xff\xfe", "application/json"), (b"[1, 2", "application/json"),
                               (b"NaN", "application/json"), (b"1e999999", "application/json"),
                               (b'{"username": "a", "password": ["b"]}', "application/json"),
                               (b"\x00" * 1000, "application/x-www-form-urlencoded"),
                               (b"[" * 5000 + b"]" * 5000, "application/json"),
                               (b'{"username": ' * 3000, "application/json")]:
        r = anon.generic("POST", "/api/v1/auth/token/", body, content_type=content_type)
        assert 400 <= r.status_code < 500 and r["Content-Type"] == PROBLEM, (body[:20], r.status_code, r.content)
