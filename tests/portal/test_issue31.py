"""Issue 31: what a fresh ``make run`` with the demo data showed on the owner portal and around it.

1. no "Release" dot on a value that was never released (an owner-held value's uploads are not releases);
3. "Keep my value on this device" ticked by default where the attribute's values are device-held;
4. an owner-held value is said to be kept on *a* device, not by the service (the service cannot know which device
   holds it: demo-owner's was drawn by ``load_demo``, no browser holds it);
5. the contribute pages speak plain words: the technical name only in a "Technical name" detail;
6. ``/favicon.ico`` and an icon ``<link>`` in the base templates;
7. the admin's dates name their zone, like the portal's ("27 Nov 2026, 22:47 (UTC)");
8. ``load_demo``'s summary (what ``make run`` prints) lists the landing page first among its URLs.
(2, the legend's markers with their labels, is in ``test_issue31_browser.py``.)
"""
from __future__ import annotations

import html as htmllib
import re
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from market.purchases.pricing import DEFAULT_POLICY
from market.values.services import value_upload_chain, values_create_many
from tests.factories import CategoricalAttributeFactory, OwnerFactory
from tests.portal.conftest import purchase

pytestmark = pytest.mark.django_db

JARGON = ("RAPPOR", "noisy-sampling", "eps_ns", "eps_alpha", "eps_beta", "LPP‡", "LPP", "RR3", "OLH", "uRR", "‡")


def text(fragment: str) -> str:
    """Visible text: tags stripped, entities decoded, whitespace collapsed."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def main_text(response) -> str:
    """The page's main text: its <main> element without its <details> (secondary detail, closed by default)."""
    page = response.content.decode()
    main = re.search(r"<main\b.*?</main>", page, re.S).group()
    return text(re.sub(r"<details\b.*?</details>", " ", main, flags=re.S))


def held_demo():
    """demo-owner and the demo's "Device-held experiment", created as ``load_demo`` creates them."""
    from market.management.commands.load_demo import HELD, create_held_experiment, demo_users
    from market.models import Attribute, Value

    _, owner = demo_users()
    create_held_experiment(HELD, owner)
    attribute = Attribute.objects.get(dataset__title=HELD.title)
    return owner, attribute, Value.objects.get(owner=owner, attribute=attribute)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# ------------------------------------------------------------------------------------ 1. no release, no dot

def test_a_value_never_released_has_no_release_dot_and_its_page_no_release_key(owner_client, owner, buyer):
    attribute = CategoricalAttributeFactory(name="commute", labels=["walk", "bike"], price_policy=DEFAULT_POLICY)
    [held] = values_create_many(attribute=attribute, owners=[owner], raws=None, ceiling="1", custody="owner")
    value_upload_chain(value_id=held.id, owner=owner, epsilons=[Decimal("0.1"), Decimal("0.2")], outputs=[0, 1])

    dashboard = owner_client.get("/portal/").content.decode()
    assert dashboard.count('class="release"') == 0
    page = owner_client.get(f"/portal/values/{held.id}/").content.decode()
    assert page.count('class="release"') == 0
    assert "release-key" not in page and "Released at" not in page

    purchase(buyer, attribute, "0.2")  # now released: one dot, at the loss, and the key
    page = owner_client.get(f"/portal/values/{held.id}/").content.decode()
    assert page.count('class="release"') == 1 and "Released at ε 0.2" in page and "release-key" in page


# ----------------------------------------------------------------------- 3. ticked where the values are on devices

def checkbox(response) -> str:
    return re.search(r'<input type="checkbox" id="keep-on-device"[^>]*>', response.content.decode()).group()


def test_keep_on_this_device_is_ticked_where_the_attributes_values_are_device_held(owner):
    _, attribute, _ = held_demo()
    client = signed_in(owner)  # a new owner, who has not contributed to it yet
    assert " checked" in checkbox(client.get(f"/portal/contribute/{attribute.id}/"))
    service_held = CategoricalAttributeFactory(name="mood", labels=["good", "bad"], price_policy=DEFAULT_POLICY)
    values_create_many(attribute=service_held, owners=[OwnerFactory()], raws=["good"], ceiling="1")
    assert " checked" not in checkbox(client.get(f"/portal/contribute/{service_held.id}/"))
    empty = CategoricalAttributeFactory(name="colour", labels=["red", "blue"], price_policy=DEFAULT_POLICY)
    assert " checked" not in checkbox(client.get(f"/portal/contribute/{empty.id}/"))


# ------------------------------------------------------------------------- 4. which device: the service cannot say

def test_demo_owners_device_held_value_is_said_to_be_on_a_device_not_on_theirs():
    owner, _, value = held_demo()
    client = signed_in(owner)
    dashboard = client.get("/portal/").content.decode()
    card = text(re.search(rf'<article class="card value-card" aria-labelledby="value-{value.id}-title">.*?'
                          rf'</article>', dashboard, re.S).group())
    page = main_text(client.get(f"/portal/values/{value.id}/"))
    for shown in (card, page):
        assert "your device" not in shown.lower(), shown
        assert "Kept on a device, not by the service" in shown
        assert "the service never received it" in shown
    assert "Upload level ε 0.5 (5 steps uploaded by the device that holds it" in card
    assert "Upload level ε 0.5 (5 steps uploaded by the device that holds it" in page


# ------------------------------------------------------------------------------------------- 5. plain words

def test_the_contribute_pages_of_every_demo_attribute_speak_plain_words():
    from market.models import Attribute

    call_command("load_demo", stdout=StringIO())
    client = signed_in(OwnerFactory())
    pages = {"choose": client.get("/portal/contribute/")}
    attributes = list(Attribute.objects.select_related("dataset").order_by("id"))
    assert len(attributes) == 8
    for a in attributes:
        pages[f"{a.dataset.title} / {a.name}"] = client.get(f"/portal/contribute/{a.id}/")
    for name, response in pages.items():
        assert response.status_code == 200, name
        shown = main_text(response)
        assert [word for word in JARGON if word in shown] == [], (name, shown)
    # the technical name is still there, as a secondary detail
    olh = next(a for a in attributes if a.mechanism == "olh")
    page = pages[f"{olh.dataset.title} / {olh.name}"].content.decode()
    assert re.search(r"<details[^>]*>\s*<summary>Technical name</summary>\s*OLH\s*</details>", page), page
    assert "How your value will be sold: Randomized answer hashed into a few buckets" in main_text(
        pages[f"{olh.dataset.title} / {olh.name}"])


# ------------------------------------------------------------------------------------------------ 6. favicon

def static_file(url: str) -> bytes:
    """The static file a ``/static/...`` URL serves (whitenoise or runserver; the test client serves none)."""
    from django.contrib.staticfiles import finders

    assert url.startswith("/static/"), url
    found = finders.find(url.removeprefix("/static/"))
    assert found, url
    with open(found, "rb") as f:
        return f.read()


def test_favicon_ico_is_served_and_the_base_templates_link_an_icon(client, owner):
    response = client.get("/favicon.ico")
    assert response.status_code == 302, response.status_code
    assert static_file(response["Location"]).startswith(b"<svg")
    icon = re.compile(r'<link rel="icon" href="(/static/[^"]+)"')
    pages = {"landing": client.get("/"), "sign-in": client.get("/portal/login/"),
             "api sign-in": client.get("/api/auth/login/"), "admin sign-in": client.get("/admin/login/"),
             "redoc": client.get("/api/redoc/")}
    pages["dashboard"] = signed_in(owner).get("/portal/")
    for name, page in pages.items():
        assert page.status_code == 200, name
        found = icon.search(page.content.decode())
        assert found, name
        assert found.group(1) == response["Location"], name
        assert 'href="data:,"' not in page.content.decode(), name


# ----------------------------------------------------------------------------------- 7. admin dates and zone

def test_the_admins_dates_name_their_zone_as_the_portals_do(staff, owner):
    from market.models import Dataset, Value
    from tests.factories import DatasetFactory

    at = datetime(2026, 11, 27, 22, 47, tzinfo=UTC)
    dataset = DatasetFactory(title="Dated")
    Dataset.objects.filter(id=dataset.id).update(created_at=at)
    attribute = CategoricalAttributeFactory(dataset=dataset, name="mood", labels=["good", "bad"],
                                            price_policy=DEFAULT_POLICY)
    [value] = values_create_many(attribute=attribute, owners=[owner], raws=["good"], ceiling="1")
    Value.objects.filter(id=value.id).update(created_at=at)
    staff.is_superuser = True
    staff.save()
    client = signed_in(staff)
    for url in ("/admin/market/dataset/", "/admin/market/value/", f"/admin/market/value/{value.id}/change/"):
        page = client.get(url)
        assert page.status_code == 200, url
        shown = text(page.content.decode())
        assert "27 Nov 2026, 22:47 (UTC)" in shown, (url, shown)
        assert "p.m." not in shown and "a.m." not in shown, url
    overview = text(client.get(reverse("admin:ldp_overview")).content.decode())
    assert "Per calendar day in UTC" in overview, overview  # its sales chart's days


# --------------------------------------------------------------------------------- 8. make run's URLs, / first

def test_load_demos_summary_lists_the_landing_page_first():
    from market.management.commands.load_demo import summary

    lines = summary("http://127.0.0.1:8000")
    urls = [line.split()[0] for line in lines[lines.index("URLs:") + 1:] if line.strip()]
    assert urls[0] == "http://127.0.0.1:8000/", urls
