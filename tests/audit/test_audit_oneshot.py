"""The budget audit covers one-shot releases and surveys (issue 7 item 5): a clean market passes; each kind of
tampering with them is caught -- with a test for every new check.  Also: the guarantee reaches the auditors'
ledger API and the CSV export."""
from __future__ import annotations

import contextlib
import csv
import io
from decimal import Decimal as D

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from rest_framework.test import APIClient

from accounts.models import BudgetAccount, LedgerEntry
from audit.budget_audit import audit_budgets
from audit.privacy import privacy_audit
from market.models import Purchase, PurchaseChunk
from market.purchases.execution import purchase_claim, purchase_execute
from market.values.services import value_set_pum_tag
from tests.audit.conftest import tampering
from tests.factories import BinaryAttributeFactory, GraphAttributeFactory, UrrAttributeFactory
from tests.ledger_edits import edit_entry
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values


@contextlib.contextmanager
def without_check(table: str, name: str):
    """Drop a CHECK constraint for the tampering (PostgreSQL: transactional, rolled back with the test)."""
    if connection.vendor != "postgresql":
        pytest.skip("dropping a CHECK constraint to tamper needs PostgreSQL")
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # pending deferred FK checks must fire before ALTER TABLE
        cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        cur.execute("SET CONSTRAINTS ALL DEFERRED")
    yield


@pytest.fixture
def market(db):
    rng = np.random.default_rng(21)
    buyer = funded_buyer()
    urr = UrrAttributeFactory(price_policy=POLICY)
    vs = values(urr, ["a", "b", "c", "d", "e"] * 4, ceiling="3")
    value_set_pum_tag(value_id=vs[2].id, tag="home")
    graph = GraphAttributeFactory(price_policy=POLICY)
    values(graph, [{"0": 0.5}, {"1": -1}, {}] * 3, ceiling="3")
    binary = BinaryAttributeFactory(price_policy=POLICY)
    values(binary, ["yes"] * 20 + ["no"] * 30, ceiling="3")
    chain, _ = purchase_claim(buyer=buyer, attribute=binary, epsilon="0.5", cohort=None, idempotency_key="chain")
    out = {
        "urr": run(buyer, urr, epsilon="1", rng=rng),
        "lpp": run(buyer, graph, eps1="1", eps2="1", rng=rng),
        "chain": purchase_execute(purchase_id=chain.id, rng=rng),
        "warner": run(buyer, binary, mechanism="warner", epsilon="0.5", rng=rng),
        "ic": run(buyer, binary, mechanism="improved_christofides", epsilon="1", p2="0.1", rng=rng),
    }
    return out


def failed(report, *fragments):
    bad = [c.name for c in report.failed]
    for fragment in fragments:
        assert any(fragment in n for n in bad), (fragment, bad)


def test_a_clean_market_with_oneshot_releases_and_surveys_passes(market):
    report = audit_budgets()
    assert report.ok, report.as_text()
    names = {c.name: c for c in report.checks}
    assert names["each one-shot release is at its purchase's charged epsilon"].checked == 20 + 9 + 50 + 50
    assert any(n.startswith("each budget's oneshot_loss is the sum") for n in names)
    assert market["ic"].guarantee == "per_report_non_collusion"


def edit_oneshot_epsilon(m):
    e = LedgerEntry.objects.filter(purchase=m["urr"]).order_by("id").first()
    edit_entry(e, epsilon=e.epsilon - D("0.1"), oneshot_loss_after=e.oneshot_loss_after - D("0.1"))


def edit_budget_oneshot_loss(m):
    v = LedgerEntry.objects.filter(purchase=m["lpp"]).first().value_id
    BudgetAccount.objects.filter(value_id=v).update(oneshot_loss=F("oneshot_loss") - D("0.2"))


def edit_charged_epsilon(m):
    Purchase.objects.filter(id=m["urr"].id).update(charged_epsilon=D("0.9"))


def relabel_ic_release(m):
    e = LedgerEntry.objects.filter(purchase=m["ic"]).order_by("id").first()
    edit_entry(e, guarantee="ldp")


def disguise_ic_purchase(m):
    Purchase.objects.filter(id=m["ic"].id).update(mechanism="christofides", guarantee="ldp")


def store_survey_outputs(m):
    PurchaseChunk.objects.create(purchase=m["ic"], attribute_id=m["ic"].attribute_id, seq=0, count=2,
                                 value_ids=np.array([1, 2], "<i8").tobytes(),
                                 outputs=np.array([1, 3], "<i2").tobytes())


def oneshot_as_chain_release(m):
    e = LedgerEntry.objects.filter(purchase=m["warner"]).order_by("id").first()
    edit_entry(e, kind="chain_release", guarantee="", chain_loss_after=e.chain_loss_before + e.epsilon,
               oneshot_loss_after=e.oneshot_loss_before)


CASES = {
    "one-shot release epsilon edited": (edit_oneshot_epsilon, [
        "each block's hash recomputes", "each one-shot release is at its purchase's charged epsilon",
        "oneshot_loss is the sum of its one-shot releases"]),
    "budget oneshot_loss edited": (edit_budget_oneshot_loss, [
        "oneshot_loss is the sum of its one-shot releases", "replayed final losses equal the budget rows"]),
    "purchase charged epsilon edited": (edit_charged_epsilon, [
        "each one-shot release is at its purchase's charged epsilon"]),
    "IC release relabelled as epsilon-LDP": (relabel_ic_release, [
        "each block's hash recomputes", "each release's guarantee matches its purchase's mechanism"]),
    "IC survey disguised as Christofides": (disguise_ic_purchase, [
        "each release's guarantee matches its purchase's mechanism"]),
    "survey outputs stored": (store_survey_outputs, ["surveys store no outputs"]),
    "one-shot release recorded as a chain release": (oneshot_as_chain_release, [
        "each block's hash recomputes", "one-shot purchases and surveys oneshot_release",
        "oneshot_loss is the sum of its one-shot releases"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tampering_with_oneshot_releases_is_caught(market, case):
    tamper, expected = CASES[case]
    with tampering():
        tamper(market)
    report = audit_budgets()
    assert not report.ok
    failed(report, *expected)
    for c in report.failed:
        assert c.examples, c.name


@pytest.mark.postgres
def test_a_guarantee_on_a_budget_event_is_caught(market):
    """The CHECK forbids it; whoever drops the CHECK is still caught by the audit (and the hash)."""
    with tampering(), without_check("accounts_ledgerevent", "ledger_guarantee_only_on_releases"):
        e = LedgerEntry.objects.filter(kind="ceiling").order_by("id").first()
        edit_entry(e, guarantee="ldp")
        failed(audit_budgets(), "budget events carry no guarantee", "each block's hash recomputes")


@pytest.mark.postgres
def test_a_completed_oneshot_purchase_without_its_charged_epsilon_is_caught(market):
    with without_check("market_purchase", "purchase_oneshot_completed_charged"), \
            without_check("market_purchase", "purchase_guarantee_fits_mechanism"):
        Purchase.objects.filter(id=market["lpp"].id).update(charged_epsilon=None, guarantee="uldp")
        failed(audit_budgets(), "each purchase's guarantee is its mechanism's",
               "each one-shot release is at its purchase's charged epsilon")


def test_auditors_see_the_guarantee_and_mechanism_in_the_ledger_api_and_export(market, auditor, settings):
    settings.ROOT_URLCONF = "tests.audit.urls"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "audit-oneshot"}}
    client = APIClient()
    client.force_authenticate(auditor)
    rows = client.get("/api/v1/audit/ledger/", {"purchase": market["ic"].id, "page_size": 100}).json()["results"]
    assert len(rows) == 50
    assert {(r["kind"], r["mechanism"], r["guarantee"], r["guarantee_label"]) for r in rows} == {
        ("oneshot_release", "improved_christofides", "per_report_non_collusion",
         "per-report eps, non-collusion assumption")}
    per_report = client.get("/api/v1/audit/ledger/", {"guarantee": "per_report_non_collusion",
                                                      "page_size": 100}).json()["results"]
    assert {r["purchase"] for r in per_report} == {market["ic"].id}
    chain_rows = client.get("/api/v1/audit/ledger/", {"purchase": market["chain"].id}).json()["results"]
    assert {(r["mechanism"], r["guarantee"]) for r in chain_rows} == {("gradual_rr", "")}
    out = io.StringIO()
    call_command("export_ledger", "--guarantee", "uldp", stdout=out)
    exported = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(exported) == 20 and {(r["guarantee"], r["mechanism"]) for r in exported} == {("uldp", "urr")}
    out = io.StringIO()
    call_command("export_ledger", stdout=out)
    everything = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert {r["guarantee"] for r in everything if r["kind"] == "ceiling"} == {""}


@pytest.mark.postgres
def test_export_server_and_python_paths_agree_with_guarantees(market):
    from audit.export import rows_python, rows_server

    qs = LedgerEntry.objects.all()
    assert "".join(rows_server(qs)) == "".join(rows_python(qs, 7))


def test_the_privacy_audit_notes_oneshot_attributes_instead_of_attacking_chains(market):
    report = privacy_audit(attribute_ids=[market["urr"].attribute_id, market["chain"].attribute_id],
                                 plot=False, rng=np.random.default_rng(0))
    by_id = {a.attribute_id: a for a in report.attributes}
    oneshot_attr = by_id[market["urr"].attribute_id]
    assert "one-shot mechanism (urr)" in oneshot_attr.note and oneshot_attr.values == 20 and oneshot_attr.ok
    assert by_id[market["chain"].attribute_id].sampled == 50


def test_the_console_shows_auditors_each_purchases_guarantee_in_words(market, auditor):
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(auditor)
    page = client.get(reverse("admin:market_purchase_change", args=[market["ic"].id]))
    assert page.status_code == 200
    assert "per-report eps, non-collusion assumption" in page.content.decode()
    listing = client.get(reverse("admin:market_purchase_changelist")).content.decode()
    assert "per-report eps, non-collusion assumption" in listing and "epsilon-ULDP" in listing
    assert "gradual release (only the highest epsilon counts)" in listing
    assert "per_report_non_collusion</td>" not in listing  # never the bare code
