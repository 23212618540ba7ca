"""Test URLconf: the admin console and the audit API, as the project mounts them."""
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/audit/", include("audit.api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
]
