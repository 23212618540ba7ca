"""Routes of the buyer API, mounted at /api/v1/ with the namespace ``api``."""
from django.urls import include, path
from rest_framework.routers import DefaultRouter

import ldpmarket.fields  # noqa: F401 (registers the path converter ascii_id)

from .owner import OwnerReceiptsView, OwnerValueViewSet
from .root import ApiRootView
from .views import DatasetViewSet, PurchaseViewSet, QuoteView, SurveyViewSet

app_name = "api"

# path() routes: each detail route takes its id as <ascii_id:pk> (the viewsets' lookup_value_converter), so an id
# that is not ASCII digits in bigint range matches no route (a 404 problem) and never reaches a view.
router = DefaultRouter(trailing_slash=True, use_regex_path=False)
router.include_root_view = False
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("purchases", PurchaseViewSet, basename="purchase")
router.register("surveys", SurveyViewSet, basename="survey")
router.register("owner/values", OwnerValueViewSet, basename="owner-value")

urlpatterns = [
    path("", ApiRootView.as_view(), name="root"),
    # The sign-in, money and ledger APIs: included by name, so that no interface imports another
    # (docs/architecture.md#layers).
    path("", include("accounts.api")),
    path("quotes/", QuoteView.as_view(), name="quote"),
    path("", include("accounts.money.api")),
    path("", include("accounts.ledger.api")),
    path("owner/receipts/", OwnerReceiptsView.as_view(), name="owner-receipts"),
    *router.urls,
]
