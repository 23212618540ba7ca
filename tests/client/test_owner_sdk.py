"""The owner SDK (ldpmarket_client.owner, docs/custody.md) against a live server: contribute an owner-held value
with its chain drawn on the device, extend it from the stored head, see its status, survive a lost answer; the
raw value stays in the state file (0600) and is never in a request; the ``owner`` verbs of the command line."""
from __future__ import annotations

import json
import random
import stat
import uuid
from decimal import Decimal

import pytest
import requests
from django.contrib.auth import get_user_model

from accounts.roles import grant_role
from accounts.services import budget_set_ceiling
from ldpmarket_client import cli, errors, sampler
from ldpmarket_client.owner import Grid, Owner, OwnerError
from market.models import Value
from tests.client.conftest import PASSWORD
from tests.factories import CategoricalAttributeFactory, TernaryAttributeFactory, stored_chains

LABELS = ["red", "green", "blue", "amber"]
RAW = "amber"  # the owner's raw value: a word that appears nowhere else in the exchange


class Seeded:
    """A seeded word source (the SDK's default is the OS CSPRNG), so the uploaded chain can be re-drawn."""

    def __init__(self, seed):
        self.rnd = random.Random(seed)

    def words(self, n):
        return [self.rnd.getrandbits(64) for _ in range(n)]


def points(start: str, stop: str, step: str = "0.1") -> list[str]:
    out, e = [], Decimal(start)
    while e <= Decimal(stop):
        out.append(str(e.normalize()) if e != e.to_integral() else str(e.to_integral()))
        e += Decimal(step)
    return out


@pytest.fixture
def owner_user(transactional_db):
    user = get_user_model().objects.create_user(username=f"co-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    grant_role(user, "owner")
    return user


@pytest.fixture
def attribute(transactional_db):
    return CategoricalAttributeFactory(labels=LABELS)


@pytest.fixture
def sent():
    """Every request the SDK sends: (method, url, body text)."""
    return []


@pytest.fixture
def owner_for(live_server, owner_user, tmp_path, sent, client_for):
    """An Owner signed in with a token obtained by POST /api/v1/auth/token/, recording its requests."""
    token = client_for(owner_user).token

    def make(seed=1, state=None, **kwargs):
        owner = Owner(live_server.url, token, state=state or tmp_path / "owner" / "state.json",
                      words=Seeded(seed), session=requests.Session(), progress=False, **kwargs)
        owner.client.session.hooks["response"].append(lambda r, *a, **k: sent.append(
            (r.request.method, r.request.url, _text(r.request.body))))
        return owner

    made = []
    yield lambda *a, **k: made.append(make(*a, **k)) or made[-1]
    for owner in made:
        owner.close()


def _text(body) -> str:
    if body is None:
        return ""
    return body.decode() if isinstance(body, bytes) else str(body)


def chain_of(value_id: int, attribute) -> tuple[list[int], list[int]]:
    eps, out = stored_chains(attribute, [value_id])[value_id]
    return eps.tolist(), out[:, 0].tolist()


def chain_posts_outputs(sent) -> list[int]:
    """The outputs of every chain upload the SDK sent, in order."""
    return [o for method, url, body in sent if method == "POST" and url.endswith("/chain/")
            for o in json.loads(body)["outputs"]]


def micro(eps: list[str]) -> list[int]:
    return [int(Decimal(e) * 1_000_000) for e in eps]


def test_contribute_draws_the_chain_here_and_the_raw_value_stays_in_the_state_file(owner_for, attribute, sent,
                                                                                    tmp_path):
    owner = owner_for(seed=7)
    value = owner.contribute(attribute.id, RAW, ceiling="1", upload_to="2.05")
    assert value["custody"] == "owner" and value["attribute"] == attribute.id
    assert value["head"] == value["upload_level"] == "2.05" and value["ceiling"] == "1"
    assert value["guarantee"] == {"buyers": "0", "service": "2.05"} and not value["needs_upload"]
    # The service stored exactly the chain the SDK's sampler draws from these words: the grid from its start,
    # then the off-grid upload level.
    epsilons = points("0.1", "2") + ["2.05"]
    want = sampler.chain(LABELS.index(RAW), [Decimal(e) for e in epsilons], len(LABELS), Seeded(7))
    assert chain_of(value["id"], attribute) == (micro(epsilons), want)
    # The service holds no raw value and no mechanism input.
    stored = Value.objects.get(id=value["id"])
    assert stored.raw_sealed is None and stored.input_sealed is None
    # The state file: the raw value and the head, readable by the user only.
    path = tmp_path / "owner" / "state.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    state = json.loads(path.read_text())
    entry = state["values"][str(value["id"])]
    assert entry["value"] == RAW and entry["head"] == {"epsilon": "2.05", "output": want[-1]}
    assert entry["pending"] is None and state["contributing"] == {}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    # No request carried the raw value (nor its name in a query); the contribution sent no "value".
    posts = [(url, body) for method, url, body in sent if method == "POST"]
    assert [url.split("/api/v1/")[1] for url, _ in posts] == ["owner/values/", f"owner/values/{value['id']}/chain/"]
    assert json.loads(posts[0][1]) == {"attribute": attribute.id, "custody": "owner", "ceiling": "1"}
    assert json.loads(posts[1][1]) == {"epsilons": epsilons, "outputs": want}
    assert all(RAW not in url and RAW not in body for _, url, body in sent)


def test_the_default_upload_level_is_the_ceilings_last_grid_point(owner_for, attribute):
    value = owner_for().contribute(attribute.id, "green", ceiling="0.55")
    assert value["head"] == "0.5" and not value["needs_upload"]
    assert chain_of(value["id"], attribute)[0] == micro(points("0.1", "0.5"))


def test_extend_continues_from_the_stored_head(owner_for, attribute, sent):
    owner = owner_for(seed=3)
    value = owner.contribute(attribute.id, RAW, ceiling="1", upload_to="0.45")
    assert value["head"] == "0.45" and value["needs_upload"]  # the ceiling's 1.0 is above the upload level
    budget_set_ceiling(value_id=value["id"], ceiling="1.5")
    [result] = owner.extend()
    assert result["uploaded"] == points("0.5", "1.5") and result["value"]["head"] == "1.5"
    assert not result["value"]["needs_upload"]
    # One chain, continued from the head (0.45, its output) with the same word stream: what the sampler draws
    # for the whole epsilon sequence at once.
    epsilons = points("0.1", "0.4") + ["0.45"] + points("0.5", "1.5")
    want = sampler.chain(LABELS.index(RAW), [Decimal(e) for e in epsilons], len(LABELS), Seeded(3))
    assert chain_of(value["id"], attribute) == (micro(epsilons), want)
    # Nothing to do: no upload.
    before = len(sent)
    assert owner.extend(value["id"]) == [{"id": value["id"], "uploaded": [], "value": result["value"]}]
    assert all(method == "GET" for method, _, _ in sent[before:])
    # Ahead of the ceiling (it costs nothing towards buyers, docs/custody.md), one value by its id.
    [result] = owner.extend(value["id"], upload_to="3")
    assert result["uploaded"] == points("1.6", "3") and result["value"]["head"] == "3"
    assert result["value"]["guarantee"]["service"] == "3"
    assert all(RAW not in url and RAW not in body for _, url, body in sent)


def test_status_merges_the_services_view_with_the_state_file(owner_for, attribute, tmp_path):
    owner = owner_for()
    value = owner.contribute(attribute.id, "blue", ceiling="1")
    other = CategoricalAttributeFactory(labels=LABELS)
    # A value this state file does not hold (contributed from another device or state file).
    elsewhere = owner_for(state=tmp_path / "elsewhere.json").contribute(other.id, "red", ceiling="1")
    rows = {row["id"]: row for row in owner.status()}
    assert rows[value["id"]]["head"] == "1" and rows[value["id"]]["custody"] == "owner"
    assert rows[value["id"]]["local"] == {"value": "blue", "head": {"epsilon": "1", "output": rows[value["id"]][
        "local"]["head"]["output"]}, "pending": None, "in_sync": True}
    assert rows[elsewhere["id"]]["local"] is None


def test_a_lost_answer_is_resent_unchanged_never_redrawn(owner_for, attribute, sent, monkeypatch):
    owner = owner_for(seed=5)
    session = owner.client.session
    real = session.request
    lose = {"before": 1, "after": 0}

    def flaky(method, url, **kwargs):
        if method == "POST" and url.endswith("/chain/"):
            if lose["before"]:  # the request never reaches the service
                lose["before"] -= 1
                raise requests.ConnectionError("network down")
            if lose["after"]:  # the service stores the points, the answer is lost
                lose["after"] -= 1
                real(method, url, **kwargs)
                raise requests.ConnectionError("answer lost")
        return real(method, url, **kwargs)

    monkeypatch.setattr(session, "request", flaky)
    with pytest.raises(requests.ConnectionError):
        owner.contribute(attribute.id, RAW, ceiling="0.5")
    state = json.loads(owner.state.path.read_text())
    [(key, entry)] = state["values"].items()
    pending = entry["pending"]
    assert entry["head"] is None and pending["epsilons"] == points("0.1", "0.5")
    # extend sends the saved points, unchanged (a second draw at the same epsilons would leak more).
    [result] = owner.extend()
    assert result["uploaded"] == pending["epsilons"] and result["value"]["head"] == "0.5"
    assert chain_of(int(key), attribute)[1] == pending["outputs"]
    chain_posts = [body for method, url, body in sent if url.endswith("/chain/")]
    assert [json.loads(b) for b in chain_posts] == [pending]

    # Stored, but the answer lost: the next extend sees the service's head at the pending points and only
    # records them.
    budget_set_ceiling(value_id=int(key), ceiling="0.8")
    lose["after"] = 1
    with pytest.raises(requests.ConnectionError):
        owner.extend()
    pending = json.loads(owner.state.path.read_text())["values"][key]["pending"]
    assert pending["epsilons"] == points("0.6", "0.8")
    before = len(sent)
    [result] = owner.extend()
    assert result["value"]["head"] == "0.8" and not [u for m, u, _ in sent[before:] if m == "POST"]
    entry = json.loads(owner.state.path.read_text())["values"][key]
    assert entry["pending"] is None and entry["head"] == {"epsilon": "0.8", "output": pending["outputs"][-1]}
    assert chain_of(int(key), attribute) == (micro(points("0.1", "0.8")), chain_posts_outputs(sent))


def test_a_contribution_whose_answer_was_lost_is_adopted(owner_for, attribute, monkeypatch):
    owner = owner_for()
    session = owner.client.session
    real = session.request

    def lost(method, url, **kwargs):
        response = real(method, url, **kwargs)
        if method == "POST" and url.endswith("/owner/values/"):
            raise requests.ConnectionError("answer lost")
        return response

    monkeypatch.setattr(session, "request", lost)
    with pytest.raises(requests.ConnectionError):
        owner.contribute(attribute.id, "red", ceiling="0.3")
    monkeypatch.setattr(session, "request", real)
    state = json.loads(owner.state.path.read_text())
    assert state["contributing"] == {str(attribute.id): {"value": "red", "ceiling": "0.3"}}
    [result] = owner.extend()
    assert result["value"]["head"] == "0.3" and result["uploaded"] == ["0.1", "0.2", "0.3"]
    state = json.loads(owner.state.path.read_text())
    assert state["contributing"] == {} and state["values"][str(result["id"])]["value"] == "red"


def test_a_chain_grown_elsewhere_is_not_continued(owner_for, attribute, tmp_path):
    owner = owner_for()
    value = owner.contribute(attribute.id, "green", ceiling="0.3")
    path = owner.state.path
    state = json.loads(path.read_text())
    state["values"][str(value["id"])]["head"] = {"epsilon": "0.2", "output": 0}  # a stale copy of the file
    path.write_text(json.dumps(state))
    budget_set_ceiling(value_id=value["id"], ceiling="1")
    with pytest.raises(OwnerError, match="grown elsewhere"):
        owner.extend(value["id"])
    [result] = owner.extend()
    assert result["id"] == value["id"] and "grown elsewhere" in result["error"]


def test_refusals_before_anything_is_made(owner_for, attribute, sent):
    owner = owner_for()
    with pytest.raises(OwnerError, match="not a label"):
        owner.contribute(attribute.id, "purple", ceiling="1")
    with pytest.raises(OwnerError, match="above the attribute's cap"):
        owner.contribute(attribute.id, "red", ceiling="1", upload_to="10.1")
    with pytest.raises(OwnerError, match="6 decimal places"):
        owner.contribute(attribute.id, "red", ceiling="1", upload_to="0.1234567")
    with pytest.raises(OwnerError, match="grid start"):
        owner.contribute(attribute.id, "red", ceiling="1", upload_to="0.05")
    assert not [u for m, u, _ in sent if m == "POST"] and not Value.objects.filter(attribute=attribute).exists()
    owner.contribute(attribute.id, "red", ceiling="1")
    with pytest.raises(OwnerError, match="already holds"):
        owner.contribute(attribute.id, "red", ceiling="1")


def test_a_refused_contribution_is_a_typed_problem_and_leaves_no_trace(owner_for):
    ternary = TernaryAttributeFactory()  # one-shot: owner custody is refused
    owner = owner_for()
    with pytest.raises(errors.ProblemError) as caught:
        owner.contribute(ternary.id, "plus", ceiling="1")
    assert caught.value.status == 400
    state = json.loads(owner.state.path.read_text())
    assert state["contributing"] == {} and state["values"] == {}


def test_the_state_file_belongs_to_one_service(owner_for, tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"format": "ldpmarket-owner-state", "version": 1, "url": "http://elsewhere",
                                "values": {}, "contributing": {}}))
    with pytest.raises(OwnerError, match="another state file"):
        owner_for(state=path).status()


def test_grid_points_of_an_upload():
    g = Grid.of({"start": "0.1", "step": "0.1", "stop": "1"})
    assert g.upload_points(None, 300_000) == [100_000, 200_000, 300_000]
    assert g.upload_points(None, 250_000) == [100_000, 200_000, 250_000]
    assert g.upload_points(250_000, 400_000) == [300_000, 400_000]
    assert g.upload_points(250_000, 250_000) == [] and g.upload_points(400_000, 300_000) == []
    with pytest.raises(OwnerError, match="must reach"):
        g.upload_points(250_000, 280_000)  # an off-grid level can only be followed from the next grid point
    with pytest.raises(OwnerError, match="cap"):
        g.upload_points(None, 1_100_000)
    assert g.last_point_upto(550_000) == 500_000 and g.last_point_upto(50_000) == 100_000
    assert g.last_point_upto(5_000_000) == 1_000_000


def test_the_owner_verbs_of_the_command_line(live_server, owner_user, attribute, tmp_path, capsys, monkeypatch,
                                             client_for):
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN", "LDPMARKET_CONFIG", "LDPMARKET_OWNER_STATE"):
        monkeypatch.delenv(name, raising=False)
    token = client_for(owner_user).token
    state = tmp_path / "cli-state.json"
    base = ["--url", live_server.url, "--token", token, "--config", str(tmp_path / "config.json"), "owner",
            "--state", str(state)]

    def run(*argv):
        code = cli.main([*base, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = run("contribute", "--attribute", str(attribute.id), "--value", RAW, "--ceiling", "1",
                         "--upload-to", "0.5")
    assert code == 0, err
    value = json.loads(out)
    assert value["head"] == "0.5" and value["needs_upload"]
    assert stat.S_IMODE(state.stat().st_mode) == 0o600 and RAW in state.read_text()
    code, out, err = run("extend")
    assert code == 0, err
    [result] = json.loads(out)
    assert result["uploaded"] == points("0.6", "1") and result["value"]["head"] == "1"
    code, out, err = run("extend", "--value-id", str(value["id"]), "--upload-to", "1.25")
    assert code == 0, err
    assert json.loads(out)[0]["value"]["head"] == "1.25"
    code, out, err = run("status")
    assert code == 0, err
    [row] = json.loads(out)
    assert row["id"] == value["id"] and row["local"]["head"]["epsilon"] == "1.25" and row["local"]["in_sync"]
    code, out, err = run("contribute", "--attribute", str(attribute.id), "--value", RAW, "--ceiling", "1")
    assert code == 1 and "already holds" in err
