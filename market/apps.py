from django.apps import AppConfig


class MarketConfig(AppConfig):
    name = "market"
    verbose_name = "Market"

    def ready(self):
        # Django requires app modules be imported once the registry is ready: importing the tasks registers them
        # with Celery by name in every process (web, worker, commands), so ldpmarket.jobs can send them by name
        # without a service importing them (docs/architecture.md#layers).
        from . import tasks  # noqa: F401
