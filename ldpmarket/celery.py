"""The Celery application (cookiecutter-django wiring): settings come from Django's CELERY_* names."""
import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_init

from . import metrics, tasklog

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ldpmarket.settings")

app = Celery("ldpmarket")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Logs (ldpmarket.tasklog, docs/operations.md#logs): Django's LOGGING in workers and beat; a task's lines carry its
# id and the request id of the request that sent it.
tasklog.install(app)

# Metrics (docs/operations.md#metrics): every task's run time, in the process that runs it; a worker serves its
# pool's metrics on LDP_WORKER_METRICS_PORT.
task_prerun.connect(metrics.task_started, weak=False)
task_postrun.connect(metrics.task_finished, weak=False)
worker_init.connect(metrics.worker_started, weak=False)
