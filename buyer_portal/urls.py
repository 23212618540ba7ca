"""Routes of the buyer portal, mounted at /buyer/ with the namespace ``buyer`` (docs/buyers.md)."""
from django.urls import path

import ldpmarket.fields  # noqa: F401 - registers the <ascii_id:...> path converter

from . import views

app_name = "buyer"

urlpatterns = [
    path("", views.home, name="home"),
    path("signup/", views.signup, name="signup"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", views.SignOutView.as_view(), name="logout"),
    path("catalog/", views.catalog, name="catalog"),
    path("quote/", views.quote, name="quote"),
    path("buy/", views.buy, name="buy"),
    path("purchases/", views.purchases, name="purchases"),
    path("purchases/<ascii_id:purchase_id>/", views.purchase_detail, name="purchase"),
    path("account/", views.account, name="account"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/revoke/", views.token_revoke_view, name="token-revoke"),
]
