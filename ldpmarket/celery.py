"""The Celery application (cookiecutter-django wiring): settings come from Django's CELERY_* names."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ldpmarket.settings")

app = Celery("ldpmarket")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
