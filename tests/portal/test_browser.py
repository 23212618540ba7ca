"""The owner portal in a real browser (Playwright for Python driving Debian's Chromium) against a live server.

A new owner signs up, contributes a value, previews and sets a schedule, sees a
purchase a buyer makes through the REST API (real HTTP against the live server)
with what they earned, raises the ceiling (and is refused when lowering it below
the privacy spent), pauses sales, exports their data and checks the JSON,
deletes the raw value; then contributes a distribution (refused first: it must add up to 1), contributes a
uRR value and tags it as personally sensitive (PUM), sees a one-shot sale the buyer makes through the API with
its mechanism and guarantee; signs out and back in with the keyboard only.

A screenshot of every page goes to ``test-artifacts/portal/`` (git-ignored).
Skipped, saying why, when Playwright or ``/usr/bin/chromium`` is missing
(CI installs both: ``apt-get install -y chromium``, ``pip install playwright``).
"""
from __future__ import annotations

import json
import os
import urllib.request
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connections

from accounts.money.format import format_money

# Playwright's sync API runs an event loop in this thread; Django's ORM calls from the test are still synchronous.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "portal"

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

PASSWORD = "a long and unusual passphrase 42"
#: Tests whose screenshots go to a subfolder of test-artifacts/portal/ (the owner's walk keeps the folder itself).
SUBFOLDERS = {"test_portal_and_admin_pages_fit_1280_px_under_the_policy": "layout"}


@pytest.fixture
def browser_page(request):
    # each test's screenshots in its own folder: test-artifacts/portal/ (the owner's walk) or a subfolder
    # (a module using this fixture may name its own ARTIFACTS folder)
    folder = getattr(request.module, "ARTIFACTS", ARTIFACTS) / getattr(request.module, "SUBFOLDERS", {}).get(
        request.node.originalname, "")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        context.set_default_timeout(20_000)
        page = context.new_page()
        # the Content-Security-Policy (docs/security.md) must not block anything the portal needs
        blocked = []
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        try:
            yield page
            assert blocked == [], f"the Content-Security-Policy blocked: {blocked}"
        finally:
            # ORM calls made while Playwright's loop runs get their own connection (asgiref's context-local
            # storage): close it here, or PostgreSQL cannot drop the test database at the end of the session.
            connections.close_all()
            context.close()
            browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def api(base: str, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:  # pragma: no cover - shown on failure
        return exc.code, json.loads(exc.read() or b"{}")


def test_an_owner_signs_up_contributes_and_manages_a_value(live_server, browser_page, transactional_db):
    from accounts.models import MoneyAccount, MoneyEntry, User
    from market.models import Value
    from market.purchases.pricing import DEFAULT_POLICY
    from tests.factories import BuyerFactory, CategoricalAttributeFactory, DatasetFactory
    from tests.portal.conftest import fund

    page, base = browser_page, live_server.url
    dataset = DatasetFactory(title="Health survey 2031", description="How people feel this spring.")
    attribute = CategoricalAttributeFactory(dataset=dataset, name="mood", labels=["good", "fair", "poor"],
                                            price_policy=DEFAULT_POLICY, description="How do you feel today?")
    buyer = BuyerFactory(username="api-buyer", email="api-buyer@example.org", organisation="Open Health Lab")
    fund(buyer, "50")

    # 1. Sign up.
    page.goto(f"{base}/portal/")
    expect(page).to_have_url(f"{base}/portal/login/?next=/portal/")
    shot(page, "01-sign-in")
    page.get_by_role("link", name="Create an owner account").click()
    page.get_by_label("Username").fill("carol")
    page.get_by_label("Email").fill("carol@example.org")
    page.get_by_label("Password", exact=True).fill("short")
    page.get_by_label("Password again").fill("short")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("alert")).to_contain_text("too short")
    shot(page, "02-sign-up-errors")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("heading", name="Your values")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("Welcome, carol")
    owner = User.objects.get(username="carol")
    assert owner.role == User.Role.OWNER and owner.check_password(PASSWORD)
    shot(page, "03-dashboard-empty")

    # 2. Contribute a value (fixed ceiling 1).
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Contribute").click()
    shot(page, "04-contribute-choose")
    page.get_by_role("link", name="Contribute to mood").click()
    select = page.get_by_label("Your value for “mood”")
    assert select.evaluate("e => e.tagName") == "SELECT"
    select.select_option("fair")
    page.get_by_label("A fixed ceiling").check()
    page.get_by_label("Ceiling (ε)").fill("1")
    shot(page, "05-contribute-form")
    page.get_by_role("button", name="Contribute my value").click()
    expect(page.get_by_role("heading", name="Health survey 2031 / mood")).to_be_visible()
    value = Value.objects.get(owner=owner, attribute=attribute)
    expect(page.locator(".raw")).to_have_text("fair")
    expect(page.locator("svg.chart")).to_be_visible()
    shot(page, "06-value")

    # 3. Set a schedule: preview first (nothing saved), then set it.
    page.get_by_role("link", name="Set a release schedule").click()
    page.get_by_label("Starting ε (now)").fill("1")
    page.get_by_label("Final ε (cap)").fill("3")
    page.get_by_label("Duration", exact=True).fill("30")
    page.get_by_label("Duration unit").select_option("days")
    page.get_by_label("In equal steps").check()
    page.get_by_label("Number of steps").fill("4")
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("#preview")
    expect(preview.get_by_role("table")).to_contain_text("1.5")  # 1 + 2 * floor(4 * 0.25) / 4
    expect(preview.locator("svg.chart")).to_be_visible()
    assert value.budget.__class__.objects.get(value=value).schedule_shape == ""
    shot(page, "07-schedule-preview")
    page.get_by_role("button", name="Set schedule").click()
    expect(page.get_by_role("status")).to_contain_text("Schedule set")
    expect(page.locator(".facts")).to_contain_text("in 4 steps")
    shot(page, "08-value-scheduled")

    # 4. A buyer purchases through the REST API (real HTTP against the live server).
    status, body = api(base, "/api/v1/auth/token/",
                       {"username": "api-buyer", "password": "correct horse battery staple"})
    assert status == 200, body
    status, body = api(base, "/api/v1/purchases/", {"attribute": attribute.id, "epsilon": "0.8"},
                       {"Authorization": f"Token {body['token']}", "Idempotency-Key": uuid.uuid4().hex})
    assert status == 201, body
    assert body["included"] == 1
    earned = MoneyEntry.objects.get(account__user=owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS).amount
    assert earned > 0
    earned_text = format_money(earned)  # with its currency (LDP_CURRENCY, EUR by default)
    assert earned_text.endswith(" EUR")

    page.get_by_role("link", name="Dashboard").first.click()
    recent = page.get_by_role("table", name="Your ten most recent releases")
    expect(recent).to_contain_text("Open Health Lab")
    expect(recent).to_contain_text("0.8")
    expect(recent).to_contain_text(earned_text)
    expect(page.locator("#earnings-total")).to_have_text(earned_text)
    page_text = page.content()
    assert "api-buyer" not in page_text, "the buyer's username must never reach an owner"
    shot(page, "09-dashboard-with-release")
    page.get_by_role("link", name="Releases & earnings").click()
    expect(page.locator("#earnings-total")).to_have_text(earned_text)
    expect(page.get_by_role("table")).to_contain_text("Open Health Lab")
    shot(page, "10-releases")

    # 5. Lowering the ceiling below the privacy spent is refused with the reason; raising it works.
    page.get_by_role("table").get_by_role("link", name="Health survey 2031 / mood").click()
    page.get_by_role("link", name="Raise or lower the ceiling").click()
    page.get_by_label("New ceiling (ε)").fill("0.5")
    page.get_by_role("button", name="Save the ceiling").click()
    expect(page.get_by_role("alert")).to_contain_text("already been spent")
    shot(page, "11-ceiling-refused")
    page.get_by_label("New ceiling (ε)").fill("4")
    page.get_by_role("button", name="Save the ceiling").click()
    expect(page.get_by_role("status")).to_contain_text("The ceiling is now ε 4")
    expect(page.locator(".facts")).to_contain_text("Fixed ceiling ε 4")
    expect(page.locator("meter")).to_have_attribute("value", "0.8")

    # 6. Pause sales.
    page.get_by_role("button", name="Pause sales").click()
    expect(page.locator(".badge.paused")).to_be_visible()
    shot(page, "12-value-paused")

    # 7. Export: download the JSON and check it.
    page.get_by_role("link", name="Dashboard").first.click()
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export my data (JSON)").click()
    exported = json.loads(Path(download_info.value.path()).read_text())
    assert exported["owner"]["username"] == "carol"
    [v] = exported["values"]
    assert v["raw_value"] == "fair" and v["attribute"] == "mood"
    assert v["budget"]["ceiling"] == "4.000000" and v["budget"]["paused"] is True
    assert v["budget"]["chain_loss"] == "0.800000" and v["budget"]["schedule"] is None
    assert Decimal(v["chain"]["head"]) == Decimal("4")
    [release] = v["releases"]
    assert release["organisation"] == "Open Health Lab" and release["epsilon"] == "0.800000"
    assert Decimal(release["earned"]) == earned and Decimal(exported["earnings"]["total"]) == earned
    assert [h["event"] for h in v["history"]] == ["ceiling", "schedule", "chain_release", "ceiling", "pause"]
    assert "api-buyer" not in json.dumps(exported)

    # 8. Delete the raw value (confirmation page first).
    page.get_by_role("link", name="Details of mood").click()
    page.get_by_role("link", name="Delete the raw value…").click()
    expect(page.get_by_role("heading", name="Delete your raw value?")).to_be_visible()
    shot(page, "13-delete-confirm")
    page.get_by_role("button", name="Yes, delete my raw value").click()
    expect(page.get_by_role("status")).to_contain_text("stays sellable up to its head")
    expect(page.get_by_role("status")).to_contain_text("can no longer grow")
    assert Value.objects.get(id=value.id).raw_sealed is None
    shot(page, "14-value-raw-deleted")
    shot_dashboard = page.get_by_role("link", name="Dashboard").first
    shot_dashboard.click()
    shot(page, "15-dashboard-final")

    # 9. One-shot mechanisms: contribute a distribution (refused first: it must add up to 1), contribute a uRR
    #    value and tag it as personally sensitive, then see a one-shot sale with its guarantee.
    from market.values.owner_rows import pum_tag
    from tests.portal.conftest import oneshot_attribute

    oneshot_attribute("distribution", dataset=dataset)
    place = oneshot_attribute("urr", dataset=dataset)
    main_nav = page.get_by_role("navigation", name="Main")
    main_nav.get_by_role("link", name="Contribute").click()
    page.get_by_role("link", name="Contribute to commute mix").click()
    expect(page.locator("#how-sold-title")).to_contain_text("Private sample of your distribution")
    page.get_by_label("walk", exact=True).fill("0.5")
    page.get_by_label("bike", exact=True).fill("0.3")
    page.get_by_role("button", name="Contribute my value").click()
    expect(page.get_by_role("alert")).to_contain_text("add up to 0.8; they must add up to 1")
    shot(page, "16-contribute-distribution-refused")
    page.get_by_label("car", exact=True).fill("0.2")
    page.get_by_role("button", name="Contribute my value").click()
    expect(page.locator(".raw")).to_have_text("walk: 0.5 · bike: 0.3 · car: 0.2")
    shot(page, "17-value-distribution")

    main_nav.get_by_role("link", name="Contribute").click()
    page.get_by_role("link", name="Contribute to place").click()
    page.get_by_label("Your value for “place”").select_option("home")
    page.get_by_label("Ceiling (ε)").fill("2")
    page.get_by_role("button", name="Contribute my value").click()
    expect(page.locator("#pum-tag-current")).to_contain_text("none")
    page.get_by_label("Yes, tag it “residence”").check()
    page.get_by_role("button", name="Save the tag").click()
    expect(page.get_by_role("status")).to_contain_text("tagged as personally sensitive (“residence”)")
    expect(page.locator("#pum-tag-current")).to_contain_text("tagged “residence”")
    place_value = Value.objects.get(owner=owner, attribute=place)
    assert pum_tag(owner, place_value.id) == "residence"
    assert b"residence" not in bytes(Value.objects.get(id=place_value.id).input_sealed)
    shot(page, "18-value-urr-tagged")

    status, body = api(base, "/api/v1/auth/token/",
                       {"username": "api-buyer", "password": "correct horse battery staple"})
    assert status == 200, body
    status, body = api(base, "/api/v1/purchases/", {"attribute": place.id, "epsilon": "0.5"},
                       {"Authorization": f"Token {body['token']}", "Idempotency-Key": uuid.uuid4().hex})
    assert status == 201 and body["included"] == 1, body
    page.reload()
    released = page.get_by_role("table", name="Releases of this value")
    expect(released).to_contain_text("Randomized answer that always protects sensitive answers (uRR)")
    expect(released).to_contain_text("sensitive or tagged answers protected at ε 0.5")
    expect(released).to_contain_text("Open Health Lab")
    expect(page.locator(f"#loss-{place_value.id}")).to_have_attribute("value", "0.5")
    expect(page.locator(f"#oneshot-loss-{place_value.id}")).to_have_count(0)  # one-shot: no chain/one-shot bars
    shot(page, "19-value-urr-one-shot-release")

    # 10. Sign out, then sign in again with the keyboard only.
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.locator("#id_username")).to_be_focused()  # the sign-in form focuses the username
    page.keyboard.type("carol")
    page.keyboard.press("Tab")
    expect(page.locator("#id_password")).to_be_focused()
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Your values")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to main content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    assert len(list(ARTIFACTS.glob("*.png"))) == 19




# ------------------------------------------------------------------------------------ pages at 1280 px (issue 13)

LAYOUT = ARTIFACTS / "layout"

#: Width of every element that scrolls sideways inside the page, beyond its own box (none may).
OVERFLOWING_BOXES = """() => [...document.querySelectorAll('.table-wrap, .card, #changelist .results, #content-main')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => (e.id || e.className) + ': ' + e.scrollWidth + ' > '
    + e.clientWidth)"""


def fits(page, name: str) -> None:
    """A full-page screenshot, then: nothing wider than the 1280 px window, and no table wider than its box."""
    page.screenshot(path=str(LAYOUT / f"{name}.png"), full_page=True)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 1280, f"{name}: the page is {width} px wide at 1280 px"
    assert page.evaluate(OVERFLOWING_BOXES) == [], name


def test_portal_and_admin_pages_fit_1280_px_under_the_policy(live_server, browser_page, transactional_db):
    """The owner's dashboard, a chain and two one-shot value pages (one without its raw value), the schedule
    form with its preview, the releases page, and the admin index and every change list of the market: at
    1280 px nothing overflows, the Audit links read on one line, and the Content-Security-Policy blocks nothing
    (checked by the ``browser_page`` fixture)."""
    from accounts.models import User
    from accounts.roles import grant_role
    from market.purchases.pricing import DEFAULT_POLICY
    from market.values.services import value_delete_raw
    from tests.factories import PASSWORD as STAFF_PASSWORD
    from tests.factories import (
        BuyerFactory,
        CategoricalAttributeFactory,
        DatasetFactory,
        OwnerFactory,
        StaffFactory,
        fund,
    )
    from tests.portal.conftest import contribute_one, oneshot_attribute, oneshot_purchase, purchase

    page, base = browser_page, live_server.url
    dataset = DatasetFactory(title="Neighbourhood wellbeing and everyday mobility survey, spring wave 2031",
                             description="How people in the district feel and move about.")
    mood = CategoricalAttributeFactory(dataset=dataset, name="mood this week", labels=["good", "fair", "poor"],
                                       price_policy=DEFAULT_POLICY, description="How have you felt this week?")
    place = oneshot_attribute("urr", dataset=dataset, description="Where did you spend most of the day?")
    smoking = oneshot_attribute("ternary", dataset=dataset, description="Do you smoke?")
    owner = OwnerFactory(username="dana")
    owner.set_password(PASSWORD)
    owner.save()
    chain_value = contribute_one(owner, mood, "fair", ceiling="3")
    place_value = contribute_one(owner, place, "office", ceiling="2")
    gone = contribute_one(owner, smoking, "never", ceiling="2")
    first = BuyerFactory(organisation="Institute for Very Long Organisation Names in Applied Public Health")
    second = BuyerFactory(organisation="Open Health Lab")
    for buyer in (first, second):
        fund(buyer, "100")
    purchase(first, mood, "1.5", seed=1)
    purchase(second, mood, "0.5", seed=2)  # within the chain's loss: "no charge"
    oneshot_purchase(first, place, epsilon="0.5")
    oneshot_purchase(second, smoking, eps1="1", eps2="0.5")
    value_delete_raw(value_id=gone.id)

    page.goto(f"{base}/portal/login/")
    page.get_by_label("Username").fill("dana")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your values")).to_be_visible()
    expect(page.locator("#earnings-total")).to_contain_text(" EUR")
    fits(page, "01-dashboard")

    page.goto(f"{base}/portal/values/{chain_value.id}/")
    expect(page.locator("#question")).to_contain_text("How have you felt this week?")
    expect(page.get_by_role("table", name="Releases of this value")).to_contain_text("no charge")
    expect(page.locator("svg.chart path.ceiling-halo")).to_have_count(1)
    fits(page, "02-value-chain")

    page.goto(f"{base}/portal/values/{place_value.id}/")
    expect(page.locator(".badge.selling")).to_be_visible()
    expect(page.locator("svg.chart path.chain-loss")).to_have_count(0)
    expect(page.locator(".legend")).not_to_contain_text("Chain part")
    expect(page.locator(".loss-split")).to_have_count(0)
    fits(page, "03-value-one-shot")

    page.goto(f"{base}/portal/values/{gone.id}/")
    expect(page.locator(".badge.retired")).to_have_text("No longer sold")
    expect(page.locator(".badge.selling")).to_have_count(0)
    expect(page.get_by_role("link", name="Raise or lower the ceiling")).to_have_count(0)
    expect(page.get_by_role("button", name="Pause sales")).to_have_count(0)
    fits(page, "04-value-one-shot-raw-deleted")

    page.goto(f"{base}/portal/values/{chain_value.id}/schedule/")
    expect(page.get_by_label("Starting ε (now)")).to_have_value("3")
    page.get_by_label("Final ε (cap)").fill("5")
    page.get_by_label("In equal steps").check()
    page.get_by_label("Number of steps").fill("4")
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("#preview")
    expect(preview.locator("tbody tr")).to_have_count(5)  # now, then each of the 4 steps
    expect(preview.locator(".legend")).to_contain_text("Now")
    expect(preview.locator("svg.chart .now-label")).to_have_text("now")
    fits(page, "05-schedule-preview")

    page.goto(f"{base}/portal/releases/")
    expect(page.get_by_role("table")).to_contain_text("Institute for Very Long Organisation Names")
    fits(page, "06-releases")

    # the admin console, as staff
    staff = grant_role(StaffFactory(username="sam"), User.Role.STAFF)
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.get_by_label("Username").fill(staff.username)
    page.get_by_label("Password").fill(STAFF_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/admin/")
    link = page.locator("#ldp-audit-links").get_by_role("link", name="Budget audit")
    box = link.bounding_box()
    assert box["height"] < 30 and box["width"] > 60, f"the Audit link wraps: {box}"
    expect(page.get_by_role("link", name="Ledger entries")).to_be_visible()
    expect(page.get_by_role("link", name="Money entries")).to_be_visible()
    fits(page, "10-admin-index")
    for n, path in enumerate(["accounts/budgetaccount", "accounts/ledgerentry", "accounts/moneyaccount",
                              "accounts/moneyentry", "accounts/user", "market/value", "market/purchase",
                              "market/attribute", "market/purchasechunk"], start=11):
        page.goto(f"{base}/admin/{path}/")
        expect(page.locator("#changelist")).to_be_visible()
        fits(page, f"{n}-admin-{path.replace('/', '-')}")
    page.goto(f"{base}/admin/market/value/{chain_value.id}/change/")  # the chain's steps, from its block
    expect(page.get_by_role("heading", name="Chain steps")).to_be_visible()
    fits(page, "20-admin-value-chain-steps")
    page.goto(f"{base}/admin/accounts/moneyentry/")
    expect(page.locator("#result_list")).to_contain_text(" EUR")
    page.goto(f"{base}/admin/accounts/user/{staff.id}/change/")
    expect(page.locator("#id_role_helptext")).to_contain_text("contributes values and uses the owner portal")
    fits(page, "21-admin-user-role")
