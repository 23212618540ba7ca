"""Routes of the owner portal, mounted at /portal/ with the namespace ``portal``."""
from django.urls import path

from . import views

app_name = "portal"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("signup/", views.signup, name="signup"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", views.SignOutView.as_view(), name="logout"),
    path("contribute/", views.contribute_choose, name="contribute"),
    path("contribute/<int:attribute_id>/", views.contribute, name="contribute-attribute"),
    path("values/<int:value_id>/", views.value_detail, name="value"),
    path("values/<int:value_id>/ceiling/", views.ceiling, name="ceiling"),
    path("values/<int:value_id>/receipts/", views.value_receipts, name="value-receipts"),
    path("values/<int:value_id>/schedule/", views.schedule, name="schedule"),
    path("values/<int:value_id>/pause/", views.pause, name="pause"),
    path("values/<int:value_id>/resume/", views.resume, name="resume"),
    path("values/<int:value_id>/delete-raw/", views.delete_raw, name="delete-raw"),
    path("values/<int:value_id>/sensitivity-tag/", views.pum_tag, name="pum-tag"),
    path("releases/", views.releases, name="releases"),
    path("export/", views.export, name="export"),
    path("money/", views.money_page, name="money"),
    path("money/payout/", views.payout, name="payout"),
]
