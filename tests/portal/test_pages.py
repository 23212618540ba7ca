"""The owner portal's pages and actions through the Django test client (docs/architecture.md#apps-and-models)."""
from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry
from accounts.money.format import format_money
from accounts.money.services import earnings_settle
from market.models import Value
from market.purchases.pricing import DEFAULT_POLICY
from tests.factories import BinaryAttributeFactory, NumericAttributeFactory, StringAttributeFactory, chain_head
from tests.portal.conftest import contribute_one, purchase

pytestmark = pytest.mark.django_db
D = Decimal


def budget(value) -> BudgetAccount:
    return BudgetAccount.objects.get(value=value)


def text(response) -> str:
    """The page's visible text, tags stripped and whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


# ----------------------------------------------------------------------------------------------- dashboard

def test_the_dashboard_shows_each_value_with_its_budget_loss_head_and_chart(owner_client, value, buyer, attribute):
    purchase(buyer, attribute, "0.5")
    before = re.search(r'id="earnings-total">([^<]+)<', owner_client.get("/portal/").content.decode()).group(1)
    earnings_settle(shard=attribute.id)  # the owner paid, as the task enqueued on the purchase's commit does
    response = owner_client.get("/portal/")
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0") and "no-store" in response["Cache-Control"]
    page, html = text(response), response.content.decode()
    assert "green" in page  # the owner's own raw value
    assert "Fixed ceiling ε 2" in page
    assert "Chain head ε 2" in page
    assert re.search(r'<meter id="loss-\d+" min="0" max="2" value="0.5"', html)
    assert "ε 0.5 of ε 2 spent (25%)" in page
    assert html.count('<svg class="chart"') == 1 and 'role="img"' in html
    assert "Institute of Careful Statistics" in page
    earned = MoneyEntry.objects.get(account__user=value.owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS).amount
    assert f'id="earnings-total">{format_money(earned)}<' in html and format_money(earned).endswith(" EUR")
    assert before == format_money(earned)  # the total counts earnings not settled yet too
    assert "1 release" in page


def test_a_scheduled_value_shows_its_schedule_and_planned_ceiling(owner_client, owner, attribute):
    from accounts.services import Schedule

    now = timezone.now()
    schedule = Schedule(start="0.5", cap="2.5", start_at=now, end_at=now + timedelta(days=10), shape="steps",
                        steps=4)
    value = contribute_one(owner, attribute, "red", schedule=schedule)
    page = text(owner_client.get("/portal/"))
    assert "Schedule: ε 0.5 → ε 2.5, in 4 steps" in page and "ceiling now ε 0.5" in page
    html = owner_client.get(f"/portal/values/{value.id}/").content.decode()
    assert 'class="ceiling planned"' in html and ">now<" in html


def test_the_value_page_shows_releases_history_and_earnings(owner_client, value, buyer, attribute):
    purchase(buyer, attribute, "0.5", seed=1)
    earnings_settle(shard=attribute.id)  # each purchase's earnings settled after it, as in a deployment
    purchase(buyer, attribute, "1.5", seed=2)  # an upgrade: pays the difference
    earnings_settle(shard=attribute.id)
    response = owner_client.get(f"/portal/values/{value.id}/")
    page = text(response)
    earnings = list(MoneyEntry.objects.filter(account__user=value.owner).order_by("id")
                    .values_list("amount", flat=True))
    assert len(earnings) == 2
    for amount in earnings:
        assert format_money(amount) in page
    assert f"{format_money(sum(earnings))} from 2 releases" in page
    assert "Chain release at ε 1.5" in page and "Chain release at ε 0.5" in page
    assert page.count("Institute of Careful Statistics") == 2
    assert response.content.decode().count('class="release"') == 2


def test_the_releases_page_lists_every_release_with_earnings_and_the_total(owner_client, owner, value, buyer,
                                                                           attribute):
    from tests.factories import CategoricalAttributeFactory

    second = CategoricalAttributeFactory(name="second question", price_policy=DEFAULT_POLICY)
    contribute_one(owner, second, "blue", ceiling="3", seed=3)
    purchase(buyer, attribute, "1")
    purchase(buyer, second, "2")
    earnings_settle(shard=attribute.id)  # the owner paid, as the tasks enqueued on the purchases' commits do
    earnings_settle(shard=second.id)
    response = owner_client.get("/portal/releases/")
    page = text(response)
    total = sum(MoneyEntry.objects.filter(account__user=owner).values_list("amount", flat=True))
    assert f"You have earned {format_money(total)} in total from 2 releases" in page
    assert "second question" in page and "favourite colour" in page
    rows = response.context["releases"]
    assert [r.epsilon for r in rows] == [D("2"), D("1")]
    assert sum(r.earned for r in rows) == total


def test_releases_are_paginated(owner_client, value, buyer, attribute):
    from market.values import owner_rows

    for i in range(3):
        purchase(buyer, attribute, f"0.{i + 1}", seed=i)
    page, rows = owner_rows.release_page(value.owner, 2, per_page=2)
    assert page.number == 2 and len(rows) == 1 and rows[0].epsilon == D("0.1")
    assert owner_client.get("/portal/releases/?page=99").status_code == 200


# -------------------------------------------------------------------------------------------- contributing

def test_the_contribute_page_lists_attributes_and_marks_contributed_ones(owner_client, value, attribute):
    other = BinaryAttributeFactory(dataset=attribute.dataset, name="smoker")
    html = owner_client.get("/portal/contribute/").content.decode()
    assert f"/portal/contribute/{other.id}/" in html
    assert f"/portal/contribute/{attribute.id}/" not in html and f"/portal/values/{value.id}/" in html
    response = owner_client.get(f"/portal/contribute/{attribute.id}/")
    assert "already contributed" in text(response)


@pytest.mark.parametrize("factory, expected", [
    ("categorical", r'<select name="raw"[^>]*id="id_raw"'),
    ("binary", r'<select name="raw"[^>]*id="id_raw"'),
    ("numeric", r'<input type="number" name="raw"[^>]*min="0" max="100"'),
    ("string", r'<input type="text" name="raw"[^>]*maxlength="200"'),
])
def test_the_value_input_is_adapted_to_the_attribute_kind(owner_client, attribute, factory, expected):
    target = {"categorical": lambda: attribute, "binary": BinaryAttributeFactory, "numeric": NumericAttributeFactory,
              "string": StringAttributeFactory}[factory]()
    html = owner_client.get(f"/portal/contribute/{target.id}/").content.decode()
    assert re.search(expected, html), html
    if factory == "binary":
        assert '<option value="no">no</option>' in html and '<option value="yes">yes</option>' in html


@pytest.mark.parametrize("factory, raw", [
    ("categorical", "blue"), ("binary", "yes"), ("numeric", "42.5"), ("string", "hello world")])
def test_contributing_a_value_with_a_fixed_ceiling(owner_client, owner, attribute, factory, raw):
    target = {"categorical": lambda: attribute, "binary": BinaryAttributeFactory, "numeric": NumericAttributeFactory,
              "string": StringAttributeFactory}[factory]()
    response = owner_client.post(f"/portal/contribute/{target.id}/", {"raw": raw, "policy": "fixed", "ceiling": "0.7"})
    value = Value.objects.get(owner=owner, attribute=target)
    assert response.status_code == 302 and response["Location"] == f"/portal/values/{value.id}/"
    assert budget(value).ceiling == D("0.7") and not budget(value).scheduled
    assert chain_head(value) == (D("0.7"), 7)  # its slot's points 0.1 ... 0.7
    page = text(owner_client.get(response["Location"]))
    assert raw in page and "now offered for sale" in page


def test_contributing_a_value_with_a_schedule(owner_client, owner, attribute):
    response = owner_client.post(f"/portal/contribute/{attribute.id}/", {
        "raw": "red", "policy": "schedule", "start": "0.2", "cap": "1", "duration": "2", "unit": "weeks",
        "shape": "linear"})
    assert response.status_code == 302
    b = BudgetAccount.objects.get(value__owner=owner)
    assert (b.schedule_shape, b.schedule_start, b.schedule_cap, b.ceiling) == ("linear", D("0.2"), D("1"), D("0.2"))
    assert b.schedule_end_at - b.schedule_start_at == timedelta(weeks=2)
    assert LedgerEntry.objects.get(value=b.value).kind == LedgerEntry.Kind.SCHEDULE


@pytest.mark.parametrize("body, field, words", [
    ({"raw": "", "policy": "fixed", "ceiling": "1"}, "raw", "Please choose your answer"),
    ({"raw": "purple", "policy": "fixed", "ceiling": "1"}, "raw", "choose one of the answers"),
    ({"raw": "red", "policy": "fixed", "ceiling": ""}, "ceiling", "Please enter the ceiling"),
    ({"raw": "red", "policy": "fixed", "ceiling": "abc"}, "ceiling", "must be a number, for example 0.5"),
    ({"raw": "red", "policy": "fixed", "ceiling": "-1"}, "ceiling", "cannot be negative"),
    ({"raw": "red", "policy": "fixed", "ceiling": "701"}, "ceiling", "at most 700"),
    ({"raw": "red", "policy": "fixed", "ceiling": "0.1234567"}, "ceiling", "at most 6 digits"),
    ({"raw": "red", "policy": "fixed", "ceiling": "NaN"}, "ceiling", "ordinary number"),
    ({"raw": "red", "policy": ""}, "policy", "fixed ceiling or a schedule"),
    ({"raw": "red", "policy": "schedule", "start": "1", "cap": "0.5", "duration": "3", "unit": "days",
      "shape": "linear"}, "cap", "at least the starting"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "", "unit": "days",
      "shape": "linear"}, "duration", "duration of the schedule"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "3", "unit": "days",
      "shape": "steps"}, "steps", "number of steps"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "600", "unit": "weeks",
      "shape": "linear"}, "duration", "at most 10 years"),
    # numbers Python reads but people and this service do not (docs/errors.md#numbers-in-requests)
    ({"raw": "red", "policy": "fixed", "ceiling": "1_0"}, "ceiling", "the digits 0 to 9"),
    ({"raw": "red", "policy": "fixed", "ceiling": "+1"}, "ceiling", "the digits 0 to 9"),
    ({"raw": "red", "policy": "fixed", "ceiling": "\u0661"}, "ceiling", "the digits 0 to 9"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "1_0", "unit": "days",
      "shape": "linear"}, "duration", "must be a number"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "\u0663", "unit": "days",
      "shape": "linear"}, "duration", "must be a number"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "+3", "unit": "days",
      "shape": "linear"}, "duration", "must be a number"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "3", "unit": "days",
      "shape": "steps", "steps": "1_0"}, "steps", "whole number"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "3", "unit": "days",
      "shape": "steps", "steps": "\u0661\u0660"}, "steps", "whole number"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "3", "unit": "days",
      "shape": "steps", "steps": "+10"}, "steps", "whole number"),
    ({"raw": "red", "policy": "schedule", "start": "0.1", "cap": "1", "duration": "3", "unit": "days",
      "shape": "steps", "steps": "-1"}, "steps", "at least 1 step"),
])
def test_contribute_errors_are_explained(owner_client, owner, attribute, body, field, words):
    response = owner_client.post(f"/portal/contribute/{attribute.id}/", body)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and words in " ".join(errors[field]), errors
    assert words in response.content.decode()
    assert not Value.objects.filter(owner=owner).exists()


def test_a_numeric_value_outside_its_bounds_is_explained(owner_client, owner):
    numeric = NumericAttributeFactory(low=D("10"), high=D("20"))
    response = owner_client.post(f"/portal/contribute/{numeric.id}/", {"raw": "25", "policy": "fixed",
                                                                         "ceiling": "1"})
    assert "The number must be between 10 and 20." in response.content.decode()
    assert not Value.objects.filter(owner=owner).exists()


@pytest.mark.parametrize("raw", ["1_5", "+15", "\u0661\u0665", "1.5e1", "\u00b9\u2075"])
def test_a_numeric_value_is_a_plain_decimal(owner_client, owner, raw):
    """Numbers Python reads ("1_5" is 15 to it) are no value here (docs/errors.md#numbers-in-requests)."""
    numeric = NumericAttributeFactory(low=D("10"), high=D("20"))
    response = owner_client.post(f"/portal/contribute/{numeric.id}/", {"raw": raw, "policy": "fixed",
                                                                         "ceiling": "1"})
    assert response.status_code == 200 and "Please enter a number between 10 and 20" in response.content.decode()
    assert not Value.objects.filter(owner=owner).exists()
    assert owner_client.post(f"/portal/contribute/{numeric.id}/", {"raw": " 15.5 ", "policy": "fixed",
                                                                     "ceiling": "1"}).status_code == 302


def test_receipts_take_a_plain_tree_size(owner_client, value):
    """``?tree_size=²`` passed ``str.isdigit()`` and made ``int()`` fail (a 500); "١" was read as 1."""
    for bad in ["\u00b2", "\u0661", "+1", "1_0", "0", "99999999999999999999"]:
        response = owner_client.get(f"/portal/values/{value.id}/receipts/", {"tree_size": bad})
        assert response.status_code == 400, (bad, response.status_code)
    assert owner_client.get(f"/portal/values/{value.id}/receipts/").status_code == 200


def test_an_unknown_attribute_is_a_404(owner_client):
    assert owner_client.get("/portal/contribute/987654/").status_code == 404


# ------------------------------------------------------------------------------------------------- ceilings

def test_raising_the_ceiling_grows_the_chain(owner_client, value, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = owner_client.post(f"/portal/values/{value.id}/ceiling/", {"ceiling": "3.5"})
    assert len(callbacks) == 1  # the extension task, enqueued on commit
    assert response.status_code == 302
    assert budget(value).ceiling == D("3.5") and chain_head(value) == (D("3.5"), 35)
    assert "The ceiling is now ε 3.5" in text(owner_client.get(response["Location"]))


def test_lowering_the_ceiling_below_the_loss_is_refused_with_the_reason(owner_client, value, buyer, attribute):
    purchase(buyer, attribute, "1.2")
    response = owner_client.post(f"/portal/values/{value.id}/ceiling/", {"ceiling": "1"})
    assert response.status_code == 200
    assert budget(value).ceiling == D("2")
    message = " ".join(response.context["form"].errors["ceiling"])
    assert "cannot be lowered to 1: 1.2 of this value's privacy budget has already been spent" in message
    assert message in response.content.decode().replace("&#x27;", "'")
    assert owner_client.post(f"/portal/values/{value.id}/ceiling/", {"ceiling": "1.2"}).status_code == 302
    assert budget(value).ceiling == D("1.2")


@pytest.mark.parametrize("ceiling, words", [
    ("", "Please enter the new ceiling"), ("lots", "must be a number"), ("-0.5", "cannot be negative"),
    ("1e9", "the digits 0 to 9 and a point only"), ("Infinity", "ordinary number"), ("0.0000001", "at most 6 digits"),
    ("1_000", "the digits 0 to 9"), ("+5", "the digits 0 to 9"), ("١٠", "the digits 0 to 9"),
    ("701", "at most 700")])
def test_ceiling_errors_are_explained(owner_client, value, ceiling, words):
    response = owner_client.post(f"/portal/values/{value.id}/ceiling/", {"ceiling": ceiling})
    assert response.status_code == 200 and words in response.content.decode()
    assert budget(value).ceiling == D("2")


# ------------------------------------------------------------------------------------------------ schedules

SCHEDULE = {"start": "2", "cap": "4", "duration": "8", "unit": "days", "shape": "steps", "steps": "4"}


def test_previewing_a_schedule_shows_the_ceilings_it_gives_and_saves_nothing(owner_client, value):
    entries = LedgerEntry.objects.filter(value=value).count()
    with time_machine.travel("2031-05-01 12:00:00+00:00", tick=False):
        owner_client.force_login(value.owner)
        response = owner_client.post(f"/portal/values/{value.id}/schedule/", {**SCHEDULE, "action": "preview"})
    assert response.status_code == 200
    rows = response.context["preview"]["rows"]
    # one row per step, none repeating the one before it (there was a stray "2" at 10% of the duration)
    assert [c for _, c in rows] == [D("2"), D("2.5"), D("3"), D("3.5"), D("4")]
    assert rows[-1][0] - rows[0][0] == timedelta(days=8)
    page = text(response)
    assert "1 May 2031, 12:00 (now) 2" in page and "9 May 2031, 12:00 (end) 4" in page
    assert 'aria-labelledby="preview-chart-title preview-chart-desc"' in response.content.decode()
    assert LedgerEntry.objects.filter(value=value).count() == entries and not budget(value).scheduled


def test_the_preview_matches_the_schedule_arithmetic():
    from datetime import datetime
    from datetime import timezone as tz

    from accounts.epsilon import from_micro, to_micro
    from accounts.schedule import ceiling_micro
    from portal.charts import preview_rows

    start_at = datetime(2031, 1, 1, tzinfo=tz.utc)
    end_at = start_at + timedelta(days=7, seconds=13)
    for shape, steps in [("linear", None), ("steps", 3), ("steps", 1000)]:
        rows = preview_rows(start=D("0.1"), cap=D("2.9"), start_at=start_at, end_at=end_at, shape=shape, steps=steps)
        for t, c in rows:
            assert c == from_micro(ceiling_micro(to_micro(D("0.1")), to_micro(D("2.9")), start_at, end_at, shape,
                                                 steps, t))
        assert rows[0][1] == D("0.1") and rows[-1][1] == D("2.9")


def test_setting_a_schedule(owner_client, value):
    response = owner_client.post(f"/portal/values/{value.id}/schedule/", {**SCHEDULE, "action": "save"})
    assert response.status_code == 302
    b = budget(value)
    assert (b.schedule_shape, b.schedule_steps, b.schedule_start, b.schedule_cap, b.ceiling) == (
        "steps", 4, D("2"), D("4"), D("2"))
    assert LedgerEntry.objects.filter(value=value).order_by("-id").first().kind == LedgerEntry.Kind.SCHEDULE
    assert "Schedule set: the ceiling grows from ε 2 to ε 4" in text(owner_client.get(response["Location"]))


def test_a_schedule_starting_below_the_loss_is_refused_with_the_reason(owner_client, value, buyer, attribute):
    purchase(buyer, attribute, "1.5")
    body = {**SCHEDULE, "start": "1", "shape": "linear", "steps": ""}
    preview = owner_client.post(f"/portal/values/{value.id}/schedule/", {**body, "action": "preview"})
    assert "below the ε 1.5 already spent, so it cannot be set" in text(preview)
    response = owner_client.post(f"/portal/values/{value.id}/schedule/", {**body, "action": "save"})
    assert response.status_code == 200
    assert "This schedule would allow only 1 now, but 1.5 of this value's privacy budget has already been spent" in (
        response.content.decode().replace("&#x27;", "'"))
    assert not budget(value).scheduled


@pytest.mark.parametrize("change, field, words", [
    ({"start": ""}, "start", "Please enter the starting ε"),
    ({"cap": "1"}, "cap", "at least the starting ε"),
    ({"duration": "0"}, "duration", "longer than zero"),
    ({"duration": "soon"}, "duration", "must be a number"),
    ({"unit": "fortnights"}, "unit", "hours, days or weeks"),
    ({"shape": "wavy"}, "shape", "steadily or in steps"),
    ({"steps": ""}, "steps", "Please enter the number of steps"),
    ({"steps": "0"}, "steps", "at least 1 step"),
    ({"steps": "2.5"}, "steps", "whole number"),
    ({"duration": "100000", "unit": "hours"}, "duration", "at most 10 years"),
])
def test_schedule_errors_are_explained(owner_client, value, change, field, words):
    response = owner_client.post(f"/portal/values/{value.id}/schedule/", {**SCHEDULE, **change, "action": "save"})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and words in " ".join(errors[field]), errors
    assert not budget(value).scheduled


# ------------------------------------------------------------------------------------- pause, delete, export

def test_pausing_and_resuming_sales(owner_client, value, buyer, attribute):
    response = owner_client.post(f"/portal/values/{value.id}/pause/")
    assert response.status_code == 302 and budget(value).paused
    page = text(owner_client.get(response["Location"]))
    assert "Sales paused" in page and "left out of every new purchase" in page
    assert purchase(buyer, attribute, "0.5").included == 0
    assert owner_client.post(f"/portal/values/{value.id}/resume/").status_code == 302
    assert not budget(value).paused
    assert [e.kind for e in LedgerEntry.objects.filter(value=value).order_by("id")][-2:] == ["pause", "resume"]
    assert owner_client.get(f"/portal/values/{value.id}/pause/").status_code == 405


def test_deleting_the_raw_value_asks_first_then_explains_what_remains(owner_client, value):
    confirm = owner_client.get(f"/portal/values/{value.id}/delete-raw/")
    assert confirm.status_code == 200 and "This cannot be undone" in text(confirm)
    value.refresh_from_db()
    assert value.raw_sealed is not None, "showing the confirmation deletes nothing"
    response = owner_client.post(f"/portal/values/{value.id}/delete-raw/")
    assert response.status_code == 302
    value.refresh_from_db()
    assert value.raw_sealed is None and value.raw_deleted_at is not None
    page = text(owner_client.get(response["Location"]))
    assert "The chain stays sellable up to its head (ε 2) and can no longer grow" in page
    assert "green" not in page
    again = owner_client.get(f"/portal/values/{value.id}/delete-raw/")
    assert "already deleted" in text(again)


def test_the_export_has_all_the_owners_data_as_json(owner_client, owner, value, buyer, attribute):
    purchase(buyer, attribute, "0.7")
    earnings_settle(shard=attribute.id)  # the owner paid, as the task enqueued on the purchase's commit does
    owner_client.post(f"/portal/values/{value.id}/schedule/", {**SCHEDULE, "action": "save"})
    response = owner_client.get("/portal/export/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith(f'attachment; filename="ldpmarket-{owner.username}-')
    data = json.loads(response.content)
    assert data["owner"] == {"username": owner.username, "email": owner.email, "joined": owner.date_joined.isoformat()}
    [v] = data["values"]
    assert (v["id"], v["raw_value"], v["attribute"], v["kind"]) == (value.id, "green", "favourite colour",
                                                                    "categorical")
    assert v["budget"]["ceiling"] == "2.000000" and v["budget"]["chain_loss"] == "0.700000"
    assert v["budget"]["schedule"]["shape"] == "steps" and v["budget"]["schedule"]["steps"] == 4
    assert v["chain"]["head"] == "2.000000"
    [release] = v["releases"]
    earned = MoneyEntry.objects.get(account__user=owner).amount
    assert release["organisation"] == "Institute of Careful Statistics" and release["epsilon"] == "0.700000"
    assert D(release["earned"]) == earned == D(data["earnings"]["total"]) == D(data["earnings"]["balance"])
    assert [h["event"] for h in v["history"]] == ["ceiling", "chain_release", "schedule"]
    assert buyer.username not in response.content.decode() and buyer.email not in response.content.decode()


def test_the_export_of_a_deleted_raw_value_has_no_raw_value(owner_client, value):
    owner_client.post(f"/portal/values/{value.id}/delete-raw/")
    [v] = json.loads(owner_client.get("/portal/export/").content)["values"]
    assert v["raw_value"] is None and v["raw_deleted_at"]


def test_the_dashboard_needs_the_same_queries_for_one_value_or_many(owner_client, owner, buyer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.factories import CategoricalAttributeFactory

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert owner_client.get("/portal/").status_code == 200
        return len(ctx.captured_queries)

    first = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    contribute_one(owner, first, "red")
    purchase(buyer, first, "0.5")
    one = queries()
    for i in range(4):
        attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
        contribute_one(owner, attribute, "blue", seed=i)
        purchase(buyer, attribute, "0.5", seed=i)
    assert queries() == one
