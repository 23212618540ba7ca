"""Every page of the portal is usable with a keyboard and a screen reader: labelled controls, linked errors,
headings, landmarks, text alternatives for the charts and meters (checked by parsing the HTML)."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest

from tests.factories import BinaryAttributeFactory, NumericAttributeFactory, StringAttributeFactory
from tests.portal.conftest import purchase

pytestmark = pytest.mark.django_db

UNLABELLED_TYPES = {"hidden", "submit", "button", "reset", "image"}


class Page(HTMLParser):
    """Collects form controls, labels (for= and wrapping), ids, headings and landmarks of a page."""

    def __init__(self):
        super().__init__()
        self.controls: list[dict] = []
        self.label_for: set[str] = set()
        self.ids: set[str] = set()
        self.open_labels = 0
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            assert a["id"] not in self.ids, f"duplicate id {a['id']!r}"
            self.ids.add(a["id"])
        if tag == "label":
            self.open_labels += 1
            if a.get("for"):
                self.label_for.add(a["for"])
        if tag in ("input", "select", "textarea") and a.get("type") not in UNLABELLED_TYPES:
            self.controls.append({**a, "_tag": tag, "_wrapped": self.open_labels > 0})

    def handle_endtag(self, tag):
        if tag == "label":
            self.open_labels -= 1


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def assert_accessible(response, url: str) -> Page:
    assert response.status_code in (200, 403), (url, response.status_code)
    page = parse(response.content.decode())
    for control in page.controls:
        labelled = (control.get("id") in page.label_for or control["_wrapped"] or control.get("aria-label")
                    or control.get("aria-labelledby"))
        assert labelled, f"{url}: {control['_tag']} name={control.get('name')!r} has no label"
        for ref in (control.get("aria-describedby") or "").split():
            assert ref in page.ids, f"{url}: aria-describedby points at a missing id {ref!r}"
        if control.get("aria-invalid") == "true":
            assert control.get("aria-describedby") or control.get("type") == "radio", \
                f"{url}: an invalid control must point at its error"
    tags = [t for t, _ in page.tags]
    assert tags.count("h1") == 1, f"{url}: one h1 per page"
    assert "main" in tags and ("html", {"lang": "en"}) in page.tags, url
    assert any(t == "a" and a.get("href") == "#main" for t, a in page.tags), f"{url}: skip link"
    for tag, a in page.tags:
        if tag == "svg":
            assert a.get("role") == "img" and all(r in page.ids for r in a["aria-labelledby"].split()), url
        if tag == "meter":
            assert a.get("id") in page.label_for, f"{url}: a meter needs a label"
        if tag == "img":
            assert "alt" in a, url
        if tag == "button":
            assert a.get("type") in ("submit", "button"), f"{url}: buttons say what they are"
    return page


@pytest.fixture
def pages(owner_client, value, buyer, attribute):
    """Every page an owner can see, with a release, and each form with its errors shown."""
    purchase(buyer, attribute, "0.5")
    kinds = [attribute, BinaryAttributeFactory(), NumericAttributeFactory(), StringAttributeFactory()]
    v = value.id
    gets = ["/portal/", "/portal/contribute/", "/portal/releases/", f"/portal/values/{v}/",
            f"/portal/values/{v}/ceiling/", f"/portal/values/{v}/schedule/", f"/portal/values/{v}/delete-raw/"]
    gets += [f"/portal/contribute/{a.id}/" for a in kinds[1:]]
    posts = [(f"/portal/values/{v}/ceiling/", {"ceiling": "0.1"}),
             (f"/portal/values/{v}/ceiling/", {"ceiling": "x"}),
             (f"/portal/values/{v}/schedule/", {"start": "1", "cap": "3", "duration": "5", "unit": "days",
                                               "shape": "steps", "steps": "5", "action": "preview"}),
             (f"/portal/values/{v}/schedule/", {"start": "", "cap": "x", "duration": "-1", "unit": "years",
                                               "shape": "", "action": "save"})]
    posts += [(f"/portal/contribute/{a.id}/", {"raw": "", "policy": "schedule", "start": "x", "shape": "steps"})
              for a in kinds[1:]]
    return gets, posts


def test_every_owner_page_has_labelled_controls_and_landmarks(owner_client, pages):
    gets, posts = pages
    controls = 0
    for url in gets:
        controls += len(assert_accessible(owner_client.get(url), url).controls)
    for url, body in posts:
        response = owner_client.post(url, body)
        page = assert_accessible(response, url)
        controls += len(page.controls)
        if response.context and response.context.get("form") is not None and response.context["form"].errors:
            assert 'role="alert"' in response.content.decode(), f"{url}: errors are announced"
            assert any(c.get("aria-invalid") == "true" for c in page.controls), url
    assert controls > 40


def test_sign_in_sign_up_and_forbidden_pages_are_labelled(client, buyer):
    for url in ["/portal/login/", "/portal/signup/"]:
        page = assert_accessible(client.get(url), url)
        assert {c.get("name") for c in page.controls} >= {"username"}
        assert_accessible(client.post(url, {"username": ""}), url)
    client.force_login(buyer)
    assert_accessible(client.get("/portal/"), "/portal/ (as a buyer)")


def test_the_contribute_form_groups_its_radios_in_fieldsets_with_legends(owner_client, attribute):
    html = owner_client.get(f"/portal/contribute/{attribute.id}/").content.decode()
    page = parse(html)
    radios = [c for c in page.controls if c.get("type") == "radio"]
    assert {c["name"] for c in radios} == {"policy", "shape"}
    assert html.count("<fieldset") >= 4 and html.count("<legend") >= 4


def test_the_chart_has_a_text_alternative(owner_client, value, buyer, attribute):
    purchase(buyer, attribute, "0.5")
    html = owner_client.get(f"/portal/values/{value.id}/").content.decode()
    assert '<desc id="value-chart-desc">Ceiling now ε 2; privacy spent ε 0.5 after 1 release.</desc>' in html
    assert "<title>Released at ε 0.5 on" in html
