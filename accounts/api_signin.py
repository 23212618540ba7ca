"""Sign-in and sign-out of REST framework's browsable API (``/api/auth/login/``, ``/api/auth/logout/``).

They take the URL names of ``rest_framework.urls`` (namespace ``rest_framework``), so the browsable API
shows its "Sign in" link, but use a sign-in form that says when the lockout refused a sign-in
(:class:`accounts.lockout.LockoutFormMixin`); the lockout itself applies as to every ``authenticate()``
with a request (``AUTHENTICATION_BACKENDS``).  The session this creates authenticates API requests through
REST framework's ``SessionAuthentication``, which enforces CSRF on every unsafe request
(docs/security.md, "Credentials and sign-in").
"""
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.urls import path, reverse

from .lockout import LockoutFormMixin


class APISignInForm(LockoutFormMixin, AuthenticationForm):
    """Django's sign-in form, saying when the lockout refused the sign-in."""


class APISignInView(LoginView):
    template_name = "api_auth/login.html"
    authentication_form = APISignInForm

    def get_default_redirect_url(self):
        return self.get_redirect_url() or reverse("api:root")


class APISignOutView(LogoutView):
    def get_default_redirect_url(self):
        return self.get_redirect_url() or reverse("api:root")


app_name = "rest_framework"
urlpatterns = [
    path("login/", APISignInView.as_view(), name="login"),
    path("logout/", APISignOutView.as_view(), name="logout"),
]
