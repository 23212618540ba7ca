"""The embedded set-up (``make run``: Celery eager, no beat) makes the ledger's checkpoints itself: every transaction
that writes ledger entries schedules one checkpoint on commit (``LDP_CHECKPOINT_ON_COMMIT``, on by default exactly
when tasks run in-process; docs/operations.md#checkpoints-in-the-embedded-set-up).  A deployment with a broker leaves
checkpoints to beat: nothing extra is scheduled."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import transaction

from accounts.ledger import hashchain as ledger
from accounts.ledger.checkpoints import blocks_awaiting_checkpoint
from accounts.models import BudgetAccount, LedgerCheckpoint, LedgerCheckpointLeaf, LedgerEntry
from accounts.services import event_rows
from market.models import Purchase
from tests.market.api.conftest import buy

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]


def checkpoint_callbacks(callbacks) -> list:
    return [c for c in callbacks if getattr(c, "ldp_task", (None,))[0] == "market.tasks.make_ledger_checkpoint"]


def test_the_embedded_setup_checkpoints_a_purchase_without_the_command(settings, api, categorical,
                                                                       django_capture_on_commit_callbacks):
    settings.LDP_CHECKPOINT_ON_COMMIT = True
    with django_capture_on_commit_callbacks(execute=True):
        response = buy(api, categorical.id, "1")
    assert response.status_code == 201, response.content[:500]
    purchase = Purchase.objects.get(id=response.json()["id"])
    blocks = set(LedgerEntry.objects.filter(purchase=purchase).values_list("block_id", flat=True))
    assert blocks, "the purchase wrote no ledger entries"
    covered = set(LedgerCheckpointLeaf.objects.filter(block_id__in=blocks).values_list("block_id", flat=True))
    assert covered == blocks, "the purchase's ledger blocks are not in a checkpoint"
    assert blocks_awaiting_checkpoint() == 0 and LedgerCheckpoint.objects.exists()


def test_a_transaction_writing_several_blocks_schedules_one_checkpoint(settings, categorical,
                                                                       django_capture_on_commit_callbacks):
    settings.LDP_CHECKPOINT_ON_COMMIT = True
    budgets = list(BudgetAccount.objects.filter(value__attribute=categorical).order_by("value_id")[:2])
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with transaction.atomic():  # two blocks (two ledger appends) in one transaction
            for budget in budgets:
                ledger.append(event_rows([budget], LedgerEntry.Kind.PAUSE), shard=categorical.id)
    assert len(checkpoint_callbacks(callbacks)) == 1


def test_the_deployed_setup_schedules_no_checkpoint_on_commit(settings, api, categorical,
                                                              django_capture_on_commit_callbacks):
    settings.LDP_CHECKPOINT_ON_COMMIT = False
    before = LedgerCheckpoint.objects.count()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = buy(api, categorical.id, "1")
    assert response.status_code == 201
    assert not checkpoint_callbacks(callbacks)
    assert LedgerCheckpoint.objects.count() == before and blocks_awaiting_checkpoint() > 0


def setting_under(**environment) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_TASK_ALWAYS_EAGER", "LDP_CHECKPOINT_ON_COMMIT",
                        "DJANGO_SETTINGS_MODULE")}
    env.update(DJANGO_DEBUG="1", **environment)
    done = subprocess.run([sys.executable, "-c", "import ldpmarket.settings as s; print(s.LDP_CHECKPOINT_ON_COMMIT)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_setting_is_on_in_the_embedded_setup_only():
    assert setting_under() == "True"  # make run: no broker, tasks in-process
    assert setting_under(REDIS_URL="redis://127.0.0.1:6379/15") == "False"  # docker compose: workers and beat
    assert setting_under(REDIS_URL="redis://127.0.0.1:6379/15", LDP_CHECKPOINT_ON_COMMIT="1") == "True"


def test_a_burst_of_transactions_makes_one_checkpoint(settings, categorical, django_capture_on_commit_callbacks):
    """``ldpmarket.jobs.coalesced`` (``load_demo`` runs in one): many committed transactions, one checkpoint at the
    end covering all their blocks."""
    from ldpmarket import jobs

    settings.LDP_CHECKPOINT_ON_COMMIT = True
    budgets = list(BudgetAccount.objects.filter(value__attribute=categorical).order_by("value_id")[:3])
    before = LedgerCheckpoint.objects.count()
    with jobs.coalesced():
        for budget in budgets:  # three transactions, each committing a block
            with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
                ledger.append(event_rows([budget], LedgerEntry.Kind.PAUSE), shard=categorical.id)
        assert LedgerCheckpoint.objects.count() == before  # held until the burst ends
    assert LedgerCheckpoint.objects.count() == before + 1 and blocks_awaiting_checkpoint() == 0
