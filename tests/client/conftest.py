"""The Python client (client/, docs/client.md) against a live server: a buyer made as a deployment makes one
(a user given the buyer role by ``accounts.roles.grant_role``, funded by a money entry), attributes with values."""
from __future__ import annotations

import gc
import uuid

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import grant_role
from tests.factories import CategoricalAttributeFactory, fund
from tests.market.api.conftest import LABELS, POLICY, contribute

PASSWORD = "client-test-password"


@pytest.fixture(autouse=True)
def _isolated_cache(settings):
    """A private in-memory cache per test (throttles and progress), shared by the test and the live server."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": f"client-tests-{uuid.uuid4()}"}}


def make_buyer(credit="100", username=None):
    user = get_user_model().objects.create_user(username=username or f"cb-{uuid.uuid4().hex[:8]}",
                                                password=PASSWORD)
    grant_role(user, "buyer")
    if credit:
        fund(user, credit)
    return user


@pytest.fixture
def buyer(transactional_db):
    return make_buyer()


@pytest.fixture
def categorical(transactional_db):
    """A categorical attribute with 30 values (10 of each label), ceilings 2."""
    attribute = CategoricalAttributeFactory(labels=LABELS, price_policy=POLICY)
    contribute(attribute, LABELS * 10, ceiling="2", seed=1)
    return attribute


@pytest.fixture
def sleeps(monkeypatch):
    """Every wait the client makes (it still really waits), in seconds."""
    import time

    seen = []

    def sleep(seconds):
        seen.append(seconds)
        time.sleep(seconds)

    return seen, sleep


@pytest.fixture
def client_for(live_server, sleeps):
    """Clients of the live server, as ``user`` (by password) or with a ``token``.

    Their connections are closed after the test: a kept-alive connection holds a server thread and its
    database connection, which would keep the test database from being dropped.  A response kept alive by an
    exception's traceback (``pytest.raises``) keeps its socket open until it is collected, hence the
    ``gc.collect()``."""
    import requests

    from ldpmarket_client import Client

    made = []

    def make(user=None, *, token=None, password=PASSWORD, url=None, **kwargs):
        kwargs.setdefault("progress", False)
        kwargs.setdefault("sleep", sleeps[1])
        session = requests.Session()
        made.append(session)
        if user is None:
            return Client(url or live_server.url, token, session=session, **kwargs)
        return Client(url or live_server.url, username=user.username, password=password, session=session,
                      **kwargs)

    yield make
    for session in made:
        session.close()
    gc.collect()


def statuses(client) -> list[tuple[str, str, int]]:
    """Record (method, path, status) of every answer the client gets."""
    from urllib.parse import urlsplit

    seen = []
    client.session.hooks["response"].append(
        lambda r, *args, **kwargs: seen.append((r.request.method, urlsplit(r.url).path, r.status_code)))
    return seen


@pytest.fixture(scope="session")
def live_server(django_db_setup, live_server):
    """pytest-django's live server, stopped before the test database is dropped (its threads' connections would
    otherwise keep the database from being dropped)."""
    return live_server
