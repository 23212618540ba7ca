"""The ldpmarket-client command line, end to end through its main() against a live server."""
from __future__ import annotations

import csv
import io
import json
import stat
from decimal import Decimal

import pytest

from ldpmarket_client import cli
from market.models import Purchase
from tests.client.conftest import PASSWORD


@pytest.fixture
def config(tmp_path, monkeypatch):
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN", "LDPMARKET_PASSWORD", "LDPMARKET_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "conf" / "config.json"


def run(capsys, *argv, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


def login(live_server, config, buyer, capsys, monkeypatch):
    code, _, err = run(capsys, "--url", live_server.url, "--config", str(config), "login", "--username",
                       buyer.username, "--password-stdin", stdin=PASSWORD + "\n", monkeypatch=monkeypatch)
    assert code == 0, err


def test_login_stores_the_token_for_the_user_only_and_the_verbs_use_it(live_server, buyer, categorical, config,
                                                                       capsys, monkeypatch):
    login(live_server, config, buyer, capsys, monkeypatch)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    stored = json.loads(config.read_text())
    assert stored["url"] == live_server.url and stored["username"] == buyer.username and stored["token"]

    # No --url: the stored one.  datasets, quote.
    code, out, err = run(capsys, "--config", str(config), "datasets", "--json")
    assert code == 0, err
    assert categorical.id in [a["id"] for d in json.loads(out) for a in d["attributes"]]
    code, out, err = run(capsys, "--config", str(config), "quote", "--attribute", str(categorical.id),
                         "--epsilon", "0.5", "--json")
    assert code == 0, err
    assert json.loads(out)["included"] == 30

    # buy --out writes the outputs as CSV.
    target = config.parent / "outputs.csv"
    code, out, err = run(capsys, "--config", str(config), "--no-progress", "buy", "--attribute",
                         str(categorical.id), "--epsilon", "0.5", "--out", str(target), "--json")
    assert code == 0, err
    purchase = json.loads(out)
    assert purchase["status"] == "completed"
    with target.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30 and set(rows[0]) == {"pseudonym", "epsilon", "output"}
    assert {r["output"] for r in rows} <= {"red", "green", "blue"}
    assert {Decimal(r["epsilon"]) for r in rows} == {Decimal("0.5")}

    # outputs ID to stdout and to a file: the same CSV.
    code, out, err = run(capsys, "--config", str(config), "outputs", str(purchase["id"]))
    assert code == 0 and out.replace("\r\n", "\n") == target.read_text().replace("\r\n", "\n")
    code, out, err = run(capsys, "--config", str(config), "estimate", str(purchase["id"]))
    assert code == 0 and json.loads(out)["n"] == 30

    # logout revokes the token and forgets it.
    code, _, err = run(capsys, "--config", str(config), "logout")
    assert code == 0, err
    assert "token" not in json.loads(config.read_text())
    code, _, err = run(capsys, "--config", str(config), "datasets")
    assert code == 2 and "login" in err


def test_the_environment_names_the_service_and_the_token(live_server, buyer, categorical, config, capsys,
                                                         monkeypatch):
    login(live_server, config, buyer, capsys, monkeypatch)
    token = json.loads(config.read_text())["token"]
    monkeypatch.setenv("LDPMARKET_URL", live_server.url)
    monkeypatch.setenv("LDPMARKET_TOKEN", token)
    monkeypatch.setenv("LDPMARKET_CONFIG", str(config.parent / "elsewhere.json"))  # no stored token there
    code, out, err = run(capsys, "datasets")
    assert code == 0, err
    monkeypatch.setenv("LDPMARKET_TOKEN", "wrong")
    code, out, err = run(capsys, "datasets")
    assert code == 1 and "401" in err


def test_errors_are_reported_with_their_problem_and_exit_1(live_server, buyer, categorical, config, capsys,
                                                          monkeypatch):
    login(live_server, config, buyer, capsys, monkeypatch)
    code, out, err = run(capsys, "--config", str(config), "buy", "--attribute", str(categorical.id),
                         "--epsilon", "5", "--out", str(config.parent / "none.csv"))
    assert code == 1 and out == ""
    assert "400 Nothing to sell at this epsilon" in err
    assert not (config.parent / "none.csv").exists() and not Purchase.objects.exists()
    code, out, err = run(capsys, "--config", str(config), "quote", "--attribute", str(categorical.id),
                         "--epsilon", "abc")
    assert code == 1 and "epsilon" in err
    code, _, err = run(capsys, "--url", live_server.url, "--config", str(config), "login", "--username",
                       buyer.username, "--password-stdin", stdin="wrong\n", monkeypatch=monkeypatch)
    assert code == 1 and "400" in err


def test_account_and_statement_verbs(live_server, buyer, categorical, config, capsys, monkeypatch):
    login(live_server, config, buyer, capsys, monkeypatch)
    code, out, err = run(capsys, "--config", str(config), "--no-progress", "buy", "--attribute",
                         str(categorical.id), "--epsilon", "0.5", "--json")
    assert code == 0, err
    purchase = json.loads(out)
    code, out, err = run(capsys, "--config", str(config), "account", "--json")
    assert code == 0, err
    account = json.loads(out)
    assert account["kind"] == "buyer_credit" and account["currency"] and account["balance"]
    code, out, err = run(capsys, "--config", str(config), "statement", "--json")
    assert code == 0, err
    assert json.loads(out)[0]["purchase"] == purchase["id"]
