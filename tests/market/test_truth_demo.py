"""Issue 31 on the demo data (``manage.py load_demo``), as a new user met it: three values contributed to the
device-held experiment after the demo was loaded (here service-held, through the owner API, as the issue's 203
values were), and two owner-held values contributed to the categorical experiment.

* item 1: the catalog's availability of ``commute`` at every grid point is what a quote includes (194 at 0.1,
  163 from 0.6 to 1.0: the 9 devices that uploaded nothing and the 31 that stopped at 0.5 are left out);
* item 5: the numbers ``load_demo`` prints add up to the totals it prints, or it says what the difference is.
"""
from __future__ import annotations

import re
import uuid
from decimal import Decimal
from io import StringIO

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.roles import grant_role
from market.models import Attribute
from mechanisms.relaxation import chain as draw_chain

D = Decimal


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"truth-demo-{uuid.uuid4()}"}}


def token_client(user) -> APIClient:
    client = APIClient()
    _, key = AuthToken.objects.create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def new_owner() -> APIClient:
    user = get_user_model().objects.create_user(username=f"late-{uuid.uuid4().hex[:8]}", password="pw-123456!")
    grant_role(user, "owner")
    return token_client(user)


def line_of(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(start))


def load_and_contribute_late():
    """The demo, then three late service-held answers to ``commute`` and two owner-held categorical values."""
    call_command("load_demo", stdout=StringIO(), stderr=StringIO())
    commute = Attribute.objects.get(dataset__title="Device-held experiment", name="commute")
    categorical = Attribute.objects.get(dataset__title="Categorical experiment")
    for label in ("car", "walk", "bike"):  # three late service-held answers: 203 values, as in the issue
        r = new_owner().post("/api/v1/owner/values/", {"attribute": commute.id, "value": label, "ceiling": "1"},
                             format="json")
        assert r.status_code == 201, r.content
    for k in range(2):  # two owner-held values in the categorical experiment, one uploaded up to 0.1
        client = new_owner()
        r = client.post("/api/v1/owner/values/", {"attribute": categorical.id, "custody": "owner", "ceiling": "1"},
                        format="json")
        assert r.status_code == 201, r.content
        if k == 0:
            out = draw_chain(np.array([2]), [D("0.1")], 5, np.random.default_rng(k))[0].tolist()
            r = client.post(f"/api/v1/owner/values/{r.json()['id']}/chain/", {"epsilons": ["0.1"], "outputs": out},
                            format="json")
            assert r.status_code == 200, r.content
    return commute


def test_the_demos_availability_is_what_quotes_include(db):
    """Item 1: the catalog against quotes, at every grid point of commute."""
    commute = load_and_contribute_late()
    buyer = get_user_model().objects.get(username="demo-buyer")
    api = token_client(buyer)
    r = api.get(f"/api/v1/datasets/{commute.dataset_id}/", {"histogram": "full"})
    assert r.status_code == 200, r.content
    payload = next(a for a in r.json()["attributes"] if a["id"] == commute.id)
    histogram = [(D(b["epsilon"]), b["available"]) for b in payload["histogram"]]
    quoted = []
    for e, _ in histogram:
        q = api.post("/api/v1/quotes/", {"attribute": commute.id, "epsilon": str(e)}, format="json")
        if q.status_code == 400 and q.json()["type"].endswith("/nothing-to-sell"):  # a quote of nothing: 0
            quoted.append((e, 0))
            continue
        assert q.status_code == 200, q.content
        quoted.append((e, q.json()["included"]))
    assert histogram == quoted
    at = dict(quoted)
    assert (at[D("0.1")], at[D("0.5")], at[D("0.6")], at[D("1.0")], at[D("1.1")]) == (194, 194, 163, 163, 0)
    assert payload["availability"]["values"] == 194 and payload["availability"]["at_max_epsilon"] == 163



def test_the_counts_load_demo_prints_add_up(db):
    """Item 5: the per-label counts load_demo prints add up to the totals it prints, or it says the difference."""
    load_and_contribute_late()
    out = StringIO()
    call_command("load_demo", stdout=out, stderr=StringIO())
    text = out.getvalue()
    held = line_of(text, "Device-held experiment / commute")
    total = int(re.search(r"\): (\d+) values", held).group(1))
    labels = sum(int(n) for n in re.findall(r"\b(?:walk|bike|car|transit): (\d+)", held))
    since = re.search(r"and (\d+) contributed since \((\d+) held by their owners, (\d+) by the service\)", held)
    assert total == 203 and labels + (int(since.group(1)) if since else 0) == total, held
    assert (int(since.group(2)), int(since.group(3))) == (0, 3), held
    uploaded = line_of(text, "uploaded by the devices:")
    devices = sum(int(n) for n in re.findall(r"(\d+) (?:up to|not yet)", uploaded))
    assert devices == 200, uploaded  # the owner-held values only: 160 up to 1.0, 31 up to 0.5, 9 not yet
    cat = line_of(text, "Categorical experiment / category")
    total = int(re.search(r"\): (\d+) values", cat).group(1))
    labels = sum(int(n) for n in re.findall(r"\b[1-5]: (\d+)", cat))
    missing = re.search(r"and (\d+) without a label here: (\d+) held by their owners", cat)
    assert total == 1502 and labels + (int(missing.group(1)) if missing else 0) == total, cat
    assert int(missing.group(2)) == 2, cat
