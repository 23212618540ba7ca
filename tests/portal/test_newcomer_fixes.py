"""The owner portal's newcomer defects (issue 13, item 5), each shown on the pages: a new value's chart, the
ceiling where the loss reaches it, a one-shot value whose raw value was deleted, one-shot values without chain
parts, the schedule form and its preview, "no charge" re-sales, money with its currency, the question in words."""
from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal as D

import time_machine
from django.utils import timezone

from accounts.models import LedgerEntry
from accounts.money.format import format_money
from market.values.owner_rows import Event
from portal import charts
from tests.portal.conftest import contribute_one, oneshot_attribute, oneshot_purchase, purchase
from tests.portal.test_oneshot import text

PLOT_LEFT, PLOT_RIGHT = 46, 640 - 12


def xs(svg: str, css_class: str) -> list[float]:
    """The x coordinates of the first path of ``css_class`` in ``svg``."""
    d = re.search(rf'<path class="{css_class}" d="([^"]+)"', svg).group(1)
    return [float(x) for x in re.findall(r"[ML]([\d.]+),", d)]


def test_a_new_values_chart_shows_its_ceiling_across_a_sensible_time_axis():
    now = timezone.now()
    events = [Event(id=1, kind=LedgerEntry.Kind.CEILING, at=now - timedelta(seconds=5), ceiling=D(1), loss=D(0))]
    svg = str(charts.ceiling_loss_svg(events, now=now))
    # the ceiling spans the plot (it was a dot at the right edge: a one-minute axis ending now)
    ceiling = xs(svg, "ceiling-halo")
    assert min(ceiling) == PLOT_LEFT and max(ceiling) == PLOT_RIGHT
    ticks = re.findall(r'<text class="tick" x="[\d.]+" y="212"[^>]*>([^<]+)</text>', svg)
    assert len(ticks) == 5 and all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks), ticks  # minutes, not seconds
    assert ">now</text>" in svg and 'class="now"' in svg


def test_the_ceiling_stays_visible_where_the_loss_reaches_it():
    now = timezone.now()
    t0 = now - timedelta(days=2)
    events = [Event(id=1, kind=LedgerEntry.Kind.CEILING, at=t0, ceiling=D(1), loss=D(0)),
              Event(id=2, kind=LedgerEntry.Kind.CHAIN_RELEASE, at=t0 + timedelta(days=1), ceiling=D(1), loss=D(1),
                    epsilon=D(1), chain_loss=D(1))]
    svg = str(charts.ceiling_loss_svg(events, now=now))
    # a wide band under the loss line: where both are at ε 1, the ceiling shows on both sides of the loss
    assert svg.index('class="ceiling-halo"') < svg.index('<path class="loss"')
    css = open("portal/static/portal/portal.css").read()
    halo = float(re.search(r"\.ceiling-halo \{[^}]*stroke-width: ([\d.]+)", css).group(1))
    loss = float(re.findall(r"svg\.chart \.loss \{[^}]*stroke-width: ([\d.]+)", css)[-1])
    assert halo > loss + 3


def test_a_one_shot_value_without_its_raw_value_is_not_for_sale_and_offers_no_actions(owner_client, owner):
    from market.values.services import value_delete_raw

    value = contribute_one(owner, oneshot_attribute("urr"), "office", ceiling="2")
    value_delete_raw(value_id=value.id)
    for url in (f"/portal/values/{value.id}/", "/portal/"):
        html = owner_client.get(url).content.decode()
        page = text(owner_client.get(url))
        assert "Selling" not in page and "No longer sold" in page, url
        for action in ("ceiling", "schedule", "pause"):
            assert f"/portal/values/{value.id}/{action}/" not in html, (url, action)
        assert "Pause sales" not in page and "Resume sales" not in page, url
    assert "cannot be sold again" in text(owner_client.get(f"/portal/values/{value.id}/"))


def test_a_chain_value_without_its_raw_value_keeps_its_actions(owner_client, value):
    from market.values.services import value_delete_raw

    value_delete_raw(value_id=value.id)
    page = text(owner_client.get(f"/portal/values/{value.id}/"))
    assert "Selling" in page and "Raise or lower the ceiling" in page  # still sellable up to its head


def test_one_shot_charts_draw_no_chain_part():
    now = timezone.now()
    t0 = now - timedelta(days=1)
    events = [Event(id=1, kind=LedgerEntry.Kind.CEILING, at=t0, ceiling=D(2), loss=D(0)),
              Event(id=2, kind=LedgerEntry.Kind.ONESHOT_RELEASE, at=t0 + timedelta(hours=1), ceiling=D(2),
                    loss=D("0.5"), epsilon=D("0.5"), oneshot_loss=D("0.5"))]
    assert 'class="chain-loss"' in str(charts.ceiling_loss_svg(events, now=now))  # a chain value with surveys
    assert 'class="chain-loss"' not in str(charts.ceiling_loss_svg(events, now=now, chain=False))


def test_the_schedule_form_starts_from_the_current_schedule(owner_client, owner, attribute):
    from accounts.services import Schedule

    start = timezone.now().replace(microsecond=0)
    schedule = Schedule(start="0.5", cap="2.5", start_at=start, end_at=start + timedelta(days=8), shape="steps",
                        steps=4)
    value = contribute_one(owner, attribute, "red", schedule=schedule)
    with time_machine.travel(start + timedelta(days=2, hours=1), tick=False):
        owner_client.force_login(owner)
        response = owner_client.get(f"/portal/values/{value.id}/schedule/")
    form = response.context["form"]
    # the schedule in force, continued: from the ceiling now to its cap, by its end, in the steps still to come
    assert form.initial["cap"] == D("2.5") and form.initial["start"] == D("1")
    assert form.initial["shape"] == "steps" and form.initial["steps"] == 3
    assert form.initial["unit"] == "days" and form.initial["duration"] == D("5.958")
    html = response.content.decode()
    assert re.search(r'<input [^>]*name="duration" value="5.958"', html) and "E+" not in html
    assert re.search(r'<input [^>]*name="cap" value="2.5"', html)


def test_the_schedule_preview_has_one_row_per_change_a_legend_and_a_now_marker(owner_client, value):
    with time_machine.travel("2031-05-01 12:00:00+00:00", tick=False):
        owner_client.force_login(value.owner)
        response = owner_client.post(f"/portal/values/{value.id}/schedule/", {
            "start": "2", "cap": "4", "duration": "8", "unit": "days", "shape": "linear", "action": "preview"})
    rows = response.context["preview"]["rows"]
    assert len(rows) == 6 and len({c for _, c in rows}) == 6  # linear: every row a new ceiling
    html = response.content.decode()
    preview = html[html.index('id="preview"'):]
    assert ">now</text>" in preview and 'class="now"' in preview
    assert 'class="legend"' in preview and "Ceiling this schedule gives" in preview and "Now" in preview
    # a flat schedule (start = cap) previews as its start and its end only
    flat = charts.preview_rows(start=D(2), cap=D(2), start_at=timezone.now(),
                               end_at=timezone.now() + timedelta(days=3), shape="linear", steps=None)
    assert len(flat) == 2


def test_resales_within_the_chains_loss_say_no_charge(owner_client, value, buyer, attribute):
    from tests.factories import BuyerFactory, fund

    second = BuyerFactory(organisation="Second Lab")
    fund(second, "100")
    purchase(buyer, attribute, "1.5", seed=1)
    purchase(second, attribute, "0.5", seed=2)  # the chain's loss is already 1.5: nothing more is spent
    purchase(second, attribute, "1.5", seed=3)  # at the loss: nothing more either
    for url in (f"/portal/values/{value.id}/", "/portal/releases/", "/portal/"):
        page = text(owner_client.get(url))
        assert page.count("no charge") == 2, url
        assert "sold at ε 0.5, within the ε already spent" in page, url


def test_a_chain_upgrade_shows_the_part_it_charged(owner_client, value, buyer, attribute):
    from tests.factories import BuyerFactory, fund

    second = BuyerFactory(organisation="Second Lab")
    fund(second, "100")
    purchase(buyer, attribute, "0.5", seed=1)
    purchase(second, attribute, "1.5", seed=2)
    page = text(owner_client.get("/portal/releases/"))
    assert "1 sold at ε 1.5; the rest was already spent" in page and "no charge" not in page


def test_money_has_its_currency(owner_client, value, buyer, attribute, settings):
    purchase(buyer, attribute, "0.5")
    assert "EUR" in owner_client.get("/portal/").content.decode()
    settings.LDP_CURRENCY = "CHF"
    for url in ("/portal/", "/portal/releases/", f"/portal/values/{value.id}/"):
        page = text(owner_client.get(url))
        assert "CHF" in page and "EUR" not in page, url
    assert format_money(D("0.0040")) == "0.0040 CHF"  # 4 places unless whole cents


def test_owner_pages_show_the_question_in_plain_words(owner_client, owner, attribute):
    attribute.description = "What is your favourite colour?"
    attribute.save()
    value = contribute_one(owner, attribute, "green")
    for url in ("/portal/", f"/portal/values/{value.id}/"):
        assert "The question: What is your favourite colour?" in text(owner_client.get(url)), url
    assert "favourite colour What is your favourite colour?" in text(owner_client.get("/portal/contribute/"))
    other = type(attribute).objects.create(dataset=attribute.dataset, name="shoe size", kind="numeric", low=30,
                                          high=50, description="What is your shoe size (EU)?")
    page = text(owner_client.get(f"/portal/contribute/{other.id}/"))
    assert "The question: What is your shoe size (EU)?" in page


#: Words from the papers an owner should not have to know (the abbreviations appear only after plain words).
JARGON = ("ULDP", "ε-LDP", "RAPPOR", "utility-optimized", "‡", "EWRR3", "PUM", "three-state", "edge report",
          "bit vector")


def test_owner_pages_explain_mechanisms_in_plain_words(owner_client, owner, buyer):
    values = []
    for kind, raw, body in [("urr", "office", {"epsilon": "0.8"}), ("urap", "clinic", {"epsilon": "0.6"}),
                            ("ternary", "never", {"eps1": "1", "eps2": "1"}), ("graph", {"Alpha": 0.5},
                                                                               {"eps1": "1", "eps2": "2"}),
                            ("distribution", {"walk": 1.0}, {"epsilon": "0.7"})]:
        attribute = oneshot_attribute(kind)
        values.append(contribute_one(owner, attribute, raw if isinstance(raw, str) else json.dumps(raw), ceiling="5"))
        oneshot_purchase(buyer, attribute, **body)
    urls = ["/portal/", "/portal/releases/", "/portal/contribute/"] + [f"/portal/values/{v.id}/" for v in values]
    for url in urls:
        page = text(owner_client.get(url))
        for word in JARGON:
            assert word not in page, (url, word)
    page = text(owner_client.get(f"/portal/values/{values[0].id}/"))
    assert "Randomized answer that always protects sensitive answers (uRR)" in page


def test_the_budget_actions_of_a_value_no_longer_sold_change_nothing(owner_client, owner):
    from accounts.models import BudgetAccount
    from market.values.services import value_delete_raw

    value = contribute_one(owner, oneshot_attribute("urr"), "office", ceiling="2")
    value_delete_raw(value_id=value.id)
    entries = LedgerEntry.objects.filter(value=value).count()
    for path, data in [("ceiling/", {"ceiling": "3"}), ("schedule/", {"start": "2", "cap": "3", "duration": "1",
                                                                       "unit": "days", "shape": "linear",
                                                                       "action": "save"}),
                       ("pause/", {}), ("resume/", {})]:
        response = owner_client.post(f"/portal/values/{value.id}/{path}", data, follow=True)
        assert response.redirect_chain[-1][0] == f"/portal/values/{value.id}/", path
        assert "cannot be sold again" in text(response), path
    assert LedgerEntry.objects.filter(value=value).count() == entries
    assert BudgetAccount.objects.get(value=value).ceiling == 2
