""""Keep my value on this device" in a real browser (Playwright driving Debian's Chromium; docs/custody.md).

An owner contributes with the box checked: the browser creates an owner-held value through the owner API,
draws the chain itself (``portal/static/portal/owner_sampler.js``) and uploads only epsilons and outputs.  Every
request the browser makes is recorded: the raw label appears in none (URL or body), and the contribute form
itself is never posted.  The value shows as kept on the device with its upload level; the owner raises the
ceiling in the portal, comes back, clicks "Extend now" and the upload level rises; a browser without the value
is told so.  A number is discretized once in the browser and a string hashed into its Bloom filter there; only
their bit chains are uploaded (issue 32).  Screenshots go to ``test-artifacts/owner-custody/`` (git-ignored).
Skipped, saying why, without Playwright or ``/usr/bin/chromium``.
"""
from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from pathlib import Path

import pytest

from tests.portal import test_browser
from tests.portal.test_browser import CHROMIUM, sync_playwright

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
browser_page = test_browser.browser_page  # the fixture: a real Chromium page, CSP violations fail
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "owner-custody"
PASSWORD = "a long and unusual passphrase 42"
GRID = dict(grid_start=Decimal("0.5"), grid_step=Decimal("0.5"), grid_stop=Decimal("10"))

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="Playwright for Python is not installed (pip install playwright)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def micro(*eps: str) -> list[int]:
    return [int(Decimal(e) * 1_000_000) for e in eps]


def test_an_owner_keeps_the_value_on_the_device_and_extends_it(live_server, browser_page, transactional_db):
    from playwright.sync_api import expect

    from accounts.models import User
    from accounts.roles import grant_role
    from market.models import Value
    from market.purchases.pricing import DEFAULT_POLICY
    from tests.factories import CategoricalAttributeFactory, stored_chains

    page, base = browser_page, live_server.url
    owner = User.objects.create_user("dora", password=PASSWORD)
    grant_role(owner, "owner")
    attribute = CategoricalAttributeFactory(name="favourite fruit", labels=["apple", "quince", "medlar", "sloe"],
                                            price_policy=DEFAULT_POLICY, **GRID)
    assert attribute.supports_owner_custody
    sent: list[tuple[str, str, str]] = []
    page.on("request", lambda r: sent.append((r.method, r.url, r.post_data or "")))

    page.goto(f"{base}/portal/login/?next=/portal/contribute/{attribute.id}/")
    page.get_by_label("Username").fill("dora")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    # 1. Contribute with the box checked: ceiling 1.7, so the chain goes up to the grid point 1.5.
    page.get_by_label("Your value for “favourite fruit”").select_option("medlar")
    page.get_by_label("A fixed ceiling").check()
    page.get_by_label("Ceiling (ε)").fill("1.7")
    page.get_by_label("Keep my value on this device").check()
    expect(page.get_by_label("Upload up to ε (optional)")).to_be_visible()
    shot(page, "01-contribute-on-device")
    page.get_by_role("button", name="Contribute my value").click()
    expect(page).to_have_url(re.compile(r"/portal/values/\d+/$"))
    expect(page.get_by_role("heading", name="favourite fruit")).to_be_visible()
    value = Value.objects.get(owner=owner, attribute=attribute)
    assert page.url == f"{base}/portal/values/{value.id}/"
    assert value.custody == Value.Custody.OWNER and value.raw_sealed is None and value.input_sealed is None
    eps, outputs = stored_chains(attribute)[value.id]
    assert eps.tolist() == micro("0.5", "1", "1.5") and ((outputs >= 0) & (outputs < 4)).all()
    expect(page.locator(".badges")).to_contain_text("Kept on your device")
    expect(page.locator("#upload-level")).to_contain_text("ε 1.5")
    expect(page.locator("#guarantee")).to_contain_text("against the service ε 1.5")
    expect(page.locator("#custody-status")).to_contain_text("nothing to upload now")
    expect(page.get_by_role("button", name="Extend now")).to_be_hidden()
    shot(page, "02-value-on-device")

    # what this browser keeps: the value id, the label's index (medlar is 2), the chain's head and its output
    stored = json.loads(page.evaluate(f"localStorage.getItem('ldpmarket.owner-held.{value.id}')"))
    assert stored == {"value": value.id, "m": 4, "label": 2, "head": "1.5", "output": int(outputs[-1, 0]),
                      "pending": None}
    api_posts = [(m, u) for m, u, _ in sent if m == "POST"]
    assert api_posts == [("POST", f"{base}/portal/login/?next=/portal/contribute/{attribute.id}/"),
                         ("POST", f"{base}/api/v1/owner/values/"),
                         ("POST", f"{base}/api/v1/owner/values/{value.id}/chain/")], "the form itself is never posted"

    # 2. Raise the ceiling to 3.2 in the portal: the chain now waits for the device.
    page.get_by_role("link", name="Raise or lower the ceiling").click()
    page.get_by_label("New ceiling (ε)").fill("3.2")
    page.get_by_role("button", name="Save the ceiling").click()
    expect(page.locator("#custody-status")).to_contain_text("extend the chain to ε 3")
    expect(page.locator("#upload-level")).to_contain_text("ε 1.5")
    shot(page, "03-value-needs-upload")

    # 3. Extend now: this browser draws 2, 2.5 and 3 from its stored head and uploads them.
    page.get_by_role("button", name="Extend now").click()
    expect(page.locator("#upload-level")).to_contain_text("ε 3")
    expect(page.locator("#custody-status")).to_contain_text("nothing to upload now")
    eps2, outputs2 = stored_chains(attribute)[value.id]
    assert eps2.tolist() == micro("0.5", "1", "1.5", "2", "2.5", "3")
    assert (outputs2[:3] == outputs).all(), "the uploaded prefix is kept"
    stored = json.loads(page.evaluate(f"localStorage.getItem('ldpmarket.owner-held.{value.id}')"))
    assert stored["head"] == "3" and stored["output"] == int(outputs2[-1, 0]) and stored["pending"] is None
    shot(page, "04-value-extended")

    # the raw label never left the browser: no URL, no body of any request
    assert sent and not [r for r in sent if "medlar" in r[1].lower() or "medlar" in r[2].lower()], sent
    chain_bodies = [json.loads(body) for m, u, body in sent if m == "POST" and u.endswith("/chain/")]
    assert chain_bodies == [{"epsilons": ["0.5", "1", "1.5"], "outputs": outputs[:, 0].tolist()},
                            {"epsilons": ["2", "2.5", "3"], "outputs": outputs2[3:, 0].tolist()}]

    # 4. A browser that does not hold the value says so (and offers nothing to extend).
    page.evaluate("localStorage.clear()")
    page.get_by_role("link", name="Raise or lower the ceiling").click()
    page.get_by_label("New ceiling (ε)").fill("4")
    page.get_by_role("button", name="Save the ceiling").click()
    expect(page.locator("#custody-status")).to_contain_text("this browser does not hold it")
    expect(page.get_by_role("button", name="Extend now")).to_be_hidden()
    shot(page, "05-value-elsewhere")


def test_an_owner_chooses_the_upload_level_and_is_told_what_the_device_needs(live_server, browser_page,
                                                                           transactional_db):
    from playwright.sync_api import expect

    from accounts.models import User
    from accounts.roles import grant_role
    from market.models import Value
    from market.purchases.pricing import DEFAULT_POLICY
    from tests.factories import CategoricalAttributeFactory, stored_chains

    page, base = browser_page, live_server.url
    owner = User.objects.create_user("emil", password=PASSWORD)
    grant_role(owner, "owner")
    attribute = CategoricalAttributeFactory(name="commute", labels=["walk", "bike", "bus"],
                                            price_policy=DEFAULT_POLICY, **GRID)
    sent: list[tuple[str, str, str]] = []
    page.on("request", lambda r: sent.append((r.method, r.url, r.post_data or "")))
    page.goto(f"{base}/portal/login/?next=/portal/contribute/{attribute.id}/")
    page.get_by_label("Username").fill("emil")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    # A schedule cannot be kept on the device (the owner API takes a fixed ceiling): refused before any request.
    page.get_by_label("Your value for “commute”").select_option("bike")
    page.get_by_label("Keep my value on this device").check()
    page.get_by_label("A release schedule").check()
    before = len(sent)
    page.get_by_role("button", name="Contribute my value").click()
    expect(page.get_by_role("alert")).to_contain_text("needs a fixed ceiling")
    assert sent[before:] == [] and not Value.objects.filter(attribute=attribute).exists()
    shot(page, "11-schedule-refused")

    # An upload level between grid points, above the ceiling: pre-generated points, never sold above the ceiling.
    page.get_by_label("A fixed ceiling").check()
    page.get_by_label("Ceiling (ε)").fill("1")
    page.get_by_label("Upload up to ε (optional)").fill("2.25")
    page.get_by_role("button", name="Contribute my value").click()
    expect(page).to_have_url(re.compile(r"/portal/values/\d+/$"))
    value = Value.objects.get(owner=owner, attribute=attribute)
    assert stored_chains(attribute)[value.id][0].tolist() == micro("0.5", "1", "1.5", "2", "2.25")
    expect(page.locator("#upload-level")).to_contain_text("ε 2.25")
    expect(page.locator("#custody-status")).to_contain_text("nothing to upload now")
    shot(page, "12-value-upload-level")

    # Above the upload level the chain continues from the off-grid head at the next grid point.
    page.get_by_role("link", name="Raise or lower the ceiling").click()
    page.get_by_label("New ceiling (ε)").fill("3.2")
    page.get_by_role("button", name="Save the ceiling").click()
    page.get_by_role("button", name="Extend now").click()
    expect(page.locator("#upload-level")).to_contain_text("ε 3")
    assert stored_chains(attribute)[value.id][0].tolist() == micro("0.5", "1", "1.5", "2", "2.25", "2.5", "3")
    assert not [r for r in sent if "bike" in r[1].lower() or "bike" in r[2].lower()]


def _sign_in(page, base, username: str, attribute) -> None:
    page.goto(f"{base}/portal/login/?next=/portal/contribute/{attribute.id}/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()


def _contribute_on_device(page, base, username: str, attribute, raw: str, ceiling: str = "1.7") -> None:
    from playwright.sync_api import expect

    if username:
        _sign_in(page, base, username, attribute)
    page.get_by_label(f"Your value for “{attribute.name}”").fill(raw)
    page.get_by_label("A fixed ceiling").check()
    page.get_by_label("Ceiling (ε)").fill(ceiling)
    page.get_by_label("Keep my value on this device").check()
    page.get_by_role("button", name="Contribute my value").click()
    expect(page).to_have_url(re.compile(r"/portal/values/\d+/$"))


def _bodies(sent) -> list[dict]:
    """Every request body the browser sent, as JSON (the login form's body aside)."""
    return [json.loads(body) for m, u, body in sent if m == "POST" and "/api/" in u]


def test_a_numeric_value_is_discretized_once_on_the_device_and_only_its_bit_chain_is_uploaded(
        live_server, browser_page, transactional_db):
    """Issue 32: the browser discretizes the number once (z, kept in its storage), draws z's binary chain and
    uploads it; no request carries the number or z, and "Extend now" continues the same z's chain."""
    from playwright.sync_api import expect

    from accounts.models import User
    from accounts.roles import grant_role
    from market.models import Value
    from market.purchases.pricing import DEFAULT_POLICY
    from tests.factories import NumericAttributeFactory, stored_chains

    page, base = browser_page, live_server.url
    owner = User.objects.create_user("nora", password=PASSWORD)
    grant_role(owner, "owner")
    attribute = NumericAttributeFactory(name="hours of sleep", low=Decimal("0"), high=Decimal("24"),
                                        price_policy=DEFAULT_POLICY, **GRID)
    assert attribute.supports_owner_custody
    sent: list[tuple[str, str, str]] = []
    page.on("request", lambda r: sent.append((r.method, r.url, r.post_data or "")))

    # a number outside the bounds is refused in the browser, before any request
    _sign_in(page, base, "nora", attribute)
    page.get_by_label("Your value for “hours of sleep”").fill("25")
    page.get_by_label("Keep my value on this device").check()
    before = len(sent)
    page.get_by_role("button", name="Contribute my value").click()
    expect(page.get_by_role("alert")).to_contain_text("Please enter a number between 0 and 24")
    assert sent[before:] == [] and not Value.objects.filter(attribute=attribute).exists()

    _contribute_on_device(page, base, "", attribute, "7.37")
    value = Value.objects.get(owner=owner, attribute=attribute)
    assert value.custody == Value.Custody.OWNER and value.raw_sealed is None and value.input_sealed is None
    eps, outputs = stored_chains(attribute)[value.id]
    assert eps.tolist() == micro("0.5", "1", "1.5") and set(outputs.reshape(-1).tolist()) <= {0, 1}
    expect(page.locator("#upload-level")).to_contain_text("ε 1.5")
    expect(page.locator("#custody-status")).to_contain_text("nothing to upload now")
    shot(page, "21-numeric-on-device")
    stored = json.loads(page.evaluate(f"localStorage.getItem('ldpmarket.owner-held.{value.id}')"))
    assert stored == {"value": value.id, "kind": "numeric", "m": 2, "x": "7.37", "z": stored["z"], "head": "1.5",
                      "output": int(outputs[-1, 0]), "pending": None}
    assert stored["z"] in (0, 1)

    # the ceiling rises; "Extend now" continues the chain of the same z (never drawn again)
    page.get_by_role("link", name="Raise or lower the ceiling").click()
    page.get_by_label("New ceiling (ε)").fill("2.5")
    page.get_by_role("button", name="Save the ceiling").click()
    page.get_by_role("button", name="Extend now").click()
    expect(page.locator("#upload-level")).to_contain_text("ε 2.5")
    eps2, outputs2 = stored_chains(attribute)[value.id]
    assert eps2.tolist() == micro("0.5", "1", "1.5", "2", "2.5") and (outputs2[:3] == outputs).all()
    again = json.loads(page.evaluate(f"localStorage.getItem('ldpmarket.owner-held.{value.id}')"))
    assert (again["z"], again["x"], again["head"]) == (stored["z"], "7.37", "2.5")

    # no request carries the number or z: the bodies are the creation (no value) and the bit chains
    assert not [r for r in sent if "7.37" in r[1] or "7.37" in r[2]], sent
    bodies = _bodies(sent)
    assert bodies == [{"attribute": attribute.id, "custody": "owner", "ceiling": "1.7"},
                      {"epsilons": ["0.5", "1", "1.5"], "outputs": outputs[:, 0].tolist()},
                      {"epsilons": ["2", "2.5"], "outputs": outputs2[3:, 0].tolist()}]
    _sold_receipted_and_audited(page, base, attribute, value, "1", outputs2[1])


def test_a_string_value_is_hashed_on_the_device_and_only_its_bloom_bit_chains_are_uploaded(
        live_server, browser_page, transactional_db):
    """Issue 32: the browser builds the string's Bloom filter in the value's cohort (the service's hashes,
    ``mechanisms.rappor.bloom_bits``), draws each bit's chain at epsilon / (2 num_hashes) and uploads one text of
    bits per epsilon (docs/custody.md#uploads); no request carries the string or its Bloom filter."""
    from playwright.sync_api import expect

    from accounts.models import User
    from accounts.roles import grant_role
    from market.models import Value
    from market.purchases.pricing import DEFAULT_POLICY
    from mechanisms.rappor import bloom_bits
    from tests.factories import StringAttributeFactory, stored_chains

    page, base = browser_page, live_server.url
    owner = User.objects.create_user("otto", password=PASSWORD)
    grant_role(owner, "owner")
    attribute = StringAttributeFactory(name="favourite word", num_bits=32, num_hashes=2, num_cohorts=4,
                                       price_policy=DEFAULT_POLICY, **GRID)
    assert attribute.supports_owner_custody
    sent: list[tuple[str, str, str]] = []
    page.on("request", lambda r: sent.append((r.method, r.url, r.post_data or "")))

    word = "Schlüsselwörter"
    _contribute_on_device(page, base, "otto", attribute, f"  {word} ")
    value = Value.objects.get(owner=owner, attribute=attribute)
    assert value.custody == Value.Custody.OWNER and value.raw_sealed is None and value.input_sealed is None
    eps, outputs = stored_chains(attribute)[value.id]
    assert eps.tolist() == micro("0.5", "1", "1.5") and outputs.shape == (3, 32)
    expect(page.locator("#upload-level")).to_contain_text("ε 1.5")
    shot(page, "22-string-on-device")

    stored = json.loads(page.evaluate(f"localStorage.getItem('ldpmarket.owner-held.{value.id}')"))
    bloom = "".join(str(int(b)) for b in bloom_bits([word], [value.cohort], 32, 2)[0])
    texts = ["".join(map(str, row)) for row in outputs.tolist()]
    assert stored == {"value": value.id, "kind": "string", "string": word, "cohort": value.cohort, "num_bits": 32,
                      "num_hashes": 2, "divisor": 4, "bits": bloom, "head": "1.5", "output": texts[-1],
                      "pending": None}

    # the ceiling rises; "Extend now" continues every bit's chain from the stored head
    page.get_by_role("link", name="Raise or lower the ceiling").click()
    page.get_by_label("New ceiling (ε)").fill("2")
    page.get_by_role("button", name="Save the ceiling").click()
    page.get_by_role("button", name="Extend now").click()
    expect(page.locator("#upload-level")).to_contain_text("ε 2")
    expect(page.locator("#custody-status")).to_contain_text("nothing to upload now")
    eps2, outputs2 = stored_chains(attribute)[value.id]
    assert eps2.tolist() == micro("0.5", "1", "1.5", "2") and (outputs2[:3] == outputs).all()
    texts.append("".join(map(str, outputs2[3])))
    again = json.loads(page.evaluate(f"localStorage.getItem('ldpmarket.owner-held.{value.id}')"))
    assert (again["bits"], again["head"], again["output"]) == (bloom, "2", texts[-1])

    # no request carries the string (URL or body) or its Bloom filter: only epsilons and texts of bit outputs
    lowered = word.lower()
    assert not [r for r in sent if lowered in r[1].lower() or lowered in r[2].lower()
                or "schl%c3%bc" in r[1].lower()], sent
    bodies = _bodies(sent)
    assert bodies == [{"attribute": attribute.id, "custody": "owner", "ceiling": "1.7"},
                      {"epsilons": ["0.5", "1", "1.5"], "outputs": texts[:3]},
                      {"epsilons": ["2"], "outputs": texts[3:]}]
    assert bloom not in texts, "at epsilon / 4 per bit (at most 0.5), 32 bits all kept has probability below 1e-5"
    assert not [r for r in sent if bloom in r[2]], "the Bloom filter is in no request body"
    _sold_receipted_and_audited(page, base, attribute, value, "1", outputs2[1])


def _sold_receipted_and_audited(page, base, attribute, value, epsilon: str, uploaded) -> None:
    """Issue 32's "sold, receipted and audited" for a value contributed from this browser: a buyer's purchase
    includes it with the output the device uploaded at ``epsilon``; after a checkpoint its value page verifies the
    release's receipt in the browser; the budget audit and the privacy audit's stay test pass."""
    import numpy as np
    from django.core.management import call_command
    from playwright.sync_api import expect

    from accounts.models import LedgerEntry
    from audit.budget_audit import audit_budgets
    from audit.privacy import privacy_audit
    from market.selectors import all_outputs
    from tests.audit.conftest import buy
    from tests.factories import BuyerFactory, fund

    buyer = BuyerFactory()
    fund(buyer, "100")
    purchase = buy(buyer, attribute, epsilon, np.random.default_rng(3))
    assert (purchase.status, purchase.included) == ("completed", 1)
    ids, outputs = all_outputs(purchase)
    assert ids.tolist() == [value.id] and (outputs[0] == np.asarray(uploaded)).all()
    release = LedgerEntry.objects.get(purchase_id=purchase.id, kind="chain_release")
    call_command("ledger_checkpoint", stdout=open(os.devnull, "w"))
    page.goto(f"{base}/portal/values/{value.id}/")
    expect(page.locator(f'tr.release-row[data-entry-id="{release.id}"] .receipt-cell')).to_have_text("verified")
    assert audit_budgets().ok
    report = privacy_audit(attribute_ids=[attribute.id], plot=False, rng=np.random.default_rng(1))
    assert [a.owner_held for a in report.attributes] == [1] and report.ok
