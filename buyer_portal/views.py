"""Views of the buyer portal (docs/buyers.md): thin — validate with a form, call one service, render.

Every page but sign-up and sign-in requires a signed-in buyer (others: the sign-in redirect, or a 403 page for
owners, auditors and staff), is never cached, and reads only the buyer's own purchases and money
(``market.purchases.buyer_rows``; another buyer's purchase is a 404).  Purchases go through the one purchase pipeline
(``market.purchases.pipeline.purchase_request``) under an idempotency key carried by the Buy form, so a double
submit buys once.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from functools import wraps

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.views import LoginView, LogoutView, redirect_to_login
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts import roles
from accounts.money.format import format_money
from accounts.services import buyer_signup
from accounts.tokens import token_create, token_revoke, tokens_of
from ldpmarket.problems import (
    DomainError,
    EstimateMethodUnavailable,
    ParameterError,
    PurchaseInterrupted,
    QuoteInvalid,
    SignUpRefused,
    TokenRefused,
)
from market import selectors
from market.models import Attribute, Purchase
from market.purchases import buyer_rows as reads
from market.purchases import estimates, oneshot_specs, pipeline, quotes

from . import charts
from .forms import BuyerSignInForm, BuyerSignUpForm, BuyForm, QuoteForm, RevokeForm, TokenForm, plain_epsilon

#: The service's field names (``SignUpRefused.errors``) as the form's.
SIGNUP_FIELDS = {"password": "password1"}

AWAITING_APPROVAL = ("Awaiting approval: you can browse and quote; an operator approves your organisation before "
                     "you can buy.")


def buyer_required(view):
    """Signed-in buyers only: others are sent to sign in, non-buyers get a 403 page. Responses are never cached."""

    @wraps(view)
    @never_cache
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), login_url=reverse("buyer:login"))
        if not roles.is_buyer(request.user):
            return render(request, "buyer_portal/forbidden.html", status=403)
        return view(request, *args, **kwargs)

    return wrapped


def _approved(user) -> bool:
    return roles.buyer_is_approved(user)


# ---------------------------------------------------------------------------------------------- sign in/out

class SignInView(LoginView):
    template_name = "buyer_portal/login.html"
    authentication_form = BuyerSignInForm
    next_page = reverse_lazy("buyer:home")


class SignOutView(LogoutView):
    next_page = reverse_lazy("buyer:login")

    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        messages.info(request, "You are signed out.")
        return response


@never_cache
@require_http_methods(["GET", "POST"])
def signup(request):
    form = BuyerSignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            user = buyer_signup(username=data["username"], name=data["name"], organisation=data["organisation"],
                                email=data["email"], password=data["password1"])
        except SignUpRefused as exc:
            for name, errors in exc.errors.items():
                field = SIGNUP_FIELDS.get(name, name)
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome, {user.username}! Your buyer account is ready.")
            return redirect("buyer:home")
    return render(request, "buyer_portal/signup.html", {"form": form})


# ------------------------------------------------------------------------------------------------------ home

@buyer_required
@require_http_methods(["GET"])
def home(request):
    buyer = request.user
    purchases = reads.purchases_of(buyer)
    return render(request, "buyer_portal/home.html", {
        "approved": _approved(buyer), "awaiting": AWAITING_APPROVAL, "balance": reads.credit(buyer),
        "purchase_count": purchases.count(), "recent": list(purchases[:5])})


# --------------------------------------------------------------------------------------------------- catalog

@buyer_required
@require_http_methods(["GET"])
def catalog(request):
    return render(request, "buyer_portal/catalog.html", {
        "datasets": reads.catalog(), "approved": _approved(request.user), "awaiting": AWAITING_APPROVAL})


# ----------------------------------------------------------------------------------------------------- quote

def _affordable(balance: Decimal, q) -> dict:
    """What the balance buys of quote ``q``: all of it, or how many values at its price per value, and the
    top-up that would buy all."""
    if balance >= q.price:
        return {"all": True, "values": q.included, "topup": Decimal(0)}
    per = q.price_per_value
    n = q.included if per <= 0 else min(q.included, int((balance / per).to_integral_value(rounding=ROUND_FLOOR)))
    return {"all": False, "values": max(n, 0), "topup": q.price - balance}


@buyer_required
@require_http_methods(["GET"])
def quote(request):
    if not request.GET:  # the quote forms are in the catalog
        return redirect("buyer:catalog")
    form = QuoteForm(request.GET)
    context = {"form": form, "approved": _approved(request.user), "awaiting": AWAITING_APPROVAL}
    attribute = reads.attribute_or_none(form.cleaned_data["attribute"]) if form.is_valid() else None
    if form.is_valid() and attribute is None:
        form.add_error("attribute", "There is no such attribute: choose one in the catalog.")
    if not form.is_valid():
        return render(request, "buyer_portal/quote.html", context, status=400)
    epsilon = form.cleaned_data["epsilon"]
    context["attribute"] = attribute
    try:
        q = _quote(request.user, attribute, epsilon)
    except ParameterError as exc:  # a mechanism that takes more than an epsilon
        form.add_error("epsilon", f"{exc} This portal buys at one ε: buy this attribute through the API or the "
                                  f"Python client.")
        return render(request, "buyer_portal/quote.html", context, status=400)
    except DomainError as exc:
        form.add_error("epsilon", str(exc))
        return render(request, "buyer_portal/quote.html", context, status=400)
    balance = reads.credit(request.user)
    context.update(q=q, balance=balance, epsilon=plain_epsilon(epsilon),
                   guarantee=_guarantee(q), afford=_affordable(balance, q),
                   nothing=pipeline.nothing_to_sell(q) if q.included == 0 else None,
                   buy=BuyForm(initial={"quote": q.token, "idempotency_key": uuid.uuid4().hex}))
    return render(request, "buyer_portal/quote.html", context)


def _quote(buyer, attribute: Attribute, epsilon: Decimal):
    """The signed quote of a purchase of ``attribute`` at ``epsilon`` (a one-shot attribute: its own mechanism
    with the epsilon; its other parameters, if it needs any, through the API)."""
    policy = pipeline.policy_or_refuse(attribute)
    spec = oneshot_specs.parse_spec(attribute, epsilon=epsilon)
    if spec is None:
        return quotes.quote_issue(buyer_id=buyer.id, attribute=attribute, epsilon=epsilon, cohort=None, policy=policy)
    return quotes.oneshot_quote_issue(buyer_id=buyer.id, attribute=attribute, spec=spec, cohort=None, policy=policy)


def _guarantee(q) -> str:
    if q.mechanism == Purchase.Mechanism.GRADUAL_RR:
        return f"ε-LDP at ε {plain_epsilon(q.epsilon)}: each value is released as a randomized response"
    label = oneshot_specs.guarantee_label(q.guarantee)
    charged = q.charged_epsilon if q.charged_epsilon is not None else q.epsilon
    return f"{label} at ε {plain_epsilon(charged)}" if label else f"ε {plain_epsilon(charged)}"


@buyer_required
@require_POST
def buy(request):
    form = BuyForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(m for errs in form.errors.values() for m in errs))
        return redirect("buyer:catalog")
    key = form.cleaned_data["idempotency_key"]
    try:
        q = quotes.quote_open(form.cleaned_data["quote"], buyer_id=request.user.id)
    except QuoteInvalid as exc:
        try:  # an expired quote still identifies a purchase already made from it (a replay of the button)
            q = quotes.quote_open(form.cleaned_data["quote"], buyer_id=request.user.id, check_expiry=False)
        except QuoteInvalid:
            q = None
        if q is None or not reads.purchase_made_with(request.user, key):
            messages.error(request, str(exc))
            return redirect("buyer:catalog")
    attribute = reads.attribute_or_none(q["attribute"])
    if attribute is None:
        messages.error(request, "The quoted attribute no longer exists.")
        return redirect("buyer:catalog")
    back = f"{reverse('buyer:quote')}?{urlencode({'attribute': attribute.id, 'epsilon': plain_epsilon(q['epsilon'])})}"
    try:
        spec = oneshot_specs.parse_spec(attribute, epsilon=q["epsilon"])
        outcome = pipeline.purchase_request(
            buyer=request.user, idempotency_key=key,
            request=pipeline.PurchaseRequest(attribute=attribute, epsilon=q["epsilon"], cohort=q["cohort"], spec=spec,
                                             quoted_price=q["price"]))
    except PurchaseInterrupted as exc:
        messages.error(request, str(exc))
        return redirect("buyer:purchase", purchase_id=exc.purchase_id)
    except DomainError as exc:
        messages.error(request, str(exc))
        return redirect(back)
    p = outcome.purchase
    if outcome.running:
        messages.info(request, f"Purchase {p.id} is large: it runs in the background. This page shows its progress.")
    elif outcome.created:
        messages.success(request, f"Purchase {p.id} completed: {p.included} values for {format_money(p.price)}.")
    else:
        messages.info(request, f"You already made this purchase ({p.id}): it was not bought again.")
    return redirect("buyer:purchase", purchase_id=p.id)


# ------------------------------------------------------------------------------------------------- purchases

@buyer_required
@require_http_methods(["GET"])
def purchases(request):
    page = Paginator(reads.purchases_of(request.user), reads.PURCHASES_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "buyer_portal/purchases.html", {"page": page, "purchases": page.object_list})


@buyer_required
@require_http_methods(["GET"])
def purchase_detail(request, purchase_id: int):
    p = reads.purchase_of(request.user, purchase_id)
    if p is None:
        raise Http404("No such purchase.")
    context = {"p": p, "progress": reads.progress(p), "estimate": None, "excluded": selectors.excluded_counts(p),
               "api_url": reverse("api:purchase-detail", kwargs={"pk": p.id})}
    method = request.GET.get("method", "unbiased")
    if method not in ESTIMATE_METHODS:
        return HttpResponseBadRequest(f"Unknown estimate method {method[:40]!r}: give "
                                      f"{', '.join(ESTIMATE_METHODS)} (docs/buyers.md).", content_type="text/plain")
    if p.status == Purchase.Status.COMPLETED and p.included > 0:
        try:
            result = estimates.purchase_estimate(p, method=method)
        except EstimateMethodUnavailable as exc:
            messages.info(request, str(exc))
            method, result = "unbiased", estimates.purchase_estimate(p)
        context["estimate"] = result
        context["method"] = method
        context["methods"] = [(m, ESTIMATE_METHODS[m], f"?method={m}") for m in ESTIMATE_METHODS]
        context.update(_charts(p, result))
        context["csv_url"] = f"{reverse('api:purchase-outputs', kwargs={'pk': p.id})}?format=csv"
        context["json_url"] = (f"{reverse('api:purchase-estimate', kwargs={'pk': p.id})}?format=json"
                               + ("" if method == "unbiased" else f"&method={method}"))
    return render(request, "buyer_portal/purchase.html", context)


#: The estimates a purchase's page offers (docs/mechanisms-reference.md#consistent-estimates), as the API names them.
ESTIMATE_METHODS = {"unbiased": "Unbiased, with 95% intervals", "norm_sub": "Consistent: Norm-Sub",
                    "ibu": "Consistent: maximum likelihood (IBU)"}


def _charts(p: Purchase, result: dict) -> dict:
    out = {}
    attribute = p.attribute
    freqs = result.get("frequencies") or []
    if freqs and attribute.kind != Attribute.Kind.NUMERIC:
        out["frequency_chart"] = charts.frequencies_svg(freqs, uid=f"freq-{p.id}",
                                                        title=f"Estimated frequencies of {attribute.name}")
    bits = result.get("bits") or []
    if bits:
        rows = [{**b, "label": f"bit {b['bit']}"} for b in bits]
        out["frequency_chart"] = charts.frequencies_svg(rows, uid=f"bits-{p.id}",
                                                        title=f"Estimated Bloom-bit frequencies of {attribute.name}")
    mean = result.get("mean")
    if mean and attribute.kind == Attribute.Kind.NUMERIC:
        out["mean_chart"] = charts.mean_svg(mean, low=float(attribute.low), high=float(attribute.high),
                                            uid=f"mean-{p.id}", title=f"Estimated mean of {attribute.name}")
    return out


# --------------------------------------------------------------------------------------------------- account

@buyer_required
@require_http_methods(["GET"])
def account(request):
    page = Paginator(reads.statement(request.user), reads.STATEMENT_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "buyer_portal/account.html", {"balance": reads.credit(request.user), "page": page,
                                                         "entries": page.object_list,
                                                         "approved": _approved(request.user)})


# ---------------------------------------------------------------------------------------------------- tokens

#: The session key holding a token just created until the page after the redirect shows it (once).
NEW_TOKEN = "buyer_portal.new_token"


@buyer_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """Create (POST, then a redirect: a reload never makes a second token), list and revoke API tokens.  A new
    token's text waits in the session for the next page, which shows it once and forgets it."""
    form = TokenForm(request.POST or None, auto_id="token_%s")
    if request.method == "POST" and form.is_valid():
        try:
            row, text = token_create(user=request.user, name=form.cleaned_data["name"], expires_in=form.expires_in)
        except TokenRefused as exc:
            form.add_error("name" if exc.field == "name" else "lifetime", str(exc))
        else:
            request.session[NEW_TOKEN] = {"name": form.cleaned_data["name"], "text": text,
                                          "expiry": row.expiry.isoformat() if row.expiry else None}
            return redirect("buyer:tokens")
    created = request.session.pop(NEW_TOKEN, None) if request.method == "GET" else None
    if created and created["expiry"]:
        created["expiry"] = datetime.fromisoformat(created["expiry"])
    return render(request, "buyer_portal/tokens.html", {"form": form, "created": created,
                                                        "tokens": tokens_of(request.user)},
                  status=400 if form.errors else 200)


@buyer_required
@require_POST
def token_revoke_view(request):
    form = RevokeForm(request.POST)
    if not form.is_valid():
        raise Http404("No such token.")
    try:
        token_revoke(user=request.user, token_key=form.cleaned_data["token_key"])
    except DomainError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "The token is revoked: programs using it are refused from now on.")
    return redirect("buyer:tokens")
