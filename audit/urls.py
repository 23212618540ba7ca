"""Audit API routes; the project mounts them with ``path("api/v1/audit/", include("audit.urls"))``."""
from django.urls import path

from .api import LedgerEntryList, ReceiptsView

app_name = "audit"
urlpatterns = [
    path("ledger/", LedgerEntryList.as_view(), name="ledger"),
    path("receipts/", ReceiptsView.as_view(), name="receipts"),
]
