from django.apps import AppConfig


class BuyerPortalConfig(AppConfig):
    name = "buyer_portal"
    verbose_name = "Buyer portal"
