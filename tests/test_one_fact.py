"""Facts that must stay in one place (issue 28 item 6): where a copy cannot be avoided (the SDK and the browser run
without the server's code), a test pins it to the one definition."""
from __future__ import annotations

import re
from pathlib import Path

from ldpmarket_client import sampler as sdk_sampler
from mechanisms import exactness

ROOT = Path(__file__).resolve().parent.parent


def test_the_sampler_epsilon_limit_is_one_number_in_three_languages():
    """``SAMPLER_EPS_MAX``: the server's sampler (``mechanisms.exactness``), the owner SDK (runs on the owner's
    device without the server) and the browser's sampler (JavaScript) must refuse the same epsilons."""
    js = (ROOT / "portal/static/portal/owner_sampler.js").read_text()
    found = re.findall(r"SAMPLER_EPS_MAX\s*=\s*(\d+)n?\s*;", js)
    assert found, "owner_sampler.js no longer declares SAMPLER_EPS_MAX"
    assert exactness.SAMPLER_EPS_MAX == sdk_sampler.SAMPLER_EPS_MAX == int(found[0])


def test_the_money_unit_and_the_cent_have_one_definition():
    """One money unit (1/10000) and one cent (0.01): ``accounts.money.units``; no other module defines them."""
    pattern = re.compile(r"^(UNITS|UNIT|CENT|MONEY_UNITS)\s*=", re.M)
    tops = ("accounts", "market", "audit", "portal", "buyer_portal", "ldpmarket")
    defined = sorted(str(p.relative_to(ROOT)) for top in tops
                     for p in (ROOT / top).rglob("*.py") if "migrations" not in p.parts
                     and pattern.search(p.read_text()))
    assert defined == ["accounts/money/units.py"], defined


def test_only_the_money_package_writes_money_rows():
    """No module under ``market/`` touches ``MoneyEntry`` or ``MoneyAccount`` rows itself (docs/money.md): it calls
    the money package's services."""
    writes = re.compile(r"\b(MoneyEntry|MoneyAccount)\b")
    touching = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "market").rglob("*.py")
                      if "migrations" not in p.parts and writes.search(p.read_text()))
    assert touching == [], touching
