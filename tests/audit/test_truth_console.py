"""Issue 31, items 2 and 3: the console tells the truth about owner-held values (docs/custody.md).

* The overview's "values with raw datum" and the Values list's "raw datum" tick count only values whose raw datum
  the service holds: never an owner-held value (its raw value is on its owner's device, and never was here).
* The privacy audit page shows the owner-held chains' stay tests, the same table as ``manage.py privacy_audit``,
  and its chart's epsilon axis starts at 0 and reaches the audited epsilons (one audited epsilon is no longer a
  lone point on an axis 0.008 wide).

Owner-held values are made as a deployment makes them: contributed and uploaded through the owner API and the
owner upload service (``market.values.services.value_upload_chain``).
"""
from __future__ import annotations

import uuid
from decimal import Decimal
from io import StringIO

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import User
from accounts.roles import grant_role
from audit import charts
from audit.overview import overview
from audit.privacy import privacy_audit
from market.models import Value
from market.purchases.pricing import DEFAULT_POLICY
from market.values.services import value_delete_raw, value_upload_chain, values_create_many
from mechanisms.relaxation import chain as draw_chain
from tests.factories import CategoricalAttributeFactory, StaffFactory, contribute, make_owners

D = Decimal
LABELS = ["walk", "bike", "car", "transit"]
EPS = [D("0.1"), D("0.2"), D("0.3"), D("0.4"), D("0.5"), D("0.6")]


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"truth-console-{uuid.uuid4()}"}}


def api_held_value(attribute, upload: list[Decimal] | None) -> int:
    """One owner-held value through the owner API: contributed, then (``upload``) the device's chain uploaded."""
    user = get_user_model().objects.create_user(username=f"held-{uuid.uuid4().hex[:8]}", password="pw-123456!")
    grant_role(user, "owner")
    client = APIClient()
    _, key = AuthToken.objects.create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    r = client.post("/api/v1/owner/values/", {"attribute": attribute.id, "custody": "owner", "ceiling": "1"},
                    format="json")
    assert r.status_code == 201, r.content
    if upload:
        outputs = draw_chain(np.array([1]), upload, len(LABELS), np.random.default_rng(5))[0].tolist()
        r = client.post(f"/api/v1/owner/values/{r.json()['id']}/chain/",
                        {"epsilons": [str(e) for e in upload], "outputs": outputs}, format="json")
        assert r.status_code == 200, r.content
    return Value.objects.filter(owner=user).get().id


def held_values(attribute, n: int, seed: int = 0) -> list[Value]:
    """``n`` owner-held values whose devices uploaded honest chains up to 0.6 (the owner upload service)."""
    owners = make_owners(n, f"held-{uuid.uuid4().hex[:6]}")
    values = values_create_many(attribute=attribute, owners=owners, raws=None, ceiling="1", custody="owner")
    rng = np.random.default_rng(seed)
    chains = draw_chain(rng.integers(0, len(LABELS), n), EPS, len(LABELS), rng)
    for v, o, out in zip(values, owners, chains):
        value_upload_chain(value_id=v.id, owner=o, epsilons=EPS, outputs=out.tolist())
    return values


@pytest.fixture
def console(db):
    client = Client()
    client.force_login(grant_role(StaffFactory(), User.Role.STAFF))
    return client


def test_raw_datum_counts_and_ticks_only_values_the_service_holds(console):
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    served = contribute(attribute, LABELS * 2, ceiling="1", prefix=f"s-{uuid.uuid4().hex[:6]}")
    value_delete_raw(value_id=served[0].id)
    held = [api_held_value(attribute, EPS[:3]), api_held_value(attribute, None)] + [
        v.id for v in held_values(attribute, 5)]

    assert overview().stats["values with raw datum"] == 7  # the 8 service-held values but the deleted one

    changelist = reverse("admin:market_value_changelist")
    page = console.get(changelist, {"attribute__id__exact": attribute.id, "raw": "present"})
    assert page.status_code == 200
    assert sorted(v.id for v in page.context_data["cl"].result_list) == sorted(v.id for v in served[1:])
    model_admin = page.context_data["cl"].model_admin
    ticks = {v.id: model_admin.raw_present(v) for v in Value.objects.filter(attribute=attribute)}
    assert [ticks[v] for v in held] == [False] * len(held)
    assert [ticks[v.id] for v in served] == [False] + [True] * 7
    # the owner-held values have a filter of their own, and a value's page says where its raw value is
    page = console.get(changelist, {"attribute__id__exact": attribute.id, "raw": "owner"})
    assert sorted(v.id for v in page.context_data["cl"].result_list) == sorted(held)
    page = console.get(reverse("admin:market_value_change", args=[held[0]]))
    assert page.status_code == 200
    assert "deleted by its owner" not in page.content.decode() and "owner&#x27;s device" in page.content.decode()


def test_the_privacy_audit_page_shows_the_clis_owner_held_stay_tests(console, tmp_path):
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    held_values(attribute, 60, seed=4)
    api_held_value(attribute, EPS[:2])

    out = StringIO()
    call_command("privacy_audit", "--attribute", str(attribute.id), "--out", str(tmp_path), stdout=out,
                 stderr=StringIO())
    cli = out.getvalue()
    assert "owner-held chains (61)" in cli
    cli_rows = [line.split() for line in cli.splitlines() if "->" in line]
    assert len(cli_rows) == 5  # 0.1 -> 0.2 ... 0.5 -> 0.6

    page = console.get(reverse("admin:ldp_privacy_audit"), {"attribute": attribute.id})
    assert page.status_code == 200
    html = page.content.decode()
    assert "Owner-held chains (61)" in html
    report = page.context_data["report"]
    shown = report.attributes[0].steps_table()
    # each CLI row (eps_from -> eps_to n N stayed SHARE law L p P) is a row of the page's table, cell for cell
    assert len(shown) == len(cli_rows)
    for row, cells in zip(cli_rows, shown):
        assert [row[0], row[2], row[4], row[6], row[8], row[10]] == [cells["eps_from"], cells["eps_to"],
                                                                      cells["n"], cells["share"],
                                                                      cells["expected"], cells["p_value"]]
        tds = "".join(f'<td class="num">{cells[k]}</td>' for k in ("eps_from", "eps_to", "n", "stayed", "share",
                                                                    "expected", "p_value"))
        assert tds in "".join(html.split()).replace('<tdclass="num">', '<td class="num">'), tds


def test_a_single_audited_epsilon_is_drawn_on_an_axis_from_zero(db, monkeypatch):
    """A chain attribute whose chains all stop at 0.1 (the demo's categorical experiment at load time): one level."""
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=DEFAULT_POLICY)
    contribute(attribute, LABELS * 25, ceiling="0.1", prefix=f"c-{uuid.uuid4().hex[:6]}", rng=np.random.default_rng(2))
    figures = []
    monkeypatch.setattr(charts, "_png", lambda fig: figures.append(fig) or b"png")
    report = privacy_audit(attribute_ids=[attribute.id], rng=np.random.default_rng(1))
    assert [lv.epsilon for lv in report.attributes[0].levels] == [0.1]
    assert len(figures) == 1
    (ax,) = figures[0].axes
    low, high = ax.get_xlim()
    assert low <= 0 and high >= 0.1 * 1.5, (low, high)
    bottom, top = ax.get_ylim()
    assert bottom <= 0 and top >= 1 - np.e ** 0.1 / (np.e ** 0.1 + len(LABELS) - 1), (bottom, top)
