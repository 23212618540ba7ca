"""Money in a real browser (Playwright driving Debian's Chromium) against a live server (docs/money.md).

An owner paid by a sale sees their earnings on the portal's Money page and asks for a payout; an operator signs
in to the admin, tops up a buyer with a reason (the action's form) and settles the payout; the owner then sees it
settled.  Screenshots go to ``test-artifacts/money/`` (git-ignored).  Skipped, saying why, without Playwright or
``/usr/bin/chromium``.
"""
from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from tests.portal import test_browser
from tests.portal.test_browser import CHROMIUM, sync_playwright

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
browser_page = test_browser.browser_page  # the fixture: a real Chromium page, CSP violations fail
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "money"
PASSWORD = "a long and unusual passphrase 42"

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="Playwright for Python is not installed (pip install playwright)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_owner_payout_and_operator_top_up_and_settlement(live_server, browser_page, transactional_db):
    page = browser_page
    from playwright.sync_api import expect

    from accounts.models import MoneyAccount, PayoutRequest, TopUp, User
    from accounts.roles import grant_role
    from tests.factories import BuyerFactory, CategoricalAttributeFactory, fund
    from tests.portal.conftest import contribute_one, purchase

    base = live_server.url
    owner = User.objects.create_user("olive", password=PASSWORD)
    grant_role(owner, "owner")
    staff = User.objects.create_user("operator", password=PASSWORD)
    grant_role(staff, "staff")
    buyer = BuyerFactory(username="lab-buyer", organisation="Open Health Lab")
    fund(buyer, "50")
    attribute = CategoricalAttributeFactory(labels=["red", "green", "blue"],
                                            price_policy={"points": [["0", "0"], ["10", "10"]], "owner_share": "0.8"})
    contribute_one(owner, attribute, "green", ceiling="2")
    purchase(buyer, attribute, "1")  # 1.00: 0.80 to the owner, 0.20 fee
    # no test transaction here: the purchase's commit ran its settlement task (eager), the owner is paid

    # The owner: earnings, a payout request.
    page.goto(f"{base}/portal/login/?next=/portal/money/")
    page.get_by_label("Username").fill("olive")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Money", exact=True)).to_be_visible()
    expect(page.locator("#money-balance")).to_have_text("0.80 EUR")
    expect(page.locator("#money-pending")).to_have_text("0.00 EUR")
    expect(page.get_by_role("table", name="Statement")).to_contain_text("settled earnings")
    shot(page, "01-owner-money")
    page.get_by_label("Amount (EUR)").fill("0.50")
    page.get_by_role("button", name="Request payout").click()
    expect(page.get_by_role("status")).to_contain_text("0.50 EUR requested")
    expect(page.locator("#money-balance")).to_have_text("0.30 EUR")
    expect(page.locator("#money-held")).to_have_text("0.50 EUR")
    shot(page, "02-owner-payout-requested")

    # The operator: sign in to the admin, top up the buyer, settle the payout.
    operator = page.context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    operator.goto(f"{base}/admin/login/?next=/admin/")
    operator.get_by_label("Username").fill("operator")
    operator.get_by_label("Password").fill(PASSWORD)
    operator.get_by_role("button", name="Log in").click()
    operator.goto(f"{base}/admin/accounts/user/?q=lab-buyer")
    operator.locator("input[name=_selected_action]").first.check()
    operator.locator("select[name=action]").select_option("top_up_credit")
    operator.get_by_role("button", name="Go").click()
    expect(operator.get_by_role("heading", name="Top up credit")).to_be_visible()
    operator.get_by_label("Amount").fill("25.00")
    operator.get_by_label("Reason").fill("invoice 2026-014 paid")
    shot(operator, "03-admin-top-up-form")
    operator.get_by_role("button", name="Top up").click()
    expect(operator.locator(".messagelist")).to_contain_text("Credited 25.00 EUR to 1 buyer(s): lab-buyer")
    shot(operator, "04-admin-topped-up")
    assert TopUp.objects.get().by == staff
    assert MoneyAccount.objects.get(user=buyer, kind="buyer_credit").balance == Decimal("74.00")

    operator.goto(f"{base}/admin/accounts/payoutrequest/")
    expect(operator.locator("#result_list")).to_contain_text("0.50 EUR")
    operator.locator("input[name=_selected_action]").first.check()
    operator.locator("select[name=action]").select_option("settle")
    operator.get_by_role("button", name="Go").click()
    expect(operator.locator(".messagelist")).to_contain_text("Settled 1 payout(s), 0.50 EUR")
    shot(operator, "05-admin-payout-settled")
    assert PayoutRequest.objects.get().status == "settled"

    page.reload()
    expect(page.get_by_role("table", name="Your payouts")).to_contain_text("Settled")
    shot(page, "06-owner-payout-settled")
