"""Views of the owner portal (docs/architecture.md#apps-and-models): thin — validate with a form, call one service,
render.

Every owner page requires a signed-in owner (others: sign-in redirect, or 403
for buyers, auditors and staff), is never cached, and reads only the owner's
own data through ``market.values.owner_rows`` (another owner's value is a 404).
"""
from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from functools import wraps

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.views import LoginView, LogoutView, redirect_to_login
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import IntegrityError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts import roles
from accounts.epsilon import EpsilonError
from accounts.ledger import receipts
from accounts.models import MoneyAccount
from accounts.money import selectors as money_selectors
from accounts.money import services as money
from accounts.services import BudgetError, budget_set_ceiling, budget_set_paused, budget_set_schedule
from ldpmarket.numbers import as_id
from ldpmarket.problems import NoSuchCheckpoint
from market.models import Value
from market.values import owner_rows
from market.values.inputs import InvalidValue
from market.values.services import value_create, value_delete_raw, value_set_pum_tag

from . import charts
from .forms import CeilingForm, ContributeForm, PayoutForm, PumTagForm, ScheduleForm, SignInForm, SignUpForm
from .services import user_signup


def owner_required(view):
    """Signed-in owners only: others are sent to sign in, non-owners get a 403 page. Responses are never cached."""

    @wraps(view)
    @never_cache
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not roles.can_use_portal(request.user):
            return render(request, "portal/forbidden.html", status=403)
        return view(request, *args, **kwargs)

    return wrapped


def owned_value(view):
    """Inside ``owner_required``: a ``value_id`` that is not the owner's is a 404, whatever the method."""

    @wraps(view)
    def wrapped(request, value_id: int, *args, **kwargs):
        if not owner_rows.owns_value(request.user, value_id):
            raise Http404("No such value.")
        return view(request, value_id, *args, **kwargs)

    return wrapped


NOT_FOR_SALE = ("Your raw value was deleted, so this value cannot be sold again: its ceiling, schedule and sales "
                "no longer apply.")


def for_sale_only(view):
    """Inside ``owned_value``: the budget actions of a value that can no longer be sold (a one-shot value whose
    raw value was deleted) go back to the value's page, saying why, and change nothing."""

    @wraps(view)
    def wrapped(request, value_id: int, *args, **kwargs):
        if not owner_rows.owner_value_for_sale(request.user, value_id):
            messages.info(request, NOT_FOR_SALE)
            return redirect("portal:value", value_id=value_id)
        return view(request, value_id, *args, **kwargs)

    return wrapped


def plain(message) -> str:
    """A service's message with its exact decimals written plainly (``0.500000`` -> ``0.5``)."""
    return re.sub(r"\d+\.\d+", lambda m: f"{Decimal(m.group()).normalize():f}", str(message))


def _chart(row: owner_rows.ValueRow, uid: str, **size):
    b = row.budget
    parts = (f" (chain ε {charts._eps(b.chain_loss)}, one-shot ε {charts._eps(b.oneshot_loss)})"
             if b.oneshot_loss > 0 else "")
    desc = (f"Ceiling now ε {charts._eps(b.ceiling)}; privacy spent ε {charts._eps(row.loss)}{parts} "
            f"after {row.releases} release{'s' if row.releases != 1 else ''}.")
    return charts.ceiling_loss_svg(row.events, uid=uid, description=desc, chain=not row.is_oneshot, **size)


# ---------------------------------------------------------------------------------------------- sign in/out

class SignInView(LoginView):
    template_name = "portal/login.html"
    authentication_form = SignInForm
    next_page = reverse_lazy("portal:dashboard")


class SignOutView(LogoutView):
    next_page = reverse_lazy("portal:login")

    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        messages.info(request, "You are signed out.")
        return response


@never_cache
@require_http_methods(["GET", "POST"])
def signup(request):
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = user_signup(username=form.cleaned_data["username"], email=form.cleaned_data["email"],
                               password=form.cleaned_data["password1"])
        except ValidationError as exc:
            form.add_error("username" if getattr(exc, "code", "") == "username_taken" else "password1", exc)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome, {user.username}! Your owner account is ready. "
                                      "Start by contributing a value.")
            return redirect("portal:dashboard")
    return render(request, "portal/signup.html", {"form": form})


# ------------------------------------------------------------------------------------------------ dashboard

@owner_required
@require_http_methods(["GET"])
def dashboard(request):
    owner = request.user
    rows = owner_rows.owner_values(owner)
    for row in rows:
        row.chart = _chart(row, f"chart-{row.value.id}", width=480, height=170)
    return render(request, "portal/dashboard.html", {
        "rows": rows,
        "recent": owner_rows.releases(owner, limit=10),
        "release_count": owner_rows.release_count(owner),
        "earnings": owner_rows.earnings_total(owner),
    })


@owner_required
@owned_value
@require_http_methods(["GET"])
def value_detail(request, value_id: int):
    row = owner_rows.owner_value_row(request.user, value_id, with_tag=True)
    tag_form = (PumTagForm(attribute=row.attribute, initial={"tag": row.pum_tag or ""}, auto_id="pum_%s")
                if row.takes_pum_tag else None)
    return render(request, "portal/value_detail.html", {
        "row": row, "value": row.value, "budget": row.budget, "chart": _chart(row, "value-chart"),
        "releases": owner_rows.releases(request.user, value_id=value_id),
        "history": list(reversed(row.events)), "tag_form": tag_form, **_explanations(row.attribute),
    })


def _explanations(attribute) -> dict:
    """What the contribute and value pages say about how a value of ``attribute`` is sold and what it costs."""
    plain, technical = owner_rows.mechanism_name_parts(attribute.mechanism)
    return {
        "mechanism_name": owner_rows.mechanism_name(attribute.mechanism),
        "mechanism_plain": plain, "mechanism_technical": technical,
        "mechanism_explained": owner_rows.MECHANISM_EXPLAINED.get(attribute.mechanism, ""),
        "cost_explained": owner_rows.ONESHOT_COST if attribute.is_oneshot else owner_rows.CHAIN_COST,
        "survey_note": owner_rows.SURVEY_NOTE if attribute.kind == attribute.Kind.BINARY else "",
        "ceiling_note": owner_rows.CEILING_NOTE,
    }


@owner_required
@require_http_methods(["GET"])
def releases(request):
    page, rows = owner_rows.release_page(request.user, request.GET.get("page"))
    return render(request, "portal/releases.html", {
        "page": page, "releases": rows, "earnings": owner_rows.earnings_total(request.user)})


# ----------------------------------------------------------------------------------------------- money

@owner_required
@require_http_methods(["GET"])
def money_page(request):
    """Earnings balance, what is being settled into it, payout requests and the statement of every movement
    (docs/money.md#settlement)."""
    owner = request.user
    page = Paginator(money_selectors.statement(owner, MoneyAccount.Kind.OWNER_EARNINGS), 25).get_page(
        request.GET.get("page"))
    payouts = list(money_selectors.payouts(owner)[:20])
    return render(request, "portal/money.html", {
        "balance": money_selectors.balance(owner, MoneyAccount.Kind.OWNER_EARNINGS),
        "pending": money_selectors.unsettled_earnings(owner),
        "held": sum((p.amount for p in payouts if p.status == p.Status.REQUESTED), Decimal(0)),
        "payouts": payouts, "page": page, "entries": page.object_list,
        "form": PayoutForm(auto_id="payout_%s")})


@owner_required
@require_POST
def payout(request):

    form = PayoutForm(request.POST, auto_id="payout_%s")
    if form.is_valid():
        try:
            p = money.payout_request(owner=request.user, amount=form.cleaned_data["amount"])
        except (money.PayoutRefused, money.MoneyError) as e:
            messages.error(request, str(e))
        else:
            messages.success(request, f"Payout {p.id} of {money.format_money(p.amount)} requested: the "
                                      f"operator settles it.")
    else:
        messages.error(request, " ".join(m for errs in form.errors.values() for m in errs))
    return redirect("portal:money")


# ----------------------------------------------------------------------------------------------- contribute

@owner_required
@require_http_methods(["GET"])
def contribute_choose(request):
    return render(request, "portal/contribute_choose.html", {"datasets": owner_rows.attributes_offered(request.user)})


@owner_required
@require_http_methods(["GET", "POST"])
def contribute(request, attribute_id: int):
    attribute = owner_rows.attribute_for_contribution(attribute_id)
    form = ContributeForm(request.POST or None, attribute=attribute)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        policy = ({"ceiling": data["ceiling"]} if data["policy"] == "fixed" else {"schedule": data["schedule"]})
        raw = data["raw"] if isinstance(data["raw"], dict) else str(data["raw"])  # graph, distribution: by name
        try:
            value = value_create(owner=request.user, attribute=attribute, raw=raw, **policy)
        except InvalidValue as exc:
            form.add_error("raw", f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
        except (BudgetError, EpsilonError) as exc:
            form.add_error(None, plain(exc))
        except IntegrityError:
            form.add_error(None, "You have already contributed a value to this attribute.")
        else:
            messages.success(request, f"Thank you: your value for “{attribute.name}” is now offered for sale "
                                      "within the budget you set.")
            return redirect("portal:value", value_id=value.id)
    existing = owner_rows.attributes_offered(request.user)
    already = next((o.contributed_value_id for _, _, offers in existing for o in offers
                    if o.attribute.id == attribute.id), None)
    return render(request, "portal/contribute_form.html", {
        "form": form, "attribute": attribute, "already": already,
        "device_held": owner_rows.attribute_device_held(attribute), **_explanations(attribute)})


# -------------------------------------------------------------------------------------------------- budgets

@owner_required
@owned_value
@for_sale_only
@require_http_methods(["GET", "POST"])
def ceiling(request, value_id: int):
    row = owner_rows.owner_value_row(request.user, value_id)
    form = CeilingForm(request.POST or None, initial={"ceiling": _plain_decimal(row.budget.ceiling)})
    if request.method == "POST" and form.is_valid():
        try:
            budget_set_ceiling(value_id=row.value.id, ceiling=form.cleaned_data["ceiling"])
        except BudgetError as exc:
            form.add_error("ceiling", plain(exc))
        else:
            messages.success(request, f"The ceiling is now ε {form.cleaned_data['ceiling'].normalize():f}.")
            return redirect("portal:value", value_id=row.value.id)
    return render(request, "portal/ceiling_form.html", {"form": form, "row": row, "value": row.value})


def _plain_decimal(d: Decimal) -> Decimal:
    """``Decimal("10.000000")`` -> ``Decimal("10")`` (``normalize()`` alone gives ``1E+1``, which a form shows)."""
    text = f"{d:f}"
    return Decimal(text.rstrip("0").rstrip(".") if "." in text else text)


def _schedule_initial(b, now) -> dict:
    """The schedule form's starting point: the schedule in force, continued from now to its end (its cap, its
    shape, the steps still to come); with no schedule running, from the current ceiling over 30 days."""
    initial = {"start": _plain_decimal(b.ceiling), "cap": _plain_decimal(b.schedule_cap or b.ceiling),
               "duration": 30, "unit": "days", "shape": b.schedule_shape or "linear", "steps": b.schedule_steps}
    if b.scheduled and b.schedule_end_at > now:
        # the ceiling the schedule gives now (the stored one advances periodically: docs/operations.md)
        ceiling_now = charts.Policy(start=b.schedule_start, cap=b.schedule_cap, start_at=b.schedule_start_at,
                                    end_at=b.schedule_end_at, shape=b.schedule_shape,
                                    steps=b.schedule_steps).at(now)
        initial["start"] = _plain_decimal(max(b.ceiling, ceiling_now))
        left = b.schedule_end_at - now
        if left >= timedelta(days=1):
            initial.update(duration=Decimal(left.total_seconds() / 86400).quantize(Decimal("0.001")), unit="days")
        else:
            initial.update(duration=max(Decimal(left.total_seconds() / 3600).quantize(Decimal("0.001")),
                                        Decimal("0.001")), unit="hours")
        if b.schedule_shape == "steps" and b.schedule_steps:
            total = (b.schedule_end_at - b.schedule_start_at).total_seconds()
            done = int(b.schedule_steps * max(0.0, (now - b.schedule_start_at).total_seconds()) / total)
            initial["steps"] = max(b.schedule_steps - done, 1)
        initial["duration"] = _plain_decimal(initial["duration"])
    return initial


@owner_required
@owned_value
@for_sale_only
@require_http_methods(["GET", "POST"])
def schedule(request, value_id: int):
    row = owner_rows.owner_value_row(request.user, value_id)
    b = row.budget
    initial = _schedule_initial(b, timezone.now())
    form = ScheduleForm(request.POST or None, initial=initial)
    preview = None
    if request.method == "POST" and form.is_valid():
        s = form.cleaned_data["schedule"]
        if request.POST.get("action") == "save":
            try:
                budget_set_schedule(value_id=row.value.id, schedule=s, now=form.now)
            except BudgetError as exc:
                form.add_error(None, plain(exc))
            else:
                messages.success(request, f"Schedule set: the ceiling grows from ε {s.start.normalize():f} to "
                                          f"ε {s.cap.normalize():f} by {timezone.localtime(s.end_at):%d %b %Y %H:%M}.")
                return redirect("portal:value", value_id=row.value.id)
        args = {"start": s.start, "cap": s.cap, "start_at": s.start_at, "end_at": s.end_at, "shape": s.shape,
                "steps": s.steps}
        preview = {"rows": charts.preview_rows(**args), "too_low": s.start < row.loss, "schedule": s,
                   "svg": charts.schedule_svg(**args, loss=row.loss, uid="preview-chart")}
    return render(request, "portal/schedule_form.html", {"form": form, "row": row, "value": row.value,
                                                         "preview": preview})


@owner_required
@owned_value
@for_sale_only
@require_POST
def pause(request, value_id: int):
    value = owner_rows.owner_value(request.user, value_id)
    budget_set_paused(value_id=value.id, paused=True)
    messages.success(request, "Sales of this value are paused: it is left out of every new purchase.")
    return redirect("portal:value", value_id=value.id)


@owner_required
@owned_value
@for_sale_only
@require_POST
def resume(request, value_id: int):
    value = owner_rows.owner_value(request.user, value_id)
    budget_set_paused(value_id=value.id, paused=False)
    messages.success(request, "Sales of this value are resumed.")
    return redirect("portal:value", value_id=value.id)


@owner_required
@owned_value
@require_http_methods(["GET", "POST"])
def delete_raw(request, value_id: int):
    row = owner_rows.owner_value_row(request.user, value_id, with_tag=True)
    if row.value.custody == Value.Custody.OWNER:  # nothing to delete: the raw value is on a device of the owner's
        messages.info(request, "Your value is kept on a device, not by the service: the service never held it, so "
                               "there is nothing to delete here.")
        return redirect("portal:value", value_id=row.value.id)
    if request.method == "POST":
        value_delete_raw(value_id=row.value.id)
        if row.is_oneshot:
            messages.success(request, "Your raw value was deleted. It can no longer be sold: every one-shot "
                                      "release needs it. What was already sold stays recorded.")
        else:
            messages.success(request, f"Your raw value was deleted. The chain stays sellable up to its head "
                                      f"(ε {row.head.normalize():f}) and can no longer grow.")
        return redirect("portal:value", value_id=row.value.id)
    return render(request, "portal/delete_raw_confirm.html", {"row": row, "value": row.value})


# ------------------------------------------------------------------------------------------------- PUM tags

@owner_required
@owned_value
@require_http_methods(["GET", "POST"])
def pum_tag(request, value_id: int):
    """Tag a uRR/uRAP value as personally sensitive (PUM), or remove the tag: sealed, released only as ⊥tag."""
    row = owner_rows.owner_value_row(request.user, value_id, with_tag=True)
    if not row.takes_pum_tag:
        raise Http404("This value cannot be tagged.")
    form = PumTagForm(request.POST if request.method == "POST" else None, attribute=row.attribute,
                      initial={"tag": row.pum_tag or ""}, auto_id="pum_%s")
    if request.method == "POST" and form.is_valid():
        tag = form.cleaned_data["tag"] or None
        try:
            value_set_pum_tag(value_id=row.value.id, tag=tag, owner=request.user)
        except BudgetError as exc:
            form.add_error("tag", plain(exc))
        else:
            if tag:
                messages.success(request, f"Your answer is tagged as personally sensitive (“{tag}”). From now on "
                                          f"every release sends the protected symbol ⊥{tag} through the "
                                          f"mechanism instead of your answer.")
            else:
                messages.success(request, "The tag is removed: your answer is released through the mechanism "
                                          "like any other.")
            return redirect("portal:value", value_id=row.value.id)
    return render(request, "portal/pum_tag_form.html", {"form": form, "row": row, "value": row.value})


@owner_required
@owned_value
@require_http_methods(["GET"])
def value_receipts(request, value_id: int):
    """The value's receipts file (docs/receipts.md#the-receipts-file) against the latest checkpoint, or the one of
    ``?tree_size=``: downloaded from the value page, and checked there by the owner's browser."""
    tree_size = request.GET.get("tree_size", "")
    size = as_id(tree_size)  # ASCII digits, 1 to 2^63-1 (isdigit() also says yes to "²", which int() refuses)
    if tree_size and size is None:
        return HttpResponse("tree_size must be a positive integer.", status=400, content_type="text/plain")
    try:
        bundle = receipts.receipts_bundle(value_ids=[value_id], tree_size=size)
    except NoSuchCheckpoint as exc:
        raise Http404(str(exc)) from exc
    bundle["next"] = None
    response = HttpResponse(json.dumps(bundle, indent=1), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="ldpmarket-receipts-value-{value_id}.json"'
    return response


# --------------------------------------------------------------------------------------------------- export

@owner_required
@require_http_methods(["GET"])
def export(request):
    data = owner_rows.export(request.user)
    response = HttpResponse(json.dumps(data, indent=2, ensure_ascii=False), content_type="application/json")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="ldpmarket-{request.user.username}-{stamp}.json"'
    return response
