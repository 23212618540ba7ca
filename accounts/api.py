"""POST /api/v1/auth/token/: username and password -> a REST framework token (spec service.md section 4)."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.parsers import FormParser

from ldpmarket.api import AnonThrottle, DecimalJSONParser
from market.api.serializers import ProblemSerializer, TokenSerializer

PROBLEM = "application/problem+json"


class ObtainTokenView(ObtainAuthToken):
    """Exchange a username and password for an API token (send it as ``Authorization: Token <token>``)."""

    serializer_class = AuthTokenSerializer
    parser_classes = (DecimalJSONParser, FormParser)
    throttle_classes = (AnonThrottle,)

    @extend_schema(
        summary="Get an API token", request=AuthTokenSerializer, auth=[],
        responses={200: TokenSerializer,
                   (400, PROBLEM): OpenApiResponse(ProblemSerializer, description="Wrong username or password."),
                   (429, PROBLEM): OpenApiResponse(ProblemSerializer, description="Too many attempts.")})
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)
