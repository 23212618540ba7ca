"""The owner verbs of ``ldpmarket-client`` where the state file does not know a value of yours (issue 31): a second
contribution to an attribute is refused before anything is sent, ``owner extend`` says which values it could not
extend and why; and every verb ends quietly when its output is piped into ``head`` (docs/client.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import requests
from django.contrib.auth import get_user_model

from accounts.roles import grant_role
from ldpmarket_client import cli
from ldpmarket_client.owner import Owner
from market.models import Value
from market.values.services import value_create
from tests.client.conftest import PASSWORD
from tests.factories import CategoricalAttributeFactory

LABELS = ["red", "green", "blue", "amber"]


@pytest.fixture
def owner_user(transactional_db):
    user = get_user_model().objects.create_user(username=f"co-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    grant_role(user, "owner")
    return user


@pytest.fixture
def attribute(transactional_db):
    return CategoricalAttributeFactory(labels=LABELS, name="commute")


@pytest.fixture
def sent(monkeypatch):
    """Every request any client of this process sends: (method, url)."""
    seen = []
    real = requests.Session.send

    def send(self, request, **kwargs):
        seen.append((request.method, request.url))
        return real(self, request, **kwargs)

    monkeypatch.setattr(requests.Session, "send", send)
    return seen


@pytest.fixture
def owner_cli(live_server, owner_user, tmp_path, capsys, monkeypatch, client_for):
    """``run(*argv)`` runs ``ldpmarket-client owner --state <a fresh state file> ...``: (exit status, out, err)."""
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN", "LDPMARKET_CONFIG", "LDPMARKET_OWNER_STATE"):
        monkeypatch.delenv(name, raising=False)
    token = client_for(owner_user).token
    state = tmp_path / "here" / "state.json"

    def run(*argv, state=state):
        code = cli.main(["--url", live_server.url, "--token", token, "--config", str(tmp_path / "config.json"),
                         "owner", "--state", str(state), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    run.state = state
    run.token = token
    return run


def elsewhere(live_server, token, tmp_path, attribute, label="green", ceiling="0.5") -> dict:
    """A value contributed from another device (another state file)."""
    with Owner(live_server.url, token, state=tmp_path / "other-device.json", session=requests.Session(),
               progress=False) as owner:
        return owner.contribute(attribute.id, label, ceiling=ceiling)


def test_a_second_contribution_to_an_attribute_is_refused_before_anything_is_sent(live_server, owner_cli,
                                                                                  attribute, tmp_path, sent):
    # One value per owner and attribute (market.models.Value, constraint value_one_per_owner_attribute).
    value = elsewhere(live_server, owner_cli.token, tmp_path, attribute)
    before = len(sent)
    code, out, err = owner_cli("contribute", "--attribute", str(attribute.id), "--value", "red", "--ceiling", "1")
    assert code == 1 and out == ""
    assert "Budget change refused" not in err
    assert f"you already contribute a value to commute (value {value['id']})" in err
    assert str(owner_cli.state) in err and "another device" in err and "owner extend" in err
    assert not [m for m, _ in sent[before:] if m == "POST"]
    assert Value.objects.filter(attribute=attribute).count() == 1


def test_a_second_contribution_beside_a_value_the_service_holds_is_refused(owner_cli, owner_user, attribute, sent):
    value = value_create(owner=owner_user, attribute=attribute, raw="blue", ceiling="1")  # the browser's way
    before = len(sent)
    code, out, err = owner_cli("contribute", "--attribute", str(attribute.id), "--value", "red", "--ceiling", "1")
    assert code == 1 and out == ""
    assert f"you already contribute a value to commute (value {value.id})" in err
    assert "the service holds it" in err
    assert not [m for m, _ in sent[before:] if m == "POST"]


def test_extend_says_which_values_it_could_not_extend_and_fails(live_server, owner_cli, attribute, tmp_path):
    value = elsewhere(live_server, owner_cli.token, tmp_path, attribute)
    code, out, err = owner_cli("extend")
    assert code == 1, (out, err)
    assert json.loads(out) == []
    assert f"value {value['id']} (commute)" in err
    assert f"not in the state file {owner_cli.state}" in err and "another device" in err

    code, out, err = owner_cli("extend", "--value-id", str(value["id"]))
    assert code == 1 and out == ""
    assert f"value {value['id']} (commute)" in err
    assert f"not in the state file {owner_cli.state}" in err and "another device" in err


def test_extend_notes_values_held_elsewhere_beside_the_ones_it_extends(live_server, owner_cli, attribute, tmp_path):
    value = elsewhere(live_server, owner_cli.token, tmp_path, attribute)
    other = CategoricalAttributeFactory(labels=LABELS, name="diet")
    code, out, err = owner_cli("contribute", "--attribute", str(other.id), "--value", "red", "--ceiling", "0.3")
    assert code == 0, err
    mine = json.loads(out)
    code, out, err = owner_cli("extend")
    assert code == 0, err  # every value held here is extended; the others are only noted
    assert [r["id"] for r in json.loads(out)] == [mine["id"]]
    assert f"value {value['id']} (commute)" in err and f"not in the state file {owner_cli.state}" in err


def test_extend_of_a_value_that_is_not_yours(owner_cli):
    code, out, err = owner_cli("extend", "--value-id", "999999")
    assert code == 1 and out == ""
    assert "you have no value 999999" in err


def _closed_pipe() -> int:
    """The write end of a pipe whose read end is closed, as ``head`` leaves it once it has read enough."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("argv", [["outputs", "{purchase}"], ["datasets"], ["datasets", "--json"],
                                  ["statement"]])
def test_output_piped_into_head_ends_quietly(live_server, buyer, categorical, client_for, argv, tmp_path):
    client = client_for(buyer)
    purchase = client.buy(attribute=categorical.id, epsilon="0.5")
    argv = [a.format(purchase=purchase["id"]) for a in argv]
    env = {**os.environ, "LDPMARKET_URL": live_server.url, "LDPMARKET_TOKEN": client.token,
           "LDPMARKET_CONFIG": str(tmp_path / "config.json")}
    stdout = _closed_pipe()
    try:
        done = subprocess.run([sys.executable, "-m", "ldpmarket_client", *argv], stdout=stdout,
                              stderr=subprocess.PIPE, env=env, timeout=120, text=True)
    finally:
        os.close(stdout)
    assert done.stderr == "" and done.returncode in (0, 1)
