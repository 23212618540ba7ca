"""The browsable API's forms (README, "For buyers": a signed-in buyer uses the API in a browser): the HTML form of
``POST /api/v1/purchases/`` and ``POST /api/v1/surveys/`` shows the fields of the request, not an empty form."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.factories import BuyerFactory

pytestmark = pytest.mark.django_db


def page(path: str) -> str:
    client = Client()
    client.force_login(BuyerFactory())
    response = client.get(path, HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    return response.content.decode()


def input_names(html: str) -> set[str]:
    return set(re.findall(r'<(?:input|select|textarea)[^>]*\sname="([^"]+)"', html))


def test_the_browsable_purchase_form_shows_the_purchase_request_fields():
    names = input_names(page("/api/v1/purchases/"))
    assert {"attribute", "epsilon", "cohort", "quote"} <= names, names


def test_the_browsable_survey_form_shows_the_survey_request_fields():
    names = input_names(page("/api/v1/surveys/"))
    assert {"attribute", "epsilon", "mechanism", "quote"} <= names, names
