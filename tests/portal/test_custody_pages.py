"""Owner-held values on the dashboard and in the export (docs/custody.md, issue 16): a value kept on the owner's
device is said to be kept there (never "cannot be shown"), with its guarantee against the service, the upload
level; a value the service holds has none ("none: the service holds your value")."""
from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from market.models import Value
from market.purchases.pricing import DEFAULT_POLICY
from market.values.services import value_upload_chain, values_create_many
from tests.factories import CategoricalAttributeFactory
from tests.portal.conftest import purchase

pytestmark = pytest.mark.django_db
D = Decimal
NONE = "none: the service holds your value"
COMMUTE = ["walk", "bike", "car"]


def text(html: str) -> str:
    """Visible text, tags stripped and whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def cards(response) -> dict[str, str]:
    """Each value card of the dashboard by its attribute's name: the card's visible text."""
    html = response.content.decode()
    out = {}
    for card in re.findall(r'<article class="card value-card".*?</article>', html, re.S):
        title = re.search(r'<h2 id="value-\d+-title"><a [^>]*>[^<]*/ ([^<]+)</a>', card).group(1)
        out[title] = text(card)
    return out


def device_upload(value: Value, label: str, level: str) -> None:
    """What the owner's device does: draw the chain with the owner SDK's sampler (OS CSPRNG) from the grid start
    up to ``level`` and upload it (``POST /api/v1/owner/values/{id}/chain/`` runs ``value_upload_chain``)."""
    from ldpmarket_client import sampler

    epsilons = [D("0.1") * k for k in range(1, int(D(level) * 10) + 1)]
    outputs = sampler.chain(COMMUTE.index(label), epsilons, len(COMMUTE))
    value_upload_chain(value_id=value.id, owner=value.owner, epsilons=epsilons, outputs=outputs)


@pytest.fixture
def held(owner):
    """The owner's value of "commute" kept on their device, uploaded up to 0.5 (ceiling 1)."""
    attribute = CategoricalAttributeFactory(name="commute", labels=COMMUTE, price_policy=DEFAULT_POLICY)
    [value] = values_create_many(attribute=attribute, owners=[owner], raws=None, ceiling="1", custody="owner")
    device_upload(value, "bike", "0.5")
    return value


@pytest.fixture
def not_uploaded(owner):
    """The owner's value of "mood" kept on their device, nothing uploaded yet."""
    attribute = CategoricalAttributeFactory(name="mood", labels=["good", "bad"], price_policy=DEFAULT_POLICY)
    [value] = values_create_many(attribute=attribute, owners=[owner], raws=None, ceiling="1", custody="owner")
    return value


def test_the_dashboard_says_where_each_value_is_held_and_the_guarantee_against_the_service(
        owner_client, value, held, not_uploaded, buyer):
    purchase(buyer, held.attribute, "0.3")  # a sale below the upload level: the loss moves, the upload level not
    response = owner_client.get("/portal/")
    assert response.status_code == 200
    by_name = cards(response)
    assert set(by_name) == {"favourite colour", "commute", "mood"}

    service = by_name["favourite colour"]
    assert "Your value green" in service
    assert f"Guarantee against the service {NONE}" in service
    assert "Kept on a device" not in service and "Upload level" not in service

    device = by_name["commute"]
    # the service cannot tell which device holds it (issue 31): "a device", not "your device"
    assert "Kept on a device, not by the service" in device and "your device" not in device
    assert "Your value kept on a device, not by the service (the service never received it)" in device
    assert "Upload level ε 0.5 (5 steps uploaded by the device that holds it" in device
    assert "Guarantee against the service ε 0.5 (the upload level" in device
    assert "ε 0.3 of ε 1 spent" in device  # against buyers: the loss
    assert "bike" not in device and "cannot be shown" not in device and NONE not in device
    assert "Chain head" not in device

    empty = by_name["mood"]
    assert "Upload level nothing uploaded yet" in empty
    assert "Guarantee against the service ε 0 (the upload level" in empty
    assert "cannot be shown" not in empty

    assert "cannot be shown" not in text(response.content.decode())


def test_the_export_says_where_each_value_is_held_and_both_guarantees(owner_client, value, held, not_uploaded,
                                                                       buyer):
    purchase(buyer, held.attribute, "0.3")
    response = owner_client.get("/portal/export/")
    assert response.status_code == 200
    assert "cannot be shown" not in response.content.decode()
    data = {v["attribute"]: v for v in json.loads(response.content)["values"]}

    service = data["favourite colour"]
    assert (service["custody"], service["raw_value"]) == ("service", "green")
    assert "raw_value_kept_on" not in service and "upload_level" not in service["chain"]
    assert service["guarantee"] == {"against_buyers": service["budget"]["loss"], "against_service": NONE}

    device = data["commute"]
    assert (device["custody"], device["raw_value"]) == ("owner", None)
    assert device["raw_value_kept_on"] == "a device, not the service: the service never received it"
    assert device["raw_deleted_at"] is None
    assert D(device["chain"]["upload_level"]) == D(device["chain"]["head"]) == D("0.5")
    assert device["chain"]["length"] == 5
    assert D(device["guarantee"]["against_buyers"]) == D("0.3") == D(device["budget"]["loss"])
    assert D(device["guarantee"]["against_service"]) == D("0.5")

    empty = data["mood"]
    assert (empty["custody"], empty["raw_value"], empty["chain"]["upload_level"]) == ("owner", None, None)
    assert D(empty["guarantee"]["against_service"]) == 0 and D(empty["guarantee"]["against_buyers"]) == 0
