"""The buyer portal in a real browser (Playwright for Python driving Debian's Chromium) against a live server.

A new buyer signs up (refused first: a short password), sees the awaiting-approval banner, quotes with the Buy
button disabled, is approved (``accounts.services.buyer_approve``, what the admin action calls) and topped up
(``accounts.money.services.money_topup``, the operator's top-up), quotes again and buys (a double click buys
once), sees the estimate chart with its error bars, downloads the outputs as CSV, creates an API token (shown
once) that the Python client (``ldpmarket_client.Client``) lists the purchases with and the command line
(``ldpmarket-client purchase``) reads one with, and revokes it.

Every buyer page is screenshotted at 1280 px into a temporary folder, and each must fit (no horizontal scroll:
``document.documentElement.scrollWidth <= 1280``) and raise no Content-Security-Policy violation (the
``securitypolicyviolation`` events, recorded by an init script) and no console error.  The purchase is small, so it
runs in the request (the 202 path and its progress are in tests/buyer_portal/test_pages.py).  Skipped, saying why,
when Playwright or ``/usr/bin/chromium`` is missing.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from decimal import Decimal

import pytest
from django.db import connections

from accounts.money.format import format_money

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs an event loop in this thread

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PASSWORD = "a long and unusual passphrase 42"

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="Playwright for Python is not installed (pip install playwright; CI installs it)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is missing (apt-get install -y chromium; CI installs it)"),
]

#: Records every Content-Security-Policy violation of the page (it runs before the page's own code).
RECORD_VIOLATIONS = """window.__csp = [];
document.addEventListener('securitypolicyviolation',
    e => window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline')));"""


@pytest.fixture
def browser_page():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        context.set_default_timeout(20_000)
        context.add_init_script(RECORD_VIOLATIONS)
        page = context.new_page()
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.errors = errors
        try:
            yield page
            assert errors == [], f"console errors: {errors}"
        finally:
            connections.close_all()  # the ORM's connections made while Playwright's loop ran
            context.close()
            browser.close()


def fits(page, folder, name: str) -> None:
    """A full-page screenshot; then no horizontal scroll at 1280 px, no CSP violation, no console error."""
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 1280, f"{name}: the page is {width} px wide at 1280 px"
    assert page.evaluate("() => window.__csp") == [], f"{name}: the Content-Security-Policy blocked something"
    assert page.errors == [], f"{name}: console errors {page.errors}"


def test_a_new_buyer_signs_up_is_approved_buys_and_uses_a_token(live_server, browser_page, transactional_db,
                                                                 tmp_path):
    import numpy as np

    from accounts.models import User
    from accounts.money.services import money_topup
    from accounts.services import buyer_approve
    from ldpmarket_client import Client
    from market.models import Purchase
    from market.purchases.pricing import DEFAULT_POLICY
    from market.values.services import values_create_many
    from tests.factories import CategoricalAttributeFactory, DatasetFactory, OwnerFactory, StaffFactory

    page, base, shots = browser_page, live_server.url, tmp_path
    dataset = DatasetFactory(title="Neighbourhood wellbeing and everyday mobility survey, spring wave 2031",
                             description="How people in the district feel and move about.")
    mood = CategoricalAttributeFactory(dataset=dataset, name="mood this week", labels=["good", "fair", "poor"],
                                       price_policy=DEFAULT_POLICY, description="How have you felt this week?")
    values_create_many(attribute=mood, owners=[OwnerFactory() for _ in range(8)],
                       raws=["good", "good", "fair", "poor", "good", "fair", "good", "poor"],
                       rng=np.random.default_rng(3), ceiling="2")
    operator = StaffFactory(username="operator")

    # 1. The landing page leads to the buyer's sign-up.
    page.goto(f"{base}/")
    fits(page, shots, "00-landing")
    page.get_by_role("link", name="Create a buyer account").click()
    expect(page.get_by_role("heading", name="Create a buyer account")).to_be_visible()
    page.get_by_label("Username").fill("erin")
    page.get_by_label("Your name").fill("Erin Example")
    page.get_by_label("Organisation").fill("Institute for Very Long Organisation Names in Applied Public Health")
    page.get_by_label("Email").fill("erin@example.org")
    page.get_by_label("Password", exact=True).fill("short")
    page.get_by_label("Password again").fill("short")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("alert")).to_contain_text("too short")
    fits(page, shots, "01-signup-errors")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("heading", name="Your buyer account")).to_be_visible()
    expect(page.locator("#awaiting-approval")).to_contain_text(
        "Awaiting approval: you can browse and quote; an operator approves your organisation before you can buy.")
    fits(page, shots, "02-home-awaiting")
    erin = User.objects.get(username="erin")
    assert erin.role == User.Role.BUYER and erin.buyer_approved_at is None

    # 2. Browse and quote; the Buy button is disabled, saying why.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Catalog").click()
    expect(page.get_by_role("heading", name="mood this week")).to_be_visible()
    fits(page, shots, "03-catalog")
    page.get_by_label("ε for mood this week").fill("1")
    page.get_by_role("button", name="Get a quote for mood this week").click()
    expect(page.locator("#quote-included")).to_contain_text("8 of 8 values")
    expect(page.get_by_role("button", name="Buy for")).to_be_disabled()
    expect(page.locator("#buy-reason")).to_contain_text("not approved your organisation")
    fits(page, shots, "04-quote-awaiting")

    # 3. The operator approves the organisation and tops up the credit; the quote says what it buys.
    buyer_approve(buyer=erin, approved_by=operator)
    money_topup(buyer=erin, amount=Decimal("0.05"), reason="invoice 2031-17", by=operator)
    page.reload()
    expect(page.locator("#afford")).to_contain_text(
        f"With your balance of {format_money(Decimal('0.05'))} you can buy 5 values at this ε; a top-up of "
        f"{format_money(Decimal('0.03'))} would buy all 8.")
    expect(page.locator("#buy-reason")).to_contain_text("short")
    fits(page, shots, "05-quote-short")
    money_topup(buyer=erin, amount=Decimal("10"), reason="invoice 2031-18", by=operator)
    page.reload()
    expect(page.locator("#afford")).to_contain_text("you can buy all 8 values at this ε")
    buy = page.get_by_role("button", name="Buy for")
    expect(buy).to_be_enabled()
    fits(page, shots, "06-quote")

    # 4. Buy (a double click buys once), see the estimate and download the outputs.
    buy.dblclick()
    expect(page.get_by_role("heading", name="Estimate from 8 outputs")).to_be_visible()
    assert Purchase.objects.filter(buyer=erin).count() == 1
    purchase = Purchase.objects.get(buyer=erin)
    assert purchase.status == Purchase.Status.COMPLETED and purchase.included == 8
    expect(page.locator("svg.estimate-chart g.error-bar")).to_have_count(3)
    expect(page.locator("svg.estimate-chart rect.bar")).to_have_count(3)
    fits(page, shots, "07-purchase")
    with page.expect_download() as info:
        page.get_by_role("link", name="Outputs (CSV)").click()
    rows = list(csv.reader(io.StringIO(open(info.value.path(), encoding="utf-8").read())))
    assert rows[0] == ["pseudonym", "epsilon", "output"] and len(rows) == 9
    assert {r[2] for r in rows[1:]} <= {"good", "fair", "poor"}

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Purchases").click()
    expect(page.get_by_role("link", name=re.compile(rf"^{purchase.id}\b.*purchase of mood this week"))).to_be_visible()
    fits(page, shots, "08-purchases")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Account").click()
    expect(page.locator("#account-balance")).to_contain_text(format_money(Decimal("10.05") - purchase.price))
    expect(page.get_by_role("table", name="Statement")).to_contain_text("invoice 2031-18")
    fits(page, shots, "09-account")

    # 5. A token, shown once, lists the purchases through the Python client; revoked, it no longer works.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API tokens").click()
    page.get_by_label("Token name").fill("census notebook")
    page.get_by_label("Expires after").select_option("7")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").input_value()
    assert len(token) > 20
    fits(page, shots, "10-token-created")
    with Client(base, token=token, progress=False) as client:  # closed: no kept-alive request thread holds the DB
        listed = client.purchases()
    assert [p["id"] for p in listed] == [purchase.id]
    # the command line with the same token (docs/client.md#command-line): a readable table, and JSON
    env = {**os.environ, "LDPMARKET_URL": base, "LDPMARKET_TOKEN": token,
           "LDPMARKET_CONFIG": str(tmp_path / "cli-config.json")}
    for args in (["purchase", str(purchase.id)], ["purchase", str(purchase.id), "--json"]):
        run = subprocess.run([sys.executable, "-m", "ldpmarket_client", *args], env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["id"] == purchase.id and json.loads(run.stdout)["status"] == "completed"
    page.reload()  # a GET: the token is not shown again
    expect(page.locator("#new-token")).to_have_count(0)
    expect(page.get_by_role("table", name="Your tokens")).to_contain_text("census notebook")
    fits(page, shots, "11-tokens")
    page.get_by_role("button", name="Revoke census notebook").click()
    expect(page.get_by_role("status")).to_contain_text("revoked")
    request = urllib.request.Request(f"{base}/api/v1/purchases/", headers={"Authorization": f"Token {token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:  # urllib closes the connection after the answer
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401

    # 6. Keyboard only: sign out and back in.
    page.get_by_role("button", name="Sign out").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    fits(page, shots, "12-sign-in")
    page.get_by_label("Username").fill("erin")
    page.get_by_label("Password").fill(PASSWORD)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Your buyer account")).to_be_visible()
    expect(page.locator("#approval-state")).to_have_text("Approved")
    fits(page, shots, "13-home")

    # 7. An owner signed in elsewhere gets the forbidden page, which points to the owner portal.
    owner = OwnerFactory(username="olga")
    owner.set_password(PASSWORD)
    owner.save()
    page.get_by_role("button", name="Sign out").click()
    page.goto(f"{base}/portal/login/")
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your values")).to_be_visible()
    response = page.goto(f"{base}/buyer/catalog/")
    assert response.status == 403
    # the browser logs the page's own 403 as a failed load: expected here, and the only one allowed
    assert [e for e in page.errors if "status of 403" in e] == [page.errors[-1]]
    page.errors.clear()
    expect(page.get_by_role("heading", name="This portal is for buyers")).to_be_visible()
    fits(page, shots, "14-forbidden")
    assert len(list(shots.glob("*.png"))) == 15


def test_a_large_purchases_page_follows_its_progress_and_reloads_when_done(live_server, browser_page, transactional_db,
                                                                           tmp_path):
    """The 202 path in the browser: a purchase claimed and not yet run (as a worker would find it) shows its progress;
    the page's script (buyer_portal/progress.js) polls the purchase's API resource, moves the bar as the progress
    grows, and reloads the page once the purchase has completed, which then shows its estimate.  No worker is
    needed: the test runs the purchase itself, as the worker would (``pipeline.purchase_run``)."""
    import uuid

    import numpy as np

    from market.purchases import pipeline
    from market.purchases.execution import purchase_claim
    from market.purchases.pricing import DEFAULT_POLICY
    from market.purchases.progress import progress_set
    from market.values.services import values_create_many
    from tests.factories import BuyerFactory, CategoricalAttributeFactory, OwnerFactory, fund

    page, base = browser_page, live_server.url
    mood = CategoricalAttributeFactory(name="mood", labels=["good", "fair", "poor"], price_policy=DEFAULT_POLICY)
    values_create_many(attribute=mood, owners=[OwnerFactory() for _ in range(8)], raws=["good", "fair"] * 4,
                       rng=np.random.default_rng(5), ceiling="2")
    buyer = BuyerFactory(username="fay")
    buyer.set_password(PASSWORD)
    buyer.save()
    fund(buyer, "10")
    purchase, _ = purchase_claim(buyer=buyer, attribute=mood, epsilon="1", cohort=None,
                                 idempotency_key=uuid.uuid4().hex)
    progress_set(purchase.id, 0, 8)

    page.goto(f"{base}/buyer/login/?next=/buyer/purchases/{purchase.id}/")
    page.get_by_label("Username").fill("fay")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="In progress")).to_be_visible()
    expect(page.locator("#progress-text")).to_have_text("0 of 8 values processed (0%).")
    fits(page, tmp_path, "progress-0")
    progress_set(purchase.id, 3, 8)  # the script polls every 2 s: the page follows without a reload
    expect(page.locator("#progress-text")).to_have_text("3 of 8 values processed (37%).", timeout=10_000)
    assert page.locator("#progress-bar").evaluate("e => [e.value, e.max]") == [3, 8]
    fits(page, tmp_path, "progress-3")
    pipeline.purchase_run(purchase_id=purchase.id, rng=np.random.default_rng(1))
    expect(page.get_by_role("heading", name="Estimate from 8 outputs")).to_be_visible(timeout=10_000)
    expect(page.locator("#progress-card")).to_have_count(0)
    fits(page, tmp_path, "progress-done")
