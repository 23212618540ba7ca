"""The Content-Security-Policy in a real browser (Chromium): the admin console and the browsable API work
under it, and nothing is loaded from another origin (docs/security.md, "Deployment").

Skipped, saying why, when Playwright or ``/usr/bin/chromium`` is missing (as tests/portal/test_browser.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.db import connections

from tests.factories import PASSWORD, StaffFactory

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
#: Screenshots of the pages these tests load (git-ignored, like the portal's).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "api-docs"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(sync_playwright is None, reason="Playwright for Python is not installed"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]

PAGES = ["/admin/", "/admin/accounts/ledgerentry/", "/admin/accounts/ledgerentry/overview/",
         "/admin/accounts/ledgerentry/audit/", "/admin/accounts/user/", "/admin/accounts/user/add/",
         "/admin/market/dataset/", "/admin/axes/accessattempt/", "/api/v1/datasets/", "/api/v1/purchases/",
         "/", "/api/v1/", "/api/auth/login/"]


def test_admin_and_browsable_api_pages_work_under_the_policy(live_server, transactional_db):
    staff = StaffFactory(is_superuser=True)
    origin = live_server.url
    blocked, foreign, failed = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context()
        context.set_default_timeout(20_000)
        page = context.new_page()
        page.on("console", lambda m: blocked.append(f"{page.url}: {m.text}")
                if "Content Security Policy" in m.text else None)
        page.on("request", lambda r: foreign.append(r.url)
                if urlsplit(r.url).scheme in ("http", "https") and not r.url.startswith(origin) else None)
        # a request the browser itself cancels when the next page is opened (net::ERR_ABORTED, e.g. an admin
        # icon still loading) is not a failure of the page
        page.on("requestfailed", lambda r: failed.append((r.url, r.failure))
                if "ERR_ABORTED" not in (r.failure or "") else None)
        try:
            page.goto(f"{origin}/admin/login/?next=/admin/")
            page.fill("#id_username", staff.username)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"{origin}/admin/")
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            for url in PAGES:
                response = page.goto(f"{origin}{url}")
                assert response.status == 200, url
                page.wait_for_load_state("networkidle")
                name = url.strip("/").replace("/", "-") or "landing"
                page.screenshot(path=str(SCREENSHOTS / f"page-{name}.png"), full_page=True)
        finally:
            connections.close_all()
            context.close()
            browser.close()
    assert blocked == [], blocked
    assert foreign == [], foreign
    assert failed == [], failed


@pytest.mark.parametrize("url, rendered", [
    ("/api/docs/", ".opblock-summary-path"),      # Swagger UI: one summary per operation
    ("/api/redoc/", "[data-section-id^='operation/']"),  # Redoc: one section per operation
])
def test_api_docs_render_their_operations_offline_under_the_policy(live_server, transactional_db, url, rendered):
    """The API docs work with no network beyond loopback: every request to another origin is refused by the
    browser here, and the pages must still render the schema's operations from this origin's static files."""
    origin = live_server.url
    blocked, foreign = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context()
        context.set_default_timeout(30_000)
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(origin)
                      or not urlsplit(route.request.url).scheme.startswith("http")
                      else (foreign.append(route.request.url), route.abort())[1])
        page = context.new_page()
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        try:
            assert page.goto(f"{origin}{url}").status == 200
            page.wait_for_selector(rendered)
            paths = page.locator(rendered).all_inner_texts()
            page.screenshot(path=str(SCREENSHOTS / f"api-docs-{url.strip('/').replace('/', '-')}.png"))
        finally:
            connections.close_all()
            context.close()
            browser.close()
    assert len(paths) >= 10, paths
    # Redoc always shows its vendor's logo from its CDN (no option turns it off): the policy blocks that image
    # before any request leaves, as it should; nothing else may be blocked.
    assert [b for b in blocked if "cdn.redoc.ly/redoc/logo-mini.svg" not in b] == [], blocked
    assert foreign == [], foreign
