"""The monitor that cosigns meaning (client/ldpmarket_client/monitor.py, docs/receipts.md#the-monitor): it follows the
tiled log and the auditors' block entries, recomputes every block's entries root, replays the budget rules, and
cosigns only a log that keeps them.  Here through Django's test client; tests/client/test_witnesses_live.py runs it
against a live service."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
from django.db import transaction
from django.http import HttpResponse
from django.test import Client
from knox.models import AuthToken

from accounts.ledger import hashchain, notes
from accounts.ledger import signing as ledger_key
from accounts.ledger.checkpoints import checkpoint_make
from accounts.models import BudgetAccount, LedgerEntry
from accounts.services import event_rows
from ldpmarket_client.monitor import Monitor, Replay
from ldpmarket_client.receipts import KINDS
from ldpmarket_client.tlog.checkpoint import parse_checkpoint
from ldpmarket_client.tlog.note import COSIGNATURE_V1, Signer, open_note, parse_vkey
from ldpmarket_client.witness import WitnessError
from tests.audit.conftest import buy, sql, tampering
from tests.factories import UrrAttributeFactory
from tests.market.oneshot_helpers import POLICY, run, values


class DjangoSession:
    """What the monitor needs of ``requests.Session``, over Django's test client (which, unlike requests, does not
    undo a gzip Content-Encoding)."""

    def __init__(self):
        self.client = Client()

    def get(self, url, params=None, headers=None, timeout=None):
        response = self.client.get(url, data=params or {}, headers=headers or {})
        if response.get("Content-Encoding") == "gzip":
            response.content = gzip.decompress(response.content)
        response.text = response.content.decode("utf-8", errors="replace")
        return response


@pytest.fixture
def monitor(auditor, tmp_path):
    _, token = AuthToken.objects.create(user=auditor)
    signer = Signer.generate("auditor.test/ldpmarket-budget-rules", COSIGNATURE_V1)
    log_key = parse_vkey(ledger_key.vkey())
    return Monitor("http://testserver", token, [log_key], signer, tmp_path / "monitor.sqlite3", session=DjangoSession())


def entries_up_to_latest() -> int:
    return LedgerEntry.objects.count()


def test_a_clean_ledger_is_cosigned_and_followed_as_it_grows(market, monitor):
    checkpoint_make()
    first = monitor.follow()
    assert first.violation is None, first.violation
    assert first.checked == entries_up_to_latest() and first.blocks >= 5
    note = open_note(first.cosigned, [monitor.signer.verifier, parse_vkey(ledger_key.vkey())])
    assert {v.sig_type for v, _, _ in note.verified} == {1, COSIGNATURE_V1}
    # one-shot releases and a chain purchase later: only the new leaves are checked
    rng = np.random.default_rng(3)
    urr = UrrAttributeFactory(price_policy=POLICY)
    values(urr, ["a", "b", "c"] * 3, ceiling="3")
    run(market.buyer, urr, epsilon="1", rng=rng)
    run(market.buyer, urr, epsilon="0.5", rng=rng)
    buy(market.buyer, market.attribute, "1.5", rng)
    before = entries_up_to_latest()
    checkpoint_make()
    second = monitor.follow()
    assert second.violation is None, second.violation
    assert second.checked == entries_up_to_latest() - first.checked and second.checked > 0
    assert monitor.state()[0] == second.size > first.size
    assert entries_up_to_latest() == before


def test_an_entry_edited_after_its_checkpoint_is_named_and_not_cosigned(market, monitor):
    checkpoint_make()
    with tampering():
        changed = sql("UPDATE accounts_ledgerevent SET ceiling = ceiling + 1 WHERE id = (SELECT MIN(id) FROM "
                      "accounts_ledgerevent)")
    assert changed == 1
    outcome = monitor.follow()
    assert outcome.cosigned is None
    assert "do not give the entries root the log states" in outcome.violation
    assert monitor.state()[0] == 0 and monitor.violations()[-1][1] == outcome.violation


def test_a_signed_block_that_breaks_a_budget_rule_is_named_and_not_cosigned(market, monitor):
    """An operator who writes the ledger around the services (hash chain and checkpoint intact): an event whose
    losses before are not the value's losses, then a checkpoint that signs it.  The audit's hash and root checks
    pass; the monitor's replay does not."""
    checkpoint_make()
    assert monitor.follow().violation is None
    budget = BudgetAccount.objects.select_related("value").filter(chain_loss__gt=0).first()
    rows = event_rows([budget], LedgerEntry.Kind.PAUSE)
    rows.records[0]["chain_before"] = rows.records[0]["chain_after"] = 0  # the value's chain loss forgotten
    with transaction.atomic():
        block = hashchain.append(rows, shard=budget.value.attribute_id)
    checkpoint_make()
    outcome = monitor.follow()
    assert outcome.cosigned is None
    entry_id = block.id * 2 ** 24
    assert f"entry {entry_id} (value {budget.value_id}, pause)" in outcome.violation
    assert "a budget event changes the losses" in outcome.violation or "a gap" in outcome.violation


@pytest.mark.parametrize("change, rule", [
    (dict(chain_after=3_000_000), "above the ceiling"),
    (dict(chain_before=100_000, chain_after=50_000), "goes down"),
    (dict(epsilon=700_000), "must set the chain loss"),
    (dict(oneshot_after=100_000), "must set the chain loss"),
])
def test_the_replay_names_each_rule(change, rule):
    fields = dict(value=5, kind=KINDS.index("chain_release"), epsilon=500_000, chain_before=0, chain_after=500_000,
                  oneshot_before=0, oneshot_after=0, ceiling=2_000_000)
    assert Replay({}).check(1, fields) is None
    assert rule in Replay({}).check(1, {**fields, **change})


def test_the_replay_follows_one_shot_sums_and_finds_gaps():
    oneshot = KINDS.index("oneshot_release")
    replay = Replay({})
    base = dict(value=9, kind=oneshot, epsilon=300_000, chain_before=0, chain_after=0, ceiling=1_000_000)
    assert replay.check(1, {**base, "oneshot_before": 0, "oneshot_after": 300_000}) is None
    assert replay.check(2, {**base, "oneshot_before": 300_000, "oneshot_after": 600_000}) is None
    assert "must add it" in Replay(dict(replay.losses)).check(3, {**base, "oneshot_before": 600_000,
                                                                 "oneshot_after": 800_000})
    gap = replay.check(3, {**base, "oneshot_before": 0, "oneshot_after": 300_000})
    assert "a gap" in gap and "entry 2 left" in gap


class Throttled(DjangoSession):
    """The auditors' API answering 429 (or the service down): not evidence of anything."""

    def get(self, url, params=None, headers=None, timeout=None):
        if "/api/v1/audit/" in url:
            response = HttpResponse(b'{"detail": "slow down"}', status=429)
            response.text = response.content.decode()
            return response
        return super().get(url, params, headers, timeout)


def test_a_log_that_does_not_answer_is_not_a_violation(market, monitor):
    checkpoint_make()
    monitor.session = monitor.reader.session = Throttled()
    outcome = monitor.follow()
    assert outcome.cosigned is None and outcome.violation is None and "HTTP 429" in outcome.unavailable
    assert monitor.violations() == [] and monitor.state()[0] == 0
    with pytest.raises(WitnessError) as refused:  # as a witness: 503, so the log tries again later
        monitor.vet(parse_checkpoint(open_note(notes.served_note(), [parse_vkey(ledger_key.vkey())]).text))
    assert refused.value.status == 503
    monitor.session = monitor.reader.session = DjangoSession()
    assert monitor.follow().cosigned is not None
