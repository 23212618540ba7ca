"""GET /api/v1/audit/ledger/: auditors and staff only, cursor-paginated by id, filtered by owner, attribute, buyer
and time; and the ledger export command."""
from __future__ import annotations

import csv
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from accounts.models import LedgerEntry
from tests.factories import BuyerFactory

pytestmark = pytest.mark.urls("tests.audit.urls")
URL = "/api/v1/audit/ledger/"


@pytest.fixture(autouse=True)
def _no_throttle_leaks(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "audit-api-tests"}}


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def all_pages(client, params=None, page_size=10) -> list[dict]:
    rows, url, params = [], URL, {**(params or {}), "page_size": page_size}
    while url:
        response = client.get(url, params)
        assert response.status_code == 200, response.content[:500]
        body = response.json()
        rows += body["results"]
        url, params = body["next"], None
    return rows


def test_only_auditors_and_staff_read_the_ledger(market, auditor, staff, superuser, owner):
    assert client_for().get(URL).status_code in (401, 403)
    for user in (owner, market.buyer, BuyerFactory()):
        response = client_for(user).get(URL)
        assert response.status_code == 403 and "application/problem+json" in response["Content-Type"]
    for user in (auditor, staff, superuser):
        assert client_for(user).get(URL).status_code == 200
    for method in ("post", "put", "patch", "delete"):
        assert getattr(client_for(auditor), method)(URL, {}).status_code == 405
    assert getattr(client_for(owner), "post")(URL, {}).status_code == 403


def test_cursor_pagination_walks_the_ledger_in_id_order(market, auditor):
    rows = all_pages(client_for(auditor), page_size=10)
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids) == list(LedgerEntry.objects.order_by("id").values_list("id", flat=True))
    first = client_for(auditor).get(URL, {"page_size": 10}).json()
    assert len(first["results"]) == 10 and first["previous"] is None and "cursor=" in first["next"]
    entry = LedgerEntry.objects.filter(kind="chain_release").select_related("value", "block", "purchase").first()
    row = next(r for r in rows if r["id"] == entry.id)
    assert row["epsilon"] == str(entry.epsilon) and row["block_hash"] == entry.block.hash
    assert (row["owner"], row["attribute"], row["buyer"]) == (entry.value.owner_id, entry.value.attribute_id,
                                                              entry.purchase.buyer_id)
    assert "raw_sealed" not in row and "input_sealed" not in row


def test_filters(market, auditor):
    client = client_for(auditor)
    owner = market.fixed[4].owner
    by_id = all_pages(client, {"owner": owner.id})
    by_name = all_pages(client, {"owner": owner.username})
    assert by_id == by_name and {r["value"] for r in by_id} == {market.fixed[4].id} and len(by_id) == 3
    assert len(all_pages(client, {"attribute": market.attribute.id}, page_size=100)) == LedgerEntry.objects.count()
    assert all_pages(client, {"attribute": market.attribute.id + 999}) == []
    bought = all_pages(client, {"buyer": market.buyer.username}, page_size=100)
    assert len(bought) == sum(p.included for p in market.purchases) == 57
    second = LedgerEntry.objects.filter(purchase=market.purchases[1]).first().created_at
    before = all_pages(client, {"buyer": market.buyer.id, "created_before": second.isoformat()}, page_size=100)
    after = all_pages(client, {"buyer": market.buyer.id, "created_after": second.isoformat()}, page_size=100)
    assert {r["purchase"] for r in before} == {market.purchases[0].id}
    assert {r["purchase"] for r in after} == {market.purchases[1].id}
    assert all_pages(client, {"created_after": "2999-01-01"}) == []
    assert len(all_pages(client, {"kind": "ceiling"})) == 25  # 24 fixed values + one lowered ceiling
    response = client.get(URL, {"created_after": "not a date"})
    assert response.status_code == 400


def test_schema_documents_the_endpoint(db, auditor):
    response = client_for(auditor).get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert "/api/v1/audit/ledger/" in response.content.decode()


def test_export_command(market, tmp_path):
    out = io.StringIO()
    call_command("export_ledger", stdout=out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [int(r["entry_id"]) for r in rows] == list(LedgerEntry.objects.order_by("id").values_list("id", flat=True))
    path = tmp_path / "ledger.csv"
    call_command("export_ledger", "--buyer", market.buyer.username, "--attribute", str(market.attribute.id),
                 "-o", str(path), stderr=io.StringIO())
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 57 and {r["kind"] for r in rows} == {"chain_release"}
    assert {r["buyer"] for r in rows} == {market.buyer.username}
    with pytest.raises(CommandError, match="created_after"):
        call_command("export_ledger", "--created-after", "soon", stdout=io.StringIO())


@pytest.mark.postgres
def test_export_server_and_python_paths_write_the_same_bytes(market):
    """PostgreSQL streams the CSV from COPY; it is byte-identical to the generic (Python) path."""
    from audit.export import rows_python, rows_server

    for qs in (LedgerEntry.objects.all(), LedgerEntry.objects.filter(value__owner=market.fixed[3].owner)):
        assert "".join(rows_server(qs)) == "".join(rows_python(qs, 7))


def test_export_command_reports_rows_not_chunks_and_refuses_unknown_users(market, tmp_path):
    """Issue 13: the command printed the number of chunks of the stream (0 for a small ledger) as "ledger
    entries", and a mistyped --owner or --buyer exported an empty ledger without a word."""
    path = tmp_path / "ledger.csv"
    err = io.StringIO()
    call_command("export_ledger", "-o", str(path), stderr=err)
    total = LedgerEntry.objects.count()
    assert total > 50 and len(list(csv.DictReader(path.open()))) == total
    assert err.getvalue().strip() == f"{total} ledger entries written to {path}"
    err, out = io.StringIO(), io.StringIO()
    call_command("export_ledger", "--buyer", market.buyer.username, stdout=out, stderr=err)
    rows = len(list(csv.DictReader(io.StringIO(out.getvalue()))))
    assert err.getvalue().strip() == f"{rows} ledger entries written to stdout" and rows > 0
    owner = market.fixed[3].owner
    err = io.StringIO()
    call_command("export_ledger", "--owner", str(owner.id), "-o", str(path), stderr=err)
    assert err.getvalue().strip() == f"{LedgerEntry.objects.filter(value__owner=owner).count()} ledger entries " \
                                     f"written to {path}"
    for option in ("--owner", "--buyer"):
        with pytest.raises(CommandError, match=f"{option}: no user with id or username 'nobody-here'"):
            call_command("export_ledger", option, "nobody-here", stdout=io.StringIO(), stderr=io.StringIO())
        with pytest.raises(CommandError, match="no user"):
            call_command("export_ledger", option, "99999999", stdout=io.StringIO(), stderr=io.StringIO())


def test_a_mistyped_anchor_is_not_found_not_rewritten(market):
    """Issue 13: a mistyped ``--anchor`` was reported as "the chain was rewritten"."""
    from audit.budget_audit import audit_budgets

    head = audit_budgets().head_hash
    assert audit_budgets(anchor=head).ok
    typo = head[:10] + ("0" if head[10] != "0" else "1") + head[11:]
    report = audit_budgets(anchor=typo)
    (check,) = report.failed
    assert "not found" in check.examples[0] and head in check.examples[0] and "rewritten" not in check.examples[0]
    with pytest.raises(CommandError, match="is not a block hash"):
        call_command("audit_budgets", "--anchor", head[:16], stdout=io.StringIO())
    with pytest.raises(CommandError, match="is not a block hash"):
        call_command("audit_budgets", "--anchor", "zz" + head[2:], stdout=io.StringIO())
    other = "ab" * 32
    (check,) = audit_budgets(anchor=other).failed
    assert check.examples[0].startswith(f"anchor {other} not found")
