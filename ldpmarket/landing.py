"""``/``: the landing page, a server-rendered template that says what the service is and links its entry
points (the owner portal, the buyer API and its documentation, the console).  No script, no inline style
(ldpmarket.csp, docs/security.md "Deployment")."""
from django.views.generic import TemplateView


class LandingView(TemplateView):
    template_name = "landing/index.html"
