"""The buyer portal (docs/buyers.md) through Django's test client: every page, and every refusal.

Anonymous visitors are sent to the buyer's sign-in; owners, auditors and staff get the 403 page; a buyer awaiting
approval browses and quotes but cannot buy; another buyer's purchase is a 404; a token is shown once and revoked.
"""
from __future__ import annotations

import re
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import MoneyAccount, User
from accounts.money.format import format_money
from market.models import Purchase
from tests.factories import AuditorFactory, NumericAttributeFactory, OwnerFactory, StaffFactory, fund

from .conftest import signed_in

pytestmark = pytest.mark.django_db

PAGES = ["/buyer/", "/buyer/catalog/", "/buyer/quote/?attribute=1&epsilon=1", "/buyer/purchases/",
         "/buyer/purchases/1/", "/buyer/account/", "/buyer/tokens/"]
AWAITING = ("Awaiting approval: you can browse and quote; an operator approves your organisation before you can "
            "buy.")


class _Page(HTMLParser):
    """The page's inline code (none is allowed by the CSP: ldpmarket/csp.py), its headings and its form fields
    without a label."""

    def __init__(self):
        super().__init__()
        self.inline_scripts, self.inline_styles, self.handlers = 0, 0, []
        self.headings, self.inputs, self.labels = [], [], set()
        self._script = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.inline_scripts += 0 if a.get("src") else 1
        if tag == "style" or "style" in a:
            self.inline_styles += 1
        self.handlers += [k for k in a if k.startswith("on")]
        if tag in ("h1", "h2", "h3"):
            self.headings.append(tag)
        if tag == "label" and a.get("for"):
            self.labels.add(a["for"])
        if tag in ("input", "select", "textarea") and a.get("type") not in ("hidden", "submit"):
            self.inputs.append(a.get("id"))


def check_page(response) -> str:
    """The page is CSP-clean and accessible (one h1, every field labelled); its text, whitespace collapsed."""
    html = response.content.decode()
    page = _Page()
    page.feed(html)
    assert page.inline_scripts == 0 and page.inline_styles == 0 and page.handlers == [], "inline code"
    assert page.headings.count("h1") == 1, page.headings
    unlabelled = [i for i in page.inputs if i not in page.labels]
    assert not unlabelled, f"fields without a label: {unlabelled}"
    return re.sub(r"\s+", " ", html)


def quote_url(attribute, epsilon="1") -> str:
    return f"/buyer/quote/?attribute={attribute.id}&epsilon={epsilon}"


def buy_fields(response) -> dict:
    html = response.content.decode()
    token = re.search(r'name="quote" value="([^"]+)"', html).group(1)
    key = re.search(r'name="idempotency_key" value="([^"]+)"', html).group(1)
    return {"quote": token, "idempotency_key": key}


# ------------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("url", PAGES)
def test_anonymous_visitors_are_sent_to_the_buyer_sign_in(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/buyer/login/?next=/buyer/"), response["Location"]


@pytest.mark.parametrize("factory", [OwnerFactory, AuditorFactory, StaffFactory])
@pytest.mark.parametrize("url", PAGES)
def test_owners_auditors_and_staff_get_the_forbidden_page(client, factory, url):
    signed_in(client, factory())
    response = client.get(url)
    assert response.status_code == 403
    text = check_page(response)
    assert "This portal is for buyers" in text and 'href="/portal/"' in text


@pytest.mark.parametrize("factory", [OwnerFactory, AuditorFactory])
def test_posts_of_other_roles_are_refused_too(client, factory, attribute, values):
    signed_in(client, factory())
    assert client.post("/buyer/buy/", {"quote": "x", "idempotency_key": "k"}).status_code == 403
    assert client.post("/buyer/tokens/", {"name": "n", "lifetime": "30"}).status_code == 403
    assert Purchase.objects.count() == 0


def test_the_sign_in_refuses_other_roles_and_lets_buyers_in(client, buyer, password):
    owner = OwnerFactory()
    response = client.post("/buyer/login/", {"username": owner.username, "password": password})
    assert response.status_code == 200 and "This portal is for buyers" in response.content.decode()
    response = client.post("/buyer/login/?next=/buyer/account/",
                           {"username": buyer.username, "password": password, "next": "/buyer/account/"})
    assert response.status_code == 302 and response["Location"] == "/buyer/account/"
    response = client.post("/buyer/logout/")
    assert response.status_code == 302 and response["Location"] == "/buyer/login/"
    assert client.get("/buyer/").status_code == 302


def test_sign_in_is_locked_out_after_the_limit(client, buyer, password, settings):
    """The one sign-in lockout (accounts/lockout.py) guards the buyer's sign-in as it guards the owner's."""
    limit = settings.LDP_SIGNIN_FAILURES_PER_ACCOUNT
    for _ in range(limit - 1):
        response = client.post("/buyer/login/", {"username": buyer.username, "password": "wrong"})
        assert response.status_code == 200 and "do not match" in response.content.decode()
    response = client.post("/buyer/login/", {"username": buyer.username, "password": "wrong"})
    assert response.status_code == 429
    response = client.post("/buyer/login/", {"username": buyer.username, "password": password})
    assert response.status_code == 429 and "Too many failed sign-ins" in response.content.decode()
    assert response["Retry-After"] and "_auth_user_id" not in client.session


# -------------------------------------------------------------------------------------------------- sign-up

def test_sign_up_makes_a_buyer_awaiting_approval(client):
    assert client.get("/buyer/signup/").status_code == 200
    form = {"username": "dora", "name": "Dora Explorer", "organisation": "Open Data Lab", "email": "dora@example.org",
            "password1": "short", "password2": "short"}
    response = client.post("/buyer/signup/", form)
    text = check_page(response)
    assert response.status_code == 200 and "too short" in text and not User.objects.filter(username="dora").exists()
    form.update(password1="a long and unusual passphrase 42", password2="a long and unusual passphrase 42")
    response = client.post("/buyer/signup/", form)
    assert response.status_code == 302 and response["Location"] == "/buyer/"
    dora = User.objects.get(username="dora")
    assert dora.role == User.Role.BUYER and dora.organisation == "Open Data Lab" and dora.buyer_approved_at is None
    assert MoneyAccount.objects.get(user=dora, kind=MoneyAccount.Kind.BUYER_CREDIT).balance == 0
    text = check_page(client.get("/buyer/"))
    assert AWAITING in text and "Awaiting approval" in text and format_money(0) in text
    # the same username again is refused by the service, on the field
    client.post("/buyer/logout/")
    response = client.post("/buyer/signup/", {**form, "email": "other@example.org"})
    assert response.status_code == 200 and "This username is taken" in response.content.decode()


# -------------------------------------------------------------------------------------------- home, catalog

def test_home_shows_balance_approval_and_links(client, buyer):
    text = check_page(signed_in(client, buyer).get("/buyer/"))
    assert format_money(Decimal(100)) in text and "Approved" in text and AWAITING not in text
    for link in ["/buyer/catalog/", "/buyer/purchases/", "/buyer/account/", "/buyer/tokens/"]:
        assert f'href="{link}"' in text


def test_the_catalog_says_what_each_attribute_is_and_what_is_available(client, buyer, attribute, values):
    numeric = NumericAttributeFactory(dataset=attribute.dataset, name="age", low=Decimal(0), high=Decimal(100))
    text = check_page(signed_in(client, buyer).get("/buyer/catalog/"))
    assert "Health survey 2031" in text and "How do you feel today?" in text
    assert "one of 3 answers: good, fair, poor" in text
    assert "a number between 0 and 100" in text and numeric.name in text
    assert "6 values at the lowest ε; up to ε 2" in text  # ceilings 2
    assert re.search(r"<td class=\"num\">2</td><td class=\"num\">6</td>", text)  # the highest ε, listed
    assert f'name="attribute" value="{attribute.id}"' in text and 'for="epsilon-' in text
    assert "nothing for sale now" in text  # the numeric attribute has no values


# ---------------------------------------------------------------------------------------------------- quote

def test_a_quote_says_what_is_included_its_price_guarantee_and_what_the_balance_buys(client, buyer, attribute,
                                                                                        values):
    response = signed_in(client, buyer).get(quote_url(attribute, "1"))
    assert response.status_code == 200
    text = check_page(response)
    assert "6 of 6 values" in text and "ε-LDP at ε 1" in text
    assert "With your balance of 100.00 EUR you can buy all 6 values at this ε" in text.replace(
        format_money(Decimal(100)), "100.00 EUR")
    fields = buy_fields(response)
    assert len(fields["idempotency_key"]) >= 16 and fields["quote"]
    assert 'class="primary">Buy for' in text and "disabled" not in text.split('class="buy-form"')[1]


def test_a_short_balance_says_what_a_top_up_would_buy_and_disables_buy(client, buyer, attribute, values):
    account = MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    account.balance = Decimal("0.0150")  # the price at epsilon 1 is 0.01 per value: 1 value of 6
    account.save(update_fields=["balance"])
    response = signed_in(client, buyer).get(quote_url(attribute, "1"))
    text = check_page(response)
    assert f"With your balance of {format_money(Decimal('0.015'))} you can buy 1 value at this ε" in text
    assert f"a top-up of <strong>{format_money(Decimal('0.045'))}</strong> would buy all 6" in text
    assert "disabled" in text and "your balance is" in text and "short" in text


def test_a_buyer_awaiting_approval_quotes_but_the_buy_button_is_disabled(client, waiting_buyer, attribute, values):
    response = signed_in(client, waiting_buyer).get(quote_url(attribute, "1"))
    text = check_page(response)
    assert response.status_code == 200 and "6 of 6 values" in text and AWAITING in text
    assert "disabled" in text and "an operator has not approved your organisation" in text


@pytest.mark.parametrize("query, message", [
    ("attribute={a}&epsilon=abc", "plain number"),
    ("attribute={a}&epsilon=0", "more than zero"),
    ("attribute={a}&epsilon=1e3", "plain number"),
    ("attribute={a}&epsilon=0.1234567", "at most 6 digits"),
    ("attribute=999999&epsilon=1", "no such attribute"),
    ("attribute=abc&epsilon=1", "Choose an attribute"),
    ("attribute={a}&epsilon=", "Please enter the epsilon"),
])
def test_a_bad_quote_request_is_a_400_saying_why(client, buyer, attribute, values, query, message):
    response = signed_in(client, buyer).get(f"/buyer/quote/?{query.format(a=attribute.id)}")
    assert response.status_code == 400
    assert message in check_page(response)


def test_a_quote_no_value_can_fill_says_so_and_offers_no_buy_button(client, buyer, attribute, values):
    response = signed_in(client, buyer).get(quote_url(attribute, "3"))  # every ceiling is 2
    text = check_page(response)
    assert "0 of 6 values" in text and "No value of attribute" in text and "Buy for" not in text


def test_the_quote_page_without_a_request_goes_to_the_catalog(client, buyer):
    response = signed_in(client, buyer).get("/buyer/quote/")
    assert response.status_code == 302 and response["Location"] == "/buyer/catalog/"


# ------------------------------------------------------------------------------------------------------ buy

def test_buy_makes_one_purchase_even_when_submitted_twice(client, buyer, attribute, values):
    signed_in(client, buyer)
    fields = buy_fields(client.get(quote_url(attribute, "1")))
    first = client.post("/buyer/buy/", fields)
    purchase = Purchase.objects.get(buyer=buyer)
    assert first.status_code == 302 and first["Location"] == f"/buyer/purchases/{purchase.id}/"
    assert purchase.status == Purchase.Status.COMPLETED and purchase.included == 6
    second = client.post("/buyer/buy/", fields)
    assert second["Location"] == first["Location"] and Purchase.objects.filter(buyer=buyer).count() == 1
    assert MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT).balance == Decimal("99.94")
    text = check_page(client.get(second["Location"]))
    assert "You already made this purchase" in text


def test_an_unapproved_buyer_cannot_buy(client, waiting_buyer, attribute, values):
    signed_in(client, waiting_buyer)
    fields = buy_fields(client.get(quote_url(attribute, "1")))  # the button is disabled; the POST is sent anyway
    response = client.post("/buyer/buy/", fields, follow=True)
    assert Purchase.objects.filter(buyer=waiting_buyer).count() == 0
    assert "approv" in check_page(response)
    assert MoneyAccount.objects.get(user=waiting_buyer, kind=MoneyAccount.Kind.BUYER_CREDIT).balance == 100


def test_a_quote_issued_to_another_buyer_or_forged_buys_nothing(client, buyer, other_buyer, attribute, values):
    fields = buy_fields(signed_in(Client(), other_buyer).get(quote_url(attribute, "1")))
    response = signed_in(client, buyer).post("/buyer/buy/", fields, follow=True)
    assert "issued to another buyer" in check_page(response)
    response = client.post("/buyer/buy/", {**fields, "quote": "forged"}, follow=True)
    assert "not a quote this service issued" in check_page(response)
    response = client.post("/buyer/buy/", {"quote": fields["quote"]}, follow=True)
    assert "ask for the quote again" in check_page(response)
    assert Purchase.objects.count() == 0


def test_a_short_balance_refuses_the_purchase_with_the_reason(client, buyer, attribute, values):
    signed_in(client, buyer)
    fields = buy_fields(client.get(quote_url(attribute, "1")))
    account = MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    account.balance = Decimal("0.01")
    account.save(update_fields=["balance"])
    response = client.post("/buyer/buy/", fields, follow=True)
    assert response.redirect_chain[-1][0].startswith("/buyer/quote/?attribute=")
    text = check_page(response)
    assert "credit" in text.lower() and not Purchase.objects.filter(status=Purchase.Status.COMPLETED).exists()


def test_buy_is_post_only(client, buyer):
    assert signed_in(client, buyer).get("/buyer/buy/").status_code == 405


# ------------------------------------------------------------------------------------------------ purchases

def _bought(client, buyer, attribute, epsilon="1") -> Purchase:
    fields = buy_fields(signed_in(client, buyer).get(quote_url(attribute, epsilon)))
    client.post("/buyer/buy/", fields)
    return Purchase.objects.filter(buyer=buyer).latest("id")


def test_a_completed_purchase_shows_its_estimate_chart_and_downloads(client, buyer, attribute, values):
    p = _bought(client, buyer, attribute)
    response = client.get(f"/buyer/purchases/{p.id}/")
    text = check_page(response)
    assert "Completed" in text and "Estimate from 6 outputs" in text
    assert text.count('<g class="error-bar">') == 3 and 'role="img"' in text  # one interval per label
    assert "95% interval" in text and "<title" in text
    csv_url = f"/api/v1/purchases/{p.id}/outputs/?format=csv"
    json_url = f"/api/v1/purchases/{p.id}/estimate/?format=json"
    assert f'href="{csv_url}"' in text and f'href="{json_url}"' in text
    download = client.get(csv_url)  # the session signs the API in
    assert download.status_code == 200 and download["Content-Type"].startswith("text/csv")
    rows = b"".join(download.streaming_content).decode().splitlines()
    assert rows[0] == "pseudonym,epsilon,output" and len(rows) == 7
    estimate = client.get(json_url)
    assert estimate.status_code == 200 and len(estimate.json()["frequencies"]) == 3
    listing = check_page(client.get("/buyer/purchases/"))
    assert f'href="/buyer/purchases/{p.id}/"' in listing and "mood" in listing


def test_a_numeric_purchase_shows_the_mean_with_its_interval(client, buyer, attribute):
    import numpy as np

    from market.values.services import values_create_many

    numeric = NumericAttributeFactory(dataset=attribute.dataset, name="age", low=Decimal(0), high=Decimal(100),
                                      price_policy=attribute.price_policy)
    values_create_many(attribute=numeric, owners=[OwnerFactory() for _ in range(5)],
                       raws=["20", "30", "40", "50", "60"], rng=np.random.default_rng(1), ceiling="2")
    p = _bought(client, buyer, numeric)
    assert p.status == Purchase.Status.COMPLETED
    text = check_page(client.get(f"/buyer/purchases/{p.id}/"))
    assert 'class="mean"' in text and text.count('<g class="error-bar">') == 1 and "Mean:" in text


def test_another_buyers_purchase_is_a_404(client, buyer, other_buyer, attribute, values):
    p = _bought(Client(), other_buyer, attribute)
    assert signed_in(client, buyer).get(f"/buyer/purchases/{p.id}/").status_code == 404
    assert f"/buyer/purchases/{p.id}/" not in client.get("/buyer/purchases/").content.decode()
    assert client.get(f"/api/v1/purchases/{p.id}/outputs/?format=csv").status_code == 404
    assert client.get("/buyer/purchases/99999999/").status_code == 404
    assert client.get("/buyer/purchases/abc/").status_code == 404


def test_a_large_purchase_runs_in_the_background_and_shows_its_progress(client, buyer, attribute, values, settings):
    """The 202 path: above LDP_ASYNC_PURCHASE_THRESHOLD the purchase is sent to a worker on commit (never, inside
    this test's transaction) and its page shows the progress, a Reload link and the polling script (a file)."""
    settings.LDP_ASYNC_PURCHASE_THRESHOLD = 2
    p = _bought(client, buyer, attribute)
    assert p.status == Purchase.Status.PENDING
    response = client.get(f"/buyer/purchases/{p.id}/")
    text = check_page(response)
    assert "runs in the background" in text and "0 of 6 values processed (0%)" in text
    assert '<progress id="progress-bar" max="6" value="0"' in text
    assert f'href="/buyer/purchases/{p.id}/">Reload' in text
    assert re.search(r'<script src="/static/buyer_portal/progress[.\w]*\.js" defer></script>', text)
    assert f'data-status-url="/api/v1/purchases/{p.id}/"' in text
    assert client.get(f"/api/v1/purchases/{p.id}/", HTTP_ACCEPT="application/json").json()["status"] == "pending"
    assert "Outputs (CSV)" not in text


# -------------------------------------------------------------------------------------------------- account

def test_the_account_shows_the_balance_and_a_paginated_statement(client, buyer):
    for _ in range(30):
        fund(buyer, "1")
    text = check_page(signed_in(client, buyer).get("/buyer/account/"))
    assert format_money(Decimal(130)) in text and "Page 1 of 2" in text and text.count("test deposit") == 25
    text = check_page(client.get("/buyer/account/?page=2"))
    assert text.count("test deposit") == 6 and "Page 2 of 2" in text
    assert client.get("/buyer/account/?page=abc").status_code == 200


# --------------------------------------------------------------------------------------------------- tokens

def test_a_token_is_shown_once_works_in_the_api_and_is_revoked(client, buyer):
    signed_in(client, buyer)
    response = client.post("/buyer/tokens/", {"name": "census notebook", "lifetime": "30"})
    assert response.status_code == 302 and response["Location"] == "/buyer/tokens/"  # a reload makes no other
    response = client.get("/buyer/tokens/")
    assert "no-store" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    text = check_page(response)
    token = re.search(r'id="new-token" class="token-text" value="([^"]+)"', text).group(1)
    assert "shown only this once" in text
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/purchases/").status_code == 200
    listing = check_page(client.get("/buyer/tokens/"))
    assert token not in listing and "census notebook" in listing and f"<code>{token[:8]}" in listing
    key = re.search(r'name="token_key" value="([^"]+)"', listing).group(1)
    assert token.startswith(key)
    response = client.post("/buyer/tokens/revoke/", {"token_key": key}, follow=True)
    text = check_page(response)
    assert "revoked" in text and "census notebook" not in text
    assert api.get("/api/v1/purchases/").status_code == 401
    again = client.post("/buyer/tokens/revoke/", {"token_key": key}, follow=True)
    assert "You have no API token" in again.content.decode()


def test_another_buyers_token_cannot_be_revoked(client, buyer, other_buyer):
    from datetime import timedelta

    from accounts.tokens import token_create, tokens_of

    token_create(user=other_buyer, name="theirs", expires_in=timedelta(days=1))
    key = tokens_of(other_buyer)[0].key
    response = signed_in(client, buyer).post("/buyer/tokens/revoke/", {"token_key": key}, follow=True)
    assert "You have no API token" in response.content.decode() and len(tokens_of(other_buyer)) == 1


@pytest.mark.parametrize("form, message", [({"name": "", "lifetime": "30"}, "Please name the token"),
                                           ({"name": "x" * 101, "lifetime": "30"}, "at most 100 characters"),
                                           ({"name": "ok", "lifetime": "9999"}, "Choose one of the lifetimes")])
def test_a_bad_token_request_is_a_400_saying_why(client, buyer, form, message):
    response = signed_in(client, buyer).post("/buyer/tokens/", form)
    assert response.status_code == 400 and message in check_page(response)


def test_every_page_is_never_cached(client, buyer, attribute, values):
    signed_in(client, buyer)
    for url in ["/buyer/", "/buyer/catalog/", quote_url(attribute), "/buyer/purchases/", "/buyer/account/",
                "/buyer/tokens/"]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert "no-store" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"], url


# ------------------------------------------------------------------------------------------- one-shot kinds

@pytest.mark.parametrize("kind, raw", [("urr", "park"), ("urap", "park"), ("ternary", "never"),
                                       ("graph", '{"0": 0.5}'), ("distribution", {"walk": 1})])
def test_one_shot_attributes_are_shown_quoted_and_bought_or_refused_in_words(client, buyer, kind, raw):
    """Every one-shot kind: the catalog says what it is, a quote at an ε alone is made or refused with a 400 that
    says why (a mechanism that needs more parameters: the API), and a purchase's page renders its estimate."""
    from tests.portal.conftest import contribute_one, oneshot_attribute

    attribute = oneshot_attribute(kind)
    for _ in range(4):
        contribute_one(OwnerFactory(), attribute, raw, ceiling="5")
    signed_in(client, buyer)
    check_page(client.get("/buyer/catalog/"))
    response = client.get(quote_url(attribute, "1"))
    assert response.status_code in (200, 400), response.status_code
    text = check_page(response)
    if response.status_code == 400:  # LPP takes eps1 and eps2
        assert kind == "graph" and "takes eps1" in text and "through the API or the Python client" in text
        return
    assert "4 of 4 values" in text
    client.post("/buyer/buy/", buy_fields(response))
    p = Purchase.objects.get(buyer=buyer)
    assert p.status == Purchase.Status.COMPLETED and p.included == 4
    response = client.get(f"/buyer/purchases/{p.id}/")
    assert response.status_code == 200
    assert "Estimate from 4 outputs" in check_page(response)



def test_the_purchase_page_offers_the_consistent_estimates(client, buyer, attribute, values):
    """Unbiased (the default, with intervals), Norm-Sub and IBU (docs/mechanisms-reference.md#consistent-estimates):
    the chosen one is drawn without error bars, its rows have no interval, and its JSON download names it."""
    p = _bought(client, buyer, attribute)
    text = check_page(client.get(f"/buyer/purchases/{p.id}/"))
    assert 'href="?method=ibu"' in text and 'href="?method=norm_sub"' in text
    assert '<strong aria-current="page">Unbiased, with 95% intervals</strong>' in text
    for method in ("norm_sub", "ibu"):
        text = check_page(client.get(f"/buyer/purchases/{p.id}/?method={method}"))
        assert 'id="consistent-note"' in text and '<g class="error-bar">' not in text
        assert f"/api/v1/purchases/{p.id}/estimate/?format=json&amp;method={method}" in text
        api = client.get(f"/api/v1/purchases/{p.id}/estimate/?method={method}").json()
        shown = [float(x) for x in re.findall(r'<td class="num">(-?[0-9.]+)</td><td class="num">—</td>', text)]
        assert shown == pytest.approx([round(f["estimate"], 4) for f in api["frequencies"]], abs=1e-4)
        assert sum(f["estimate"] for f in api["frequencies"]) == pytest.approx(1.0)
    bad = client.get(f"/buyer/purchases/{p.id}/?method=mle")
    assert bad.status_code == 400 and b"norm_sub" in bad.content
