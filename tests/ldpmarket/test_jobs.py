"""Services send Celery tasks by name (``ldpmarket.jobs``, docs/architecture.md#layers): in a fresh process every
task they name is registered as soon as Django is set up, so the embedded set-up (eager Celery) runs it
in-process instead of handing it to a broker nobody reads."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ldpmarket import jobs

ROOT = Path(__file__).resolve().parents[2]
NAMES = [jobs.EXTEND_CHAINS, jobs.RUN_PURCHASE]


def test_every_task_a_service_sends_is_registered_in_a_fresh_process():
    script = ("import django; django.setup()\n"
              "from celery import signature\n"
              f"for name in {NAMES!r}:\n"
              "    assert signature(name).type.name == name, name\n"
              "print('registered')\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"DJANGO_SETTINGS_MODULE": "ldpmarket.settings_test", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "registered" in run.stdout, run.stderr[-3000:]
