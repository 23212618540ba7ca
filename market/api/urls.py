"""Routes of the buyer API, mounted at /api/v1/ with the namespace ``api``."""
from django.urls import path
from rest_framework.routers import DefaultRouter

import ldpmarket.fields  # noqa: F401 (registers the path converter ascii_id)
from accounts.api import ObtainTokenView, RevokeAllTokensView, RevokeTokenView
from accounts.ledger_api import LedgerCheckpointList, LedgerConsistencyView, LedgerPublicKeyView
from accounts.money_api import AccountView, FeeStatementView, StatementView, TopUpView

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
    path("auth/token/", ObtainTokenView.as_view(), name="token"),
    path("auth/logout/", RevokeTokenView.as_view(), name="token-revoke"),
    path("auth/logout-all/", RevokeAllTokensView.as_view(), name="token-revoke-all"),
    path("quotes/", QuoteView.as_view(), name="quote"),
    path("account/", AccountView.as_view(), name="account"),
    path("account/statement/", StatementView.as_view(), name="account-statement"),
    path("staff/topups/", TopUpView.as_view(), name="staff-topups"),
    path("staff/fees/", FeeStatementView.as_view(), name="staff-fees"),
    path("ledger/public-key/", LedgerPublicKeyView.as_view(), name="ledger-public-key"),
    path("ledger/checkpoints/", LedgerCheckpointList.as_view(), name="ledger-checkpoints"),
    path("ledger/consistency/", LedgerConsistencyView.as_view(), name="ledger-consistency"),
    path("owner/receipts/", OwnerReceiptsView.as_view(), name="owner-receipts"),
    *router.urls,
]
