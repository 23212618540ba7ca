"""Forms of the buyer portal: validate input and explain every error in plain words (docs/buyers.md).

Epsilons are parsed exactly (``accounts.epsilon.parse``); the services re-check everything (the forms only make
the errors friendlier).
"""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError

from accounts import roles
from accounts.epsilon import MAX_SALE_EPSILON, PLACES, EpsilonError, parse
from accounts.lockout import LockoutFormMixin
from accounts.models import User
from accounts.tokens import max_expiry
from ldpmarket.numbers import NumberError, parse_ascii_decimal

#: How long a new API token lasts: the choices offered (label, lifetime), up to the longest the service allows
#: (``accounts.tokens.max_expiry``, setting LDP_TOKEN_MAX_HOURS).
TOKEN_LIFETIMES = {"1": ("1 day", timedelta(days=1)), "7": ("7 days", timedelta(days=7)),
                   "30": ("30 days", timedelta(days=30)), "90": ("90 days", timedelta(days=90)),
                   "365": ("1 year", timedelta(days=365))}


def token_lifetimes() -> dict[str, tuple[str, timedelta]]:
    longest = max_expiry()
    return {k: v for k, v in TOKEN_LIFETIMES.items() if v[1] <= longest} or {"max": ("the longest allowed", longest)}


class PlainLabels:
    """Labels without Django's trailing colon (cleaner, and what screen readers announce)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class BuyerSignUpForm(PlainLabels, forms.Form):
    username = forms.CharField(
        max_length=150, validators=User._meta.get_field("username").validators,
        help_text="Letters, digits and @ . + - _ only; you sign in with it.",
        error_messages={"required": "Please choose a username.",
                        "max_length": "A username can be at most 150 characters long."},
        widget=forms.TextInput(attrs={"autocomplete": "username", "autocapitalize": "none"}))
    name = forms.CharField(
        label="Your name", max_length=150, error_messages={"required": "Please enter your name."},
        widget=forms.TextInput(attrs={"autocomplete": "name"}))
    organisation = forms.CharField(
        max_length=200, help_text="Shown to the owners whose values you buy; an operator approves it.",
        error_messages={"required": "Please enter your organisation."},
        widget=forms.TextInput(attrs={"autocomplete": "organization"}))
    email = forms.EmailField(
        help_text="We write to you here when your organisation is approved.",
        error_messages={"required": "Please enter your e-mail address.",
                        "invalid": "That does not look like an e-mail address (it needs an @ and a domain)."},
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
        return User.normalize_username(self.cleaned_data["username"].strip())

    def clean(self):
        data = super().clean()
        p1, p2 = data.get("password1"), data.get("password2")
        if p1 and p2 and p1 != p2:
            self.add_error("password2", "The two passwords are not the same. Please type them again.")
        elif p1:
            try:  # Django's AUTH_PASSWORD_VALIDATORS (the service checks again)
                validate_password(p1, user=User(username=data.get("username") or "", email=data.get("email") or "",
                                                first_name=data.get("name") or ""))
            except ValidationError as exc:
                self.add_error("password1", exc)
        return data


class BuyerSignInForm(PlainLabels, LockoutFormMixin, AuthenticationForm):
    """Django's sign-in form, for buyers only; the one sign-in lockout policy applies (accounts.lockout)."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That username and password do not match an account. Check both and try again "
                         "(passwords are case-sensitive).",
        "not_buyer": "This portal is for buyers. Owners use the owner portal (/portal/); auditors and staff use "
                     "the admin console (/admin/).",
    }

    def __init__(self, request=None, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.fields["username"].error_messages["required"] = "Please enter your username."
        self.fields["password"].error_messages["required"] = "Please enter your password."

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if not roles.is_buyer(user):
            raise ValidationError(self.error_messages["not_buyer"], code="not_buyer")


class EpsilonField(forms.CharField):
    """An exact epsilon for a purchase (above 0, at most ``MAX_SALE_EPSILON``, at most 6 decimals)."""

    default_error_messages = {"required": "Please enter the epsilon (ε) to buy at."}

    def __init__(self, **kwargs):
        kwargs.setdefault("widget", forms.TextInput(attrs={"inputmode": "decimal", "size": "8"}))
        super().__init__(**kwargs)

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        try:  # a plain ASCII decimal (ldpmarket.numbers), "," read as the point
            d = parse_ascii_decimal(value.replace(",", "."), signed=True)
        except NumberError:
            raise ValidationError("The epsilon must be a plain number, for example 0.5.", code="invalid") from None
        if d <= 0:
            raise ValidationError("The epsilon must be more than zero.", code="range")
        if d > MAX_SALE_EPSILON:
            raise ValidationError(f"The epsilon can be at most {MAX_SALE_EPSILON}.", code="range")
        try:
            return parse(d, allow_zero=False, limit=MAX_SALE_EPSILON)
        except EpsilonError:
            raise ValidationError(f"The epsilon can have at most {PLACES} digits after the decimal point.",
                                  code="precision") from None


class QuoteForm(PlainLabels, forms.Form):
    """``?attribute=&epsilon=``: the quote page's request (the attribute must exist: checked by the view)."""

    attribute = forms.IntegerField(min_value=1, max_value=2 ** 63 - 1, widget=forms.HiddenInput,
                                   error_messages={"required": "Choose an attribute in the catalog.",
                                                   "invalid": "Choose an attribute in the catalog."})
    epsilon = EpsilonField(label="Epsilon (ε)")


class BuyForm(forms.Form):
    """The Buy button's hidden fields: the signed quote and the idempotency key (a double submit buys once)."""

    quote = forms.CharField(max_length=4000, error_messages={"required": "Ask for a quote first."})
    idempotency_key = forms.RegexField(regex=r"^[!-~]{1,255}$", max_length=255,
                                       error_messages={"required": "The form is incomplete: ask for the quote again.",
                                                       "invalid": "The form is incomplete: ask for the quote again."})


class TokenForm(PlainLabels, forms.Form):
    name = forms.CharField(label="Token name", max_length=100,
                           help_text="What it is for, e.g. “analysis notebook”: you see it in the list.",
                           error_messages={"required": "Please name the token.",
                                           "max_length": "A token name can be at most 100 characters long."})
    lifetime = forms.ChoiceField(label="Expires after", initial="30",
                                 error_messages={"invalid_choice": "Choose one of the lifetimes.",
                                                 "required": "Choose when the token expires."})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["lifetime"].choices = [(k, v[0]) for k, v in token_lifetimes().items()]

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise ValidationError("Please name the token.", code="required")
        return name

    @property
    def expires_in(self) -> timedelta:
        return token_lifetimes()[self.cleaned_data["lifetime"]][1]


class RevokeForm(forms.Form):
    token_key = forms.CharField(max_length=64)


def plain_epsilon(d: Decimal) -> str:
    """``Decimal("0.500000")`` -> ``"0.5"``."""
    return "0" if d == 0 else format(d.normalize(), "f")
