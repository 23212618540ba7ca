"""Forms of the owner portal: validate input and explain every error in plain words.

Epsilons are parsed exactly (``accounts.epsilon.parse``); a schedule form
builds an ``accounts.services.Schedule`` starting now.  The services re-check
everything (the forms only make the errors friendlier).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts.epsilon import MAX_EPSILON, PLACES, EpsilonError, parse
from accounts.models import User
from accounts.services import BudgetError, Schedule
from market.domain import MAX_STRING, labels_of
from market.models import Attribute

from . import throttle

UNITS = {"hours": timedelta(hours=1), "days": timedelta(days=1), "weeks": timedelta(weeks=1)}
MAX_DURATION = timedelta(days=3660)


def _number_widget(**attrs) -> forms.NumberInput:
    return forms.NumberInput(attrs={"step": "any", "inputmode": "decimal", **attrs})


class PlainLabels:
    """Labels without Django's trailing colon (cleaner, and what screen readers announce)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class EpsilonField(forms.CharField):
    """An exact epsilon (Decimal, at most 6 decimals, 0..700) with messages a person understands."""

    def __init__(self, *, what: str, allow_zero: bool = True, **kwargs):
        self.what = what
        self.allow_zero = allow_zero
        kwargs.setdefault("widget", _number_widget(min="0", max=str(MAX_EPSILON)))
        kwargs.setdefault("error_messages", {"required": f"Please enter the {what.lower()}."})
        super().__init__(**kwargs)

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        what = self.what[:1].upper() + self.what[1:]
        try:
            d = Decimal(value.replace(",", "."))
        except InvalidOperation:
            raise ValidationError(f"{what} must be a number, for example 0.5 or 2.", code="invalid") from None
        if not d.is_finite():
            raise ValidationError(f"{what} must be an ordinary number, for example 0.5 or 2.", code="invalid")
        if d < 0 or (d == 0 and not self.allow_zero):
            raise ValidationError(f"{what} cannot be {'negative' if d < 0 else 'zero'}.", code="range")
        if d > MAX_EPSILON:
            raise ValidationError(f"{what} can be at most {MAX_EPSILON}.", code="range")
        try:
            return parse(d, name=self.what, allow_zero=self.allow_zero)
        except EpsilonError:
            raise ValidationError(f"{what} can have at most {PLACES} digits after the decimal point.",
                                  code="precision") from None


# ------------------------------------------------------------------------------------------ signing in

class SignUpForm(PlainLabels, forms.Form):
    username = forms.CharField(
        max_length=150, validators=User._meta.get_field("username").validators,
        help_text="Letters, digits and @ . + - _ only.",
        error_messages={"required": "Please choose a username.",
                        "max_length": "A username can be at most 150 characters long."},
        widget=forms.TextInput(attrs={"autocomplete": "username", "autocapitalize": "none"}))
    email = forms.EmailField(
        required=False, help_text="Optional; only for you.",
        error_messages={"invalid": "That does not look like an e-mail address (it needs an @ and a domain)."},
        widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password1 = forms.CharField(
        label="Password", strip=False,
        help_text="At least 8 characters, not a common password, not only digits, not like your username.",
        error_messages={"required": "Please choose a password."},
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))
    password2 = forms.CharField(
        label="Password again", strip=False, help_text="Type the same password again, to catch typing mistakes.",
        error_messages={"required": "Please type your password a second time."},
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))

    def clean_username(self):
        username = User.normalize_username(self.cleaned_data["username"].strip())
        if User.objects.filter(username__iexact=username).exists():
            raise ValidationError("That username is already taken; please choose another.", code="taken")
        return username

    def clean(self):
        data = super().clean()
        p1, p2 = data.get("password1"), data.get("password2")
        if p1 and p2 and p1 != p2:
            self.add_error("password2", "The two passwords are not the same. Please type them again.")
        elif p1:
            try:
                validate_password(p1, user=User(username=data.get("username") or "", email=data.get("email") or ""))
            except ValidationError as exc:
                self.add_error("password1", exc)
        return data


class SignInForm(PlainLabels, AuthenticationForm):
    """Django's sign-in form, for owners only, refusing for a while after repeated failures."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That username and password do not match an account. Check both and try again "
                         "(passwords are case-sensitive).",
        "throttled": f"Too many failed sign-ins for this username. For your security, please wait "
                     f"{throttle.WINDOW // 60} minutes and try again.",
        "not_owner": "This portal is for data owners. Buyers use the API; auditors and staff use the admin console.",
    }

    def __init__(self, request=None, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.fields["username"].error_messages["required"] = "Please enter your username."
        self.fields["password"].error_messages["required"] = "Please enter your password."

    def clean(self):
        username = self.cleaned_data.get("username")
        ip = throttle.client_ip(self.request)
        if username and throttle.blocked(username, ip):
            raise ValidationError(self.error_messages["throttled"], code="throttled")
        try:
            data = super().clean()
        except ValidationError:
            if username:
                throttle.record_failure(username, ip)
            raise
        throttle.reset(username, ip)
        return data

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if user.role != User.Role.OWNER:
            raise ValidationError(self.error_messages["not_owner"], code="not_owner")


# ------------------------------------------------------------------------------------------------ budgets

class CeilingForm(PlainLabels, forms.Form):
    ceiling = EpsilonField(what="New ceiling", label="New ceiling (ε)",
                           help_text="The most privacy this value may ever spend. You can raise it, or lower it "
                                     "down to what has already been spent.")


class ScheduleForm(PlainLabels, forms.Form):
    """A schedule starting now: ``start`` now, growing linearly or in steps to ``cap`` after ``duration``."""

    start = EpsilonField(what="Starting ε", label="Starting ε (now)")
    cap = EpsilonField(what="Final ε (cap)", label="Final ε (cap)",
                       help_text="The ceiling reached at the end of the schedule; it stays there afterwards.")
    duration = forms.DecimalField(
        label="Duration", min_value=Decimal("0.001"), max_digits=12, decimal_places=3,
        widget=_number_widget(min="0.001"),
        error_messages={"required": "Please enter how long the schedule lasts.",
                        "invalid": "The duration must be a number, for example 30.",
                        "min_value": "The duration must be longer than zero.",
                        "max_digits": "That duration is too long.",
                        "max_decimal_places": "Use at most 3 digits after the decimal point for the duration."})
    unit = forms.ChoiceField(label="Duration unit", choices=[(u, u.capitalize()) for u in UNITS], initial="days",
                             error_messages={"required": "Please choose hours, days or weeks.",
                                             "invalid_choice": "Please choose hours, days or weeks."})
    shape = forms.ChoiceField(
        label="How the ceiling grows", widget=forms.RadioSelect, initial="linear",
        choices=[("linear", "Steadily (linear)"), ("steps", "In equal steps")],
        error_messages={"required": "Please choose how the ceiling grows.",
                        "invalid_choice": "Please choose steadily or in steps."})
    steps = forms.IntegerField(
        label="Number of steps", required=False, min_value=1, max_value=10000, widget=forms.NumberInput(
            attrs={"min": "1", "max": "10000"}),
        help_text="Only for growth in steps.",
        error_messages={"invalid": "The number of steps must be a whole number, for example 10.",
                        "min_value": "There must be at least 1 step.",
                        "max_value": "There can be at most 10000 steps."})

    schedule_fields = ("start", "cap", "duration", "unit", "shape")

    def __init__(self, *args, now: datetime | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.now = (now or timezone.now()).replace(microsecond=0)

    def clean(self):
        data = super().clean()
        self._clean_schedule(data)
        return data

    def _clean_schedule(self, data) -> None:
        start, cap, duration, unit, shape = (data.get(k) for k in self.schedule_fields)
        if start is not None and cap is not None and cap < start:
            self.add_error("cap", "The final ε must be at least the starting ε (schedules only ever raise the "
                                  "ceiling).")
        if shape == "steps" and data.get("steps") is None and "steps" not in self.errors:
            self.add_error("steps", "Please enter the number of steps (for example 10).")
        length = None
        if duration is not None and unit in UNITS:
            length = UNITS[unit] * float(duration)
            if length > MAX_DURATION:
                self.add_error("duration", "A schedule can last at most 10 years.")
            elif length < timedelta(seconds=1):
                self.add_error("duration", "The duration is too short; a schedule must last at least a second.")
        if self.errors or None in (start, cap, length, shape):
            return
        try:
            data["schedule"] = Schedule(start=start, cap=cap, start_at=self.now, end_at=self.now + length,
                                        shape=shape, steps=data.get("steps") if shape == "steps" else None)
        except (BudgetError, EpsilonError) as exc:
            self.add_error(None, str(exc))


# ------------------------------------------------------------------------------------------- contributing

class ContributeForm(ScheduleForm):
    """A value for one attribute (its input adapted to the attribute's kind) and its ceiling policy."""

    policy = forms.ChoiceField(
        label="Privacy budget", widget=forms.RadioSelect, initial="fixed",
        choices=[("fixed", "A fixed ceiling"), ("schedule", "A release schedule (the ceiling grows over time)")],
        error_messages={"required": "Please choose a fixed ceiling or a schedule.",
                        "invalid_choice": "Please choose a fixed ceiling or a schedule."})
    ceiling = EpsilonField(what="Ceiling", label="Ceiling (ε)", required=False, initial="1",
                           help_text="The most privacy this value may spend. Smaller is more private; "
                                     "larger sells more precision.")

    field_order = ["raw", "policy", "ceiling", "start", "cap", "duration", "unit", "shape", "steps"]

    def __init__(self, *args, attribute: Attribute, **kwargs):
        super().__init__(*args, **kwargs)
        self.attribute = attribute
        self.fields["raw"] = raw_field(attribute)
        for name in self.schedule_fields:
            self.fields[name].required = False
        self.order_fields(self.field_order)

    def clean(self):
        data = forms.Form.clean(self)
        if data.get("policy") == "fixed":
            if data.get("ceiling") is None and "ceiling" not in self.errors:
                self.add_error("ceiling", "Please enter the ceiling.")
        elif data.get("policy") == "schedule":
            for name, what in (("start", "starting ε"), ("cap", "final ε"), ("duration", "duration"),
                               ("shape", "way the ceiling grows")):
                if data.get(name) in (None, "") and name not in self.errors:
                    self.add_error(name, f"Please enter the {what} of the schedule.")
            self._clean_schedule(data)
        return data


def raw_field(attribute: Attribute) -> forms.Field:
    """The input for the owner's value, by kind: a choice, a bounded number, or a text."""
    label = f"Your value for “{attribute.name}”"
    help_text = attribute.description or ""
    kind = attribute.kind
    if kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.BINARY):
        return forms.ChoiceField(
            label=label, help_text=help_text, choices=[("", "Choose…")] + [(x, x) for x in labels_of(attribute)],
            error_messages={"required": "Please choose your answer.",
                            "invalid_choice": "Please choose one of the answers in the list."})
    if kind == Attribute.Kind.NUMERIC:
        low, high = (Decimal(f"{d.normalize():f}") for d in (attribute.low, attribute.high))
        between = f"between {low:f} and {high:f}"
        return forms.DecimalField(
            label=label, min_value=low, max_value=high,
            help_text=f"A number {between}. {help_text}".strip(),
            widget=_number_widget(min=f"{low:f}", max=f"{high:f}"),
            error_messages={"required": f"Please enter a number {between}.",
                            "invalid": f"Please enter a number {between}, for example {low:f}.",
                            "min_value": f"The number must be {between}.",
                            "max_value": f"The number must be {between}."})
    return forms.CharField(
        label=label, max_length=MAX_STRING, help_text=f"Up to {MAX_STRING} characters. {help_text}".strip(),
        error_messages={"required": "Please enter your value.",
                        "max_length": f"The value can be at most {MAX_STRING} characters long."})
