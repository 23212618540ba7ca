"""``ldpmarket-client estimate ID --plot out.png`` (issue 31, docs/client.md#command-line): the estimate with its 95%
confidence intervals as a PNG, drawn by matplotlib (an optional extra) with the Agg backend."""
from __future__ import annotations

import json
import struct
import sys

import pytest

import ldpmarket_client
from ldpmarket_client import cli
from ldpmarket_client.plot import NothingToPlot, estimate_figure
from tests.client.conftest import PASSWORD
from tests.factories import NumericAttributeFactory
from tests.market.api.conftest import POLICY, contribute

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def cli_run(live_server, buyer, tmp_path, capsys, monkeypatch):
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


def png_size(path) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def drawn_bars(fig) -> tuple[list[str], list[float], list[tuple[float, float]]]:
    """What the figure shows: the tick labels, the bars' heights and each error bar's (low, high)."""
    [ax] = fig.axes
    bars, errorbars = ax.containers
    heights = [patch.get_height() for patch in bars.patches]
    intervals = [(seg[0][1], seg[1][1]) for seg in errorbars.lines[2][0].get_segments()]
    return [t.get_text() for t in ax.get_xticklabels()], heights, intervals


def test_estimate_plot_writes_a_png_of_the_frequencies_with_their_intervals(cli_run, categorical, client_for,
                                                                             buyer, tmp_path):
    client = client_for(buyer)
    purchase = client.buy(attribute=categorical.id, epsilon="2")
    target = tmp_path / "estimate.png"
    code, out, err = cli_run("estimate", str(purchase["id"]), "--plot", str(target))
    assert code == 0, err
    estimate = client.estimate(purchase["id"])
    assert json.loads(out) == estimate  # stdout: the estimate, as without --plot
    assert str(target) in err
    assert png_size(target) == (640, 480) and 5_000 < target.stat().st_size < 500_000

    labels, heights, intervals = drawn_bars(estimate_figure(estimate))
    rows = estimate["frequencies"]
    assert labels == [r["label"] for r in rows] == ["red", "green", "blue"]
    assert heights == [r["estimate"] for r in rows]
    assert [x for pair in intervals for x in pair] == pytest.approx(
        [x for r in rows for x in (r["ci95_low"], r["ci95_high"])], rel=1e-12, abs=1e-12)


def test_a_numeric_estimate_is_plotted_as_its_mean_with_its_interval(cli_run, client_for, buyer, tmp_path):
    numeric = NumericAttributeFactory(price_policy=POLICY)
    contribute(numeric, [10, 20, 30, 40, 50, 60] * 5, ceiling="2", seed=3)
    client = client_for(buyer)
    purchase = client.buy(attribute=numeric.id, epsilon="1")
    estimate = client.estimate(purchase["id"])
    mean = estimate["mean"]
    [ax] = estimate_figure(estimate).axes
    [(line, _caps, (segments,))] = [(c.lines[0], c.lines[1], c.lines[2]) for c in ax.containers]
    assert list(line.get_ydata()) == [mean["estimate"]]
    [seg] = segments.get_segments()
    assert (seg[0][1], seg[1][1]) == pytest.approx((mean["ci95_low"], mean["ci95_high"]), rel=1e-12)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["mean"]
    target = tmp_path / "mean.png"
    code, _, err = cli_run("estimate", str(purchase["id"]), "--plot", str(target))
    assert code == 0, err
    assert png_size(target) == (640, 480)


def test_an_estimate_with_nothing_to_plot_is_refused():
    with pytest.raises(NothingToPlot):
        estimate_figure({"purchase": 1, "kind": "graph", "frequencies": [], "mean": None, "bits": []})


def test_without_matplotlib_plot_says_how_to_install_it_and_exits_2(cli_run, categorical, client_for, buyer,
                                                                    tmp_path, monkeypatch):
    purchase = client_for(buyer).buy(attribute=categorical.id, epsilon="0.5")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it raises ImportError
    monkeypatch.delitem(sys.modules, "ldpmarket_client.plot", raising=False)
    monkeypatch.delattr(ldpmarket_client, "plot", raising=False)
    target = tmp_path / "estimate.png"
    code, out, err = cli_run("estimate", str(purchase["id"]), "--plot", str(target))
    assert code == 2 and out == ""
    assert "pip install 'ldpmarket-client[plot]'" in err and not target.exists()


def test_estimate_method_reaches_the_api_and_a_consistent_plot_has_no_error_bars(cli_run, categorical, client_for,
                                                                                  buyer, tmp_path):
    """``--method ibu`` (docs/mechanisms-reference.md#consistent-estimates): the client asks for it, the JSON says
    so, and the plot draws the consistent frequencies without intervals (they have none)."""
    client = client_for(buyer)
    purchase = client.buy(attribute=categorical.id, epsilon="0.5")
    target = tmp_path / "ibu.png"
    code, out, err = cli_run("estimate", str(purchase["id"]), "--method", "ibu", "--plot", str(target))
    assert code == 0, err
    estimate = json.loads(out)
    assert estimate["method"] == "ibu" and estimate == client.estimate(purchase["id"], method="ibu")
    values = [f["estimate"] for f in estimate["frequencies"]]
    assert min(values) >= 0 and sum(values) == pytest.approx(1.0)
    fig = estimate_figure(estimate)
    [ax] = fig.axes
    [bars] = ax.containers  # no error-bar container
    assert [p.get_height() for p in bars.patches] == pytest.approx(values)
    assert png_size(target) == (640, 480)
    assert client.estimate(purchase["id"])["method"] == "unbiased"
