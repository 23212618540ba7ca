"""Receipts checked on the value page in a real browser (Playwright driving Debian's Chromium; docs/receipts.md).

An owner whose value was sold twice opens the value page after a checkpoint: the browser fetches the value's
receipts, the latest checkpoint and the public key, runs the checks of docs/receipts.md and marks both releases
"verified" (the mark's title names the tree size and the key id), and remembers the checkpoint.  A third sale
made after it shows "not yet in a checkpoint"; after the next checkpoint all three are verified, the browser
having checked the consistency proof from the checkpoint it remembered.  A checkpoint row whose root is changed
in the database without a new signature shows a warning naming the failed check and no "verified"; one changed
and signed again (a service rewriting its log) shows that the log was forked.  With a witness in the service's
trust policy, the checkpoint's signed note is checked with that policy and each release shows "witnessed by 1 of
1" next to "verified"; a forged cosignature, or one dropped, verifies nothing.  Screenshots go to
``test-artifacts/receipts/`` (git-ignored).  Skipped, saying why, without Playwright or ``/usr/bin/chromium``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.portal import test_browser
from tests.portal.test_browser import CHROMIUM, sync_playwright

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
browser_page = test_browser.browser_page  # the fixture: a real Chromium page, CSP violations fail
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "receipts"
#: Tests whose screenshots go to a subfolder (browser_page empties a test's folder before it runs).
SUBFOLDERS = {"test_the_value_page_shows_who_witnessed_the_checkpoint_and_refuses_a_forged_cosignature": "witnessed"}
PASSWORD = "a long and unusual passphrase 42"

pytestmark = [
    pytest.mark.skipif(sync_playwright is None,
                       reason="Playwright for Python is not installed (pip install playwright)"),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


def shot(page, name: str, folder: str = "") -> None:
    page.screenshot(path=str(ARTIFACTS / folder / f"{name}.png"), full_page=True)


def rewrite_checkpoint(tree_size: int, **fields) -> None:
    """Change a checkpoint row as a dishonest operator could: on PostgreSQL the table is append-only (a trigger),
    disabled for this one transaction (``ALTER TABLE`` is transactional there), as tests/audit/conftest.py does;
    SQLite has no such trigger."""
    from django.db import connection, transaction

    from accounts.models import LedgerCheckpoint

    pg = connection.vendor == "postgresql"
    with transaction.atomic():
        if pg:
            with connection.cursor() as cur:
                cur.execute("ALTER TABLE accounts_ledgercheckpoint DISABLE TRIGGER USER")
        assert LedgerCheckpoint.objects.filter(tree_size=tree_size).update(**fields) == 1
        if pg:
            with connection.cursor() as cur:
                cur.execute("ALTER TABLE accounts_ledgercheckpoint ENABLE TRIGGER USER")


def test_the_value_page_verifies_each_release_against_the_latest_checkpoint(live_server, browser_page,
                                                                             transactional_db):
    from playwright.sync_api import expect

    from accounts.ledger import signing
    from accounts.ledger.checkpoints import checkpoint_make
    from accounts.models import LedgerEntry, User
    from accounts.roles import grant_role
    from market.purchases.pricing import DEFAULT_POLICY
    from tests.factories import BuyerFactory, CategoricalAttributeFactory, fund
    from tests.portal.conftest import contribute_one, purchase

    page, base = browser_page, live_server.url
    owner = User.objects.create_user("rhea", password=PASSWORD)
    grant_role(owner, "owner")
    buyer = BuyerFactory(username="receipts-buyer", organisation="Open Ledger Lab")
    fund(buyer, "100")
    attribute = CategoricalAttributeFactory(name="favourite tree", labels=["oak", "ash", "yew"],
                                            price_policy=DEFAULT_POLICY)
    value = contribute_one(owner, attribute, "ash", ceiling="2")
    contribute_one(User.objects.create_user("other-owner"), attribute, "yew", ceiling="2", seed=1)
    purchase(buyer, attribute, "0.5")
    purchase(buyer, attribute, "1", seed=1)
    first = checkpoint_make()
    releases = list(LedgerEntry.objects.filter(value_id=value.id, kind__in=LedgerEntry.RELEASE_KINDS)
                    .order_by("id").values_list("id", flat=True))
    assert first is not None and len(releases) == 2
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))

    page.goto(f"{base}/portal/login/?next=/portal/values/{value.id}/")
    page.get_by_label("Username").fill("rhea")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="favourite tree")).to_be_visible()

    def mark(entry_id):
        return page.locator(f'tr.release-row[data-entry-id="{entry_id}"] .receipt-cell')

    # 1. Two releases, one checkpoint: both verified, the checkpoint remembered.
    for entry_id in releases:
        expect(mark(entry_id)).to_have_text("verified")
    title = mark(releases[0]).locator(".badge").get_attribute("title")
    assert f"signed log of tree size {first.tree_size}" in title and f"key id {signing.key_id()}" in title
    expect(page.locator("#receipts-status")).to_contain_text(f"tree size {first.tree_size}")
    expect(page.locator("#receipts-warning")).to_be_hidden()
    link = page.get_by_role("link", name="Download receipts (JSON)")
    assert link.get_attribute("href") == f"/portal/values/{value.id}/receipts/"
    stored = json.loads(page.evaluate("localStorage.getItem('ldpmarket.checkpoint')"))
    assert (stored["tree_size"], stored["root_hash"]) == (first.tree_size, first.root_hash)
    assert f"{base}/portal/values/{value.id}/receipts/?tree_size={first.tree_size}" in requests
    shot(page, "01-verified")

    # 2. A sale after the checkpoint: not yet in one; the others still verified.
    purchase(buyer, attribute, "1.5", seed=2)
    third = LedgerEntry.objects.filter(value_id=value.id, kind__in=LedgerEntry.RELEASE_KINDS).latest("id").id
    page.reload()
    expect(mark(third)).to_have_text("not yet in a checkpoint")
    for entry_id in releases:
        expect(mark(entry_id)).to_have_text("verified")
    expect(page.locator("#receipts-status")).to_contain_text("1 not yet in a checkpoint")
    expect(page.locator("#receipts-warning")).to_be_hidden()
    shot(page, "02-pending")

    # 3. The next checkpoint: all three verified, linked to the remembered one by a consistency proof.
    second = checkpoint_make()
    assert second.tree_size > first.tree_size
    requests.clear()
    page.reload()
    for entry_id in [*releases, third]:
        expect(mark(entry_id)).to_have_text("verified")
    expect(page.locator("#receipts-warning")).to_be_hidden()
    assert f"{base}/api/v1/ledger/consistency/?first={first.tree_size}&second={second.tree_size}" in requests
    stored = json.loads(page.evaluate("localStorage.getItem('ldpmarket.checkpoint')"))
    assert (stored["tree_size"], stored["root_hash"]) == (second.tree_size, second.root_hash)

    # 4. The latest checkpoint's root changed in the database, not signed again: a warning, nothing verified.
    fake_root = "ab" * 32
    rewrite_checkpoint(second.tree_size, root_hash=fake_root)
    page.reload()
    warning = page.locator("#receipts-warning")
    expect(warning).to_be_visible()
    expect(warning.get_by_role("heading")).to_contain_text("did not verify (signature)")
    expect(warning).to_contain_text("its signature does not verify with the published key")
    expect(page.locator(".receipt-cell .receipt-verified")).to_have_count(0)
    stored = json.loads(page.evaluate("localStorage.getItem('ldpmarket.checkpoint')"))
    assert stored["root_hash"] == second.root_hash, "a checkpoint that failed is not remembered"
    shot(page, "03-tampered-root")

    # 5. Changed and signed again (the service rewrote its log): the browser remembers the real root of that
    #    size, so the log was forked.
    statement = signing.statement(second.tree_size, fake_root, second.created_at)
    rewrite_checkpoint(second.tree_size, signature=signing.sign(statement))
    page.reload()
    expect(warning.get_by_role("heading")).to_have_text("The ledger's log was rewritten (forked)")
    expect(warning).to_contain_text(f"two signed checkpoints of tree size {second.tree_size} have different roots")
    expect(page.locator(".receipt-cell .receipt-verified")).to_have_count(0)
    expect(page.locator(".receipt-cell").first).to_have_text("not verified")
    shot(page, "04-forked")


def test_the_value_page_shows_who_witnessed_the_checkpoint_and_refuses_a_forged_cosignature(
        live_server, browser_page, transactional_db, tmp_path, settings):
    """Issue 29: the service's trust policy names a witness (a witness of the client package, in a thread of the test,
    on loopback); the checkpoint is submitted to it on commit and cosigned.  The page fetches the policy
    (GET /api/v1/ledger/policy/), opens the receipts' checkpoint note with it and shows "witnessed by 1 of 1" next
    to "verified".  The receipts download intercepted and its note changed: a witness's cosignature with one base64
    character changed (forged), or dropped (the quorum not met), shows a warning and no "verified"."""
    from django.core.management import call_command
    from playwright.sync_api import expect

    from accounts.ledger import signing
    from accounts.models import LedgerCosignature, LedgerEntry, User
    from accounts.roles import grant_role
    from accounts.services import budget_set_ceiling
    from ldpmarket_client.tlog.note import COSIGNATURE_V1, Signer, parse_vkey
    from ldpmarket_client.witness import Witness, serve_in_thread
    from market.purchases.pricing import DEFAULT_POLICY
    from tests.factories import BuyerFactory, CategoricalAttributeFactory, fund
    from tests.portal.conftest import contribute_one, purchase

    page, base = browser_page, live_server.url
    owner = User.objects.create_user("tess", password=PASSWORD)
    grant_role(owner, "owner")
    buyer = BuyerFactory(username="witness-buyer", organisation="Open Ledger Lab")
    fund(buyer, "100")
    attribute = CategoricalAttributeFactory(name="favourite river", labels=["Ouse", "Wye", "Tay"],
                                            price_policy=DEFAULT_POLICY)
    value = contribute_one(owner, attribute, "Wye", ceiling="2")
    contribute_one(User.objects.create_user("other-river-owner"), attribute, "Tay", ceiling="2", seed=1)
    purchase(buyer, attribute, "0.5")
    purchase(buyer, attribute, "1", seed=1)
    call_command("ledger_checkpoint", stdout=open(os.devnull, "w"))   # before the witness: no cosignature

    signer = Signer.generate("owners.test/w1", COSIGNATURE_V1)
    server = serve_in_thread(Witness(signer, [parse_vkey(signing.vkey())], tmp_path / "witness.sqlite3"))
    try:
        policy = tmp_path / "service-policy.txt"
        policy.write_text(f"witness w1 {signer.verifier.vkey} {server.url}\nquorum w1\n")
        settings.LDP_WITNESS_POLICY = str(policy)
        budget_set_ceiling(value_id=value.id, ceiling="2.5")   # a new block, then its checkpoint: submitted on commit
        call_command("ledger_checkpoint", stdout=open(os.devnull, "w"))
        assert LedgerCosignature.objects.count() == 1
    finally:
        server.shutdown()
        server.server_close()
    releases = list(LedgerEntry.objects.filter(value_id=value.id, kind__in=LedgerEntry.RELEASE_KINDS)
                    .order_by("id").values_list("id", flat=True))
    assert len(releases) == 2
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))

    page.goto(f"{base}/portal/login/?next=/portal/values/{value.id}/")
    page.get_by_label("Username").fill("tess")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="favourite river")).to_be_visible()

    def mark(entry_id):
        return page.locator(f'tr.release-row[data-entry-id="{entry_id}"] .receipt-cell')

    # 1. Verified, and witnessed by the policy's one witness.
    for entry_id in releases:
        expect(mark(entry_id).locator(".receipt-verified")).to_have_text("verified")
        expect(mark(entry_id).locator(".receipt-witnessed")).to_have_text("witnessed by 1 of 1")
    expect(mark(releases[0])).to_have_text("verified witnessed by 1 of 1")
    title = mark(releases[0]).locator(".badge").get_attribute("title")
    assert "witnessed by 1 of 1 (w1), quorum w1" in title, title
    expect(page.locator("#receipts-status")).to_contain_text("witnessed by 1 of 1 (w1; quorum w1)")
    expect(page.locator("#receipts-warning")).to_be_hidden()
    assert f"{base}/api/v1/ledger/policy/" in requests
    shot(page, "01-witnessed", "witnessed")

    # 2. The receipts file as downloaded, with the witness's cosignature changed or dropped.
    receipts_url = f"**/portal/values/{value.id}/receipts/*"

    def serve(change):
        def handler(route):
            response = route.fetch()
            bundle = response.json()
            note = bundle["checkpoint"]["note"]
            line = next(x for x in note.splitlines() if x.startswith(f"\u2014 {signer.name} "))
            bundle["checkpoint"]["note"] = change(note, line)
            route.fulfill(response=response, body=json.dumps(bundle))
        return handler

    def forge(note, line):
        head, raw = line.rsplit(" ", 1)
        return note.replace(line, f"{head} {raw[:30] + ('A' if raw[30] != 'A' else 'B') + raw[31:]}")

    warning = page.locator("#receipts-warning")
    page.route(receipts_url, serve(forge))
    page.reload()
    expect(warning).to_be_visible()
    expect(warning.get_by_role("heading")).to_have_text("Receipts did not verify (note)")
    expect(warning).to_contain_text(f"the signature of {signer.name} (key {signer.key_id:08x}) does not verify")
    expect(page.locator("#receipts-status")).to_contain_text("Nothing was verified")
    for entry_id in releases:
        expect(mark(entry_id)).to_have_text("not verified")
    expect(page.locator(".receipt-cell .receipt-verified")).to_have_count(0)
    expect(page.locator(".receipt-witnessed")).to_have_count(0)
    shot(page, "02-forged-cosignature", "witnessed")

    page.unroute(receipts_url)
    page.route(receipts_url, serve(lambda note, line: note.replace(line + "\n", "")))
    page.reload()
    expect(warning.get_by_role("heading")).to_have_text("Receipts did not verify (quorum)")
    expect(warning).to_contain_text("cosigned by 0 of 1 witnesses (none); the quorum is w1")
    expect(page.locator(".receipt-cell .receipt-verified")).to_have_count(0)
    shot(page, "03-quorum-not-met", "witnessed")

    # 3. As served again: verified and witnessed.
    page.unroute(receipts_url)
    page.reload()
    for entry_id in releases:
        expect(mark(entry_id)).to_have_text("verified witnessed by 1 of 1")
    expect(warning).to_be_hidden()
