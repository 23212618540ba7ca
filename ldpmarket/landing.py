"""``/``: the landing page, a server-rendered template that says what the service is, who it is for and how each
kind of user starts (owners and buyers sign up in their portals, operators read docs/operations.md), and links its
entry points (the owner and buyer portals, the buyer API and its documentation, the console).  No script, no
inline style (ldpmarket.csp, docs/security.md "Deployment")."""
from django.views.generic import TemplateView


class LandingView(TemplateView):
    template_name = "landing/index.html"
