from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit app (``audit/__init__.py``): models stay in ``accounts`` and ``market``; this app adds none."""

    name = "audit"
    verbose_name = "Audit"
