"""The landing page ``/`` says who the service is for and how each kind of user starts (docs/buyers.md): owners
sign up in the owner portal, buyers in the buyer portal and wait for approval, operators read
docs/operations.md; its links all lead somewhere."""
from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_landing_page_says_how_owners_buyers_and_operators_start():
    response = Client().get("/")
    assert response.status_code == 200
    html = response.content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    links = re.findall(r'<a [^>]*href="([^"]+)"', html)
    assert "/portal/signup/" in links and "/buyer/signup/" in links and "/buyer/login/" in links
    assert "wait for an operator to approve your organisation before you buy" in text
    assert "docs/operations.md" in text
    for heading in ("Data owners", "Buyers", "Operators"):
        assert re.search(rf"<h2[^>]*>{heading}</h2>", html), heading
    client = Client()
    for link in links:
        if link.startswith("/") and not link.startswith("//"):
            assert client.get(link).status_code in (200, 302), link
