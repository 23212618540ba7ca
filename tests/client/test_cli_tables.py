"""``ldpmarket-client`` prints tables for people and the API's JSON with ``--json`` (issue 31, docs/client.md
#command-line): aligned columns under headers, amounts with their currency (docs/money.md#how-amounts-are-shown)."""
from __future__ import annotations

import json

import pytest

from ldpmarket_client import cli
from ldpmarket_client.money import format_money_text
from ldpmarket_client.tables import epsilon, fields, table, when
from tests.client.conftest import PASSWORD


@pytest.fixture
def cli_run(live_server, buyer, tmp_path, capsys, monkeypatch):
    """``run(*argv)``: ``ldpmarket-client`` signed in as the buyer: (exit status, out, err)."""
    for name in ("LDPMARKET_URL", "LDPMARKET_TOKEN", "LDPMARKET_PASSWORD", "LDPMARKET_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config.json"

    def run(*argv):
        code = cli.main(["--config", str(config), "--no-progress", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    monkeypatch.setenv("LDPMARKET_PASSWORD", PASSWORD)
    code, _, err = run("--url", live_server.url, "login", "--username", buyer.username)
    assert code == 0, err
    return run


def as_json(data) -> str:
    """What the CLI printed before tables, and prints with --json: the API's JSON, indented by 2."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def rows(out: str) -> list[dict[str, str]]:
    """A table's rows as {column: cell}.  Columns are found as a reader finds them: they are separated by runs of
    two or more positions that are blank on every line (the header's names hold single spaces only)."""
    lines = out.rstrip("\n").split("\n")
    width = max(map(len, lines))
    lines = [line.ljust(width) for line in lines]
    blank = [all(line[i] == " " for line in lines) for i in range(width)] + [False]
    spans, i = [], 0
    while i < width:
        j = i
        while j < width and not (blank[j] and blank[j + 1]):
            j += 1
        spans.append((i, j))
        while j < width and blank[j]:
            j += 1
        i = j
    names = [lines[0][a:b].strip() for a, b in spans]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, spans)} for line in lines[1:]]


def labelled(out: str) -> dict[str, str]:
    """``Label:  value`` lines as a dict."""
    return {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in out.splitlines()
            if ":  " in line}


# ------------------------------------------------------------------------------------------- the formatter

def test_table_aligns_columns_under_their_headers():
    text = table(("ID", "NAME", "AMOUNT"), [(1, "a", "0.15 EUR"), (12, "longer name", "100.00 EUR"), (3, None, "")],
                 right=(0, 2))
    assert text.split("\n") == [
        "ID  NAME             AMOUNT",
        " 1  a              0.15 EUR",
        "12  longer name  100.00 EUR",
        " 3",
    ]


def test_fields_align_their_values_and_leave_out_none():
    assert fields([("Price", "0.15 EUR"), ("Error", None), ("Idempotency key", "k")]).split("\n") == [
        "Price:            0.15 EUR",
        "Idempotency key:  k",
    ]


def test_epsilons_and_times_for_people():
    assert epsilon("0.500000") == "0.5" and epsilon("2.000000") == "2" and epsilon("0.000001") == "0.000001"
    assert when("2026-11-28T07:01:46.123456Z") == "2026-11-28 07:01:46 UTC"
    assert when("2026-11-28T08:01:46+01:00") == "2026-11-28 07:01:46 UTC"


# ------------------------------------------------------------------------------------------ the verbs, live

def test_datasets_prints_a_table_and_the_json_with_json(cli_run, categorical, client_for, buyer):
    catalog = client_for(buyer).datasets()
    code, out, err = cli_run("datasets")
    assert code == 0, err
    assert out.split("\n")[0].split() == ["ID", "DATASET", "ATTRIBUTE", "KIND", "MECHANISM", "VALUES", "MAX",
                                          "EPSILON", "PRICE", "PER", "VALUE"]
    [row] = [r for r in rows(out) if r["ID"] == str(categorical.id)]
    [attribute] = [a for d in catalog for a in d["attributes"] if a["id"] == categorical.id]
    points = attribute["price_policy"]["points"]
    assert row["ATTRIBUTE"] == categorical.name and row["KIND"] == "categorical" and row["VALUES"] == "30"
    assert row["MAX EPSILON"] == "2"
    assert row["PRICE PER VALUE"] == (f"{format_money_text(points[0]['price'], 'EUR')} to "
                                      f"{format_money_text(points[-1]['price'], 'EUR')}")
    code, out, err = cli_run("datasets", "--json")
    assert code == 0, err
    assert out == as_json(catalog)


def test_quote_prints_its_figures_with_the_currency(cli_run, categorical):
    argv = ("quote", "--attribute", str(categorical.id), "--epsilon", "0.5")
    code, out, err = cli_run(*argv, "--json")
    assert code == 0, err
    quote = json.loads(out)
    assert out == as_json(quote) and quote["price"] == "0.1500"
    code, out, err = cli_run(*argv)
    assert code == 0, err
    assert out.split("\n")[0] == f"Quote for attribute {categorical.id} at epsilon 0.5"
    shown = labelled(out)
    assert shown["Included"] == "30 of 30 values" and shown["Excluded"] == "none"
    assert shown["Price"] == "0.15 EUR" == format_money_text(quote["price"], "EUR")
    assert shown["Price per value"] == format_money_text(quote["price_per_value"], "EUR") == "0.0050 EUR"
    assert shown["Quote"]  # the token, whole, for buy --quote
    assert "{" not in out


def test_buy_purchase_account_and_statement_print_tables_and_json_with_json(cli_run, categorical, client_for,
                                                                           buyer):
    code, out, err = cli_run("buy", "--attribute", str(categorical.id), "--epsilon", "0.5")
    assert code == 0, err
    client = client_for(buyer)
    [purchase] = client.purchases()
    assert out.split("\n")[0] == f"Purchase {purchase['id']}: completed"
    shown = labelled(out)
    assert shown["Price"] == format_money_text(purchase["price"], "EUR") == "0.15 EUR"
    assert shown["Included"] == "30 of 30 values" and shown["Epsilon"] == "0.5"
    assert shown["Completed at"] == when(purchase["completed_at"])

    code, out, err = cli_run("purchase", str(purchase["id"]))
    assert code == 0, err
    assert out.split("\n")[0] == f"Purchase {purchase['id']}: completed" and labelled(out)["Price"] == "0.15 EUR"
    code, out, err = cli_run("purchase", str(purchase["id"]), "--json")
    assert code == 0, err
    assert out == as_json(client.purchase(purchase["id"]))

    code, out, err = cli_run("account")
    assert code == 0, err
    account = client.account()
    assert labelled(out) == {"Account": "buyer credit", "Balance": "99.85 EUR",
                             "Pending": format_money_text(account["pending"], "EUR")}
    assert account["balance"] == "99.8500"
    code, out, err = cli_run("account", "--json")
    assert code == 0, err
    assert out == as_json(account)

    code, out, err = cli_run("statement")
    assert code == 0, err
    entries = client.statement()
    shown = rows(out)
    assert [r["ID"] for r in shown] == [str(e["id"]) for e in entries]
    assert [(r["AMOUNT"], r["BALANCE AFTER"]) for r in shown] == [("-0.15 EUR", "99.85 EUR"),
                                                                    ("100.00 EUR", "100.00 EUR")]
    assert shown[0]["PURCHASE"] == str(purchase["id"]) and shown[0]["KIND"] == "purchase"
    code, out, err = cli_run("statement", "--json")
    assert code == 0, err
    assert out == as_json(entries)
