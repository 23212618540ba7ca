"""Forms of the owner portal: validate input and explain every error in plain words.

Epsilons are parsed exactly (``accounts.epsilon.parse``); a schedule form
builds an ``accounts.services.Schedule`` starting now.  The services re-check
everything (the forms only make the errors friendlier).
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts import roles
from accounts.epsilon import MAX_EPSILON, PLACES, EpsilonError, parse
from accounts.lockout import LockoutFormMixin
from accounts.models import User
from accounts.services import BudgetError, Schedule
from ldpmarket.fields import StrictDecimalFormField, StrictIntegerFormField
from ldpmarket.numbers import NumberError, parse_ascii_decimal
from market.models import Attribute
from market.values.inputs import MAX_STRING, labels_of

DURATION_UNITS = {"hours": timedelta(hours=1), "days": timedelta(days=1), "weeks": timedelta(weeks=1)}
MAX_DURATION = timedelta(days=3660)


def _number_widget(**attrs) -> forms.NumberInput:
    return forms.NumberInput(attrs={"step": "any", "inputmode": "decimal", **attrs})


class PlainLabels:
    """Labels without Django's trailing colon (cleaner, and what screen readers announce)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class EpsilonField(forms.CharField):
    """An exact epsilon (Decimal, at most 6 decimals, 0..MAX_EPSILON) with messages a person understands."""

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
        text = value.replace(",", ".")
        try:  # a plain ASCII decimal (ldpmarket.numbers), "," read as the point; "-" for the message below
            d = parse_ascii_decimal(text, signed=True)
        except NumberError:
            raise ValidationError(_not_plain(what, text), code="invalid") from None
        if d < 0 or (d == 0 and not self.allow_zero):
            raise ValidationError(f"{what} cannot be {'negative' if d < 0 else 'zero'}.", code="range")
        if d > MAX_EPSILON:
            raise ValidationError(f"{what} can be at most {MAX_EPSILON}.", code="range")
        try:
            return parse(d, name=self.what, allow_zero=self.allow_zero)
        except EpsilonError:
            raise ValidationError(f"{what} can have at most {PLACES} digits after the decimal point.",
                                  code="precision") from None


def _not_plain(what: str, text: str) -> str:
    """Why ``text`` is not an epsilon, in the words of what Python would have made of it."""
    try:
        looks = Decimal(text)  # NaN, Infinity, 1e9, 1_000, +5, ١٠: numbers to Python, not here
    except (InvalidOperation, ValueError):
        return f"{what} must be a number, for example 0.5 or 2."
    if not looks.is_finite():
        return f"{what} must be an ordinary number, for example 0.5 or 2."
    return f"{what} must be written with the digits 0 to 9 and a point only, for example 0.5 or 2."


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


class SignInForm(PlainLabels, LockoutFormMixin, AuthenticationForm):
    """Django's sign-in form, for owners only; the one sign-in lockout policy applies (accounts.lockout)."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That username and password do not match an account. Check both and try again "
                         "(passwords are case-sensitive).",
        "not_owner": "This portal is for data owners. Buyers use the API; auditors and staff use the admin console.",
    }

    def __init__(self, request=None, *args, **kwargs):
        super().__init__(request, *args, **kwargs)
        self.fields["username"].error_messages["required"] = "Please enter your username."
        self.fields["password"].error_messages["required"] = "Please enter your password."

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if not roles.can_use_portal(user):
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
    duration = StrictDecimalFormField(
        signed=True, label="Duration", min_value=Decimal("0.001"), max_digits=12, decimal_places=3,
        widget=_number_widget(min="0.001"),
        error_messages={"required": "Please enter how long the schedule lasts.",
                        "invalid": "The duration must be a number, for example 30.",
                        "min_value": "The duration must be longer than zero.",
                        "max_digits": "That duration is too long.",
                        "max_decimal_places": "Use at most 3 digits after the decimal point for the duration."})
    unit = forms.ChoiceField(label="Duration unit", choices=[(u, u.capitalize()) for u in DURATION_UNITS],
                             initial="days",
                             error_messages={"required": "Please choose hours, days or weeks.",
                                             "invalid_choice": "Please choose hours, days or weeks."})
    shape = forms.ChoiceField(
        label="How the ceiling grows", widget=forms.RadioSelect, initial="linear",
        choices=[("linear", "Steadily (linear)"), ("steps", "In equal steps")],
        error_messages={"required": "Please choose how the ceiling grows.",
                        "invalid_choice": "Please choose steadily or in steps."})
    steps = StrictIntegerFormField(
        signed=True, label="Number of steps", required=False, min_value=1, max_value=10000, widget=forms.NumberInput(
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
        if duration is not None and unit in DURATION_UNITS:
            length = DURATION_UNITS[unit] * float(duration)
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
    """The input for the owner's value, by kind: a choice, three labelled states, a bounded number, weights per
    item, probabilities per label, or a text."""
    label = f"Your value for “{attribute.name}”"
    help_text = attribute.description or ""
    kind = attribute.kind
    if kind in (Attribute.Kind.CATEGORICAL, Attribute.Kind.BINARY):
        if attribute.record.uses_sensitive and attribute.sensitive:
            help_text = (f"Sensitive answers, always protected: {', '.join(attribute.sensitive)}. Any other answer "
                         f"may be passed on exactly. {help_text}").strip()
        return forms.ChoiceField(
            label=label, help_text=help_text, choices=[("", "Choose…")] + [(x, x) for x in labels_of(attribute)],
            error_messages={"required": "Please choose your answer.",
                            "invalid_choice": "Please choose one of the answers in the list."})
    if kind == Attribute.Kind.TERNARY:
        return forms.ChoiceField(
            label=label, help_text=help_text, widget=forms.RadioSelect,
            choices=[(x, x) for x in labels_of(attribute)],
            error_messages={"required": "Please choose one of the three states.",
                            "invalid_choice": "Please choose one of the three states."})
    if kind == Attribute.Kind.GRAPH:
        return GraphField(attribute, label=label, help_text=help_text)
    if kind == Attribute.Kind.DISTRIBUTION:
        return DistributionField(attribute, label=label, help_text=help_text)
    if kind == Attribute.Kind.NUMERIC:
        low, high = (Decimal(f"{d.normalize():f}") for d in (attribute.low, attribute.high))
        between = f"between {low:f} and {high:f}"
        return StrictDecimalFormField(
            signed=True, label=label, min_value=low, max_value=high,
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


# ------------------------------------------------------------------------ numbers per name (graphs, distributions)

#: Up to this many items or labels get one labelled input each; more are typed as lines "name number".
FIELDS_UP_TO = 30
#: How far the owner's probabilities may add up away from 1 (they are then rescaled to add up to exactly 1).
SUM_TOLERANCE = Decimal("0.001")
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})


class NamedNumbersWidget(forms.MultiWidget):
    """One labelled number input per name (an item or a label), grouped in a fieldset with the field's legend.

    Each input gets its own visible ``<label>``; when the field has help text or errors, each input is also
    described by them (``aria-describedby``), as single inputs are.
    """

    template_name = "portal/widgets/named_numbers.html"
    use_fieldset = True

    def __init__(self, names: list[str], *, has_help: bool, shown: list[str] | None = None, **number_attrs):
        self.names = list(names)
        self.shown = list(shown or names)  # what each input's label says
        self.has_help = has_help
        super().__init__([_number_widget(**number_attrs) for _ in self.names])

    def decompress(self, value):
        if isinstance(value, dict):
            return [value.get(n) for n in self.names]
        return [None] * len(self.names)

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        base = (attrs or {}).get("id") or f"id_{name}"
        described = ([f"{base}_helptext"] if self.has_help else []) + \
            ([f"{base}_error"] if (attrs or {}).get("aria-invalid") == "true" else [])
        for sub, label in zip(context["widget"]["subwidgets"], self.shown):
            sub["item_label"] = label
            if described:
                sub["attrs"]["aria-describedby"] = " ".join(described)
        return context


def _parse_number(text: str) -> Decimal:
    """A plain ASCII decimal (``ldpmarket.numbers``), signed; a typographic minus reads as "-" and a decimal comma
    as the point.  ``NumberError`` (a ``ValueError``) for anything else."""
    text = text.strip().translate(_MINUS)
    if re.fullmatch(r"-?[0-9]+,[0-9]+", text):
        text = text.replace(",", ".")
    return parse_ascii_decimal(text, signed=True)


class NamedNumbersField(forms.Field):
    """A number for some of ``names``: one input each (few names) or lines "name number" (many names).

    Cleans to ``{name: Decimal}`` with only the names given (empty inputs and unlisted names left out);
    subclasses check the numbers and build the raw value for ``market.values.services.value_create``.
    """

    what = "number"
    names_word = "labels"

    def __init__(self, attribute: Attribute, *, label: str, help_text: str, **number_attrs):
        self.names = labels_of(attribute)
        #: A graph without item names numbers its items 0, 1, ...: their inputs say "Item 0", "Item 1", ...
        shown = self.names if attribute.labels else [f"Item {n}" for n in self.names]
        self.as_lines = len(self.names) > FIELDS_UP_TO
        help_text = f"{self.instructions()} {help_text}".strip()
        if self.as_lines:
            widget = forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "autocapitalize": "none",
                                           "placeholder": self.example()})
        else:
            widget = NamedNumbersWidget(self.names, shown=shown, has_help=bool(help_text), **number_attrs)
        super().__init__(label=label, help_text=help_text, widget=widget, required=False)

    def instructions(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def example(self) -> str:
        return "\n".join(f"{n} {x}" for n, x in zip(self.names[:2], ("0.5", "-1")))

    def to_python(self, value) -> dict[str, Decimal]:
        return self._from_lines(value or "") if self.as_lines else self._from_inputs(value or [])

    def _from_inputs(self, values) -> dict[str, Decimal]:
        out, bad = {}, []
        for name, text in zip(self.names, list(values) + [None] * (len(self.names) - len(values))):
            if text in (None, "") or not str(text).strip():
                continue
            try:
                out[name] = _parse_number(str(text))
            except (InvalidOperation, ValueError):
                bad.append(name)
        if bad:
            raise ValidationError(f"The {self.what} for {_names(bad)} is not a number; write it like 0.25.",
                                  code="invalid")
        return out

    def _from_lines(self, text: str) -> dict[str, Decimal]:
        exact = set(self.names)
        folded: dict[str, list[str]] = {}
        for n in self.names:
            folded.setdefault(n.casefold(), []).append(n)
        out: dict[str, Decimal] = {}
        errors = []
        example = self.example().splitlines()[0]
        for number, line in enumerate(str(text).splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = _LINE.match(line)
            whole = line if line in exact else (folded.get(line.casefold()) or [None])[0]
            if whole is not None:  # a name alone ("item 4" names an item): its number is missing
                errors.append(f"line {number}: “{whole}” needs a {self.what} after it")
                continue
            if m is None:
                errors.append(f"line {number}: write the name, a space and the {self.what}, for example “{example}”")
                continue
            name, text_number = m.group("name").strip(), m.group("number")
            if name in exact:
                key = name
            elif len(folded.get(name.casefold(), [])) == 1:
                key = folded[name.casefold()][0]
            else:
                errors.append(f"line {number}: “{name}” is not one of the {self.names_word}")
                continue
            if key in out:
                errors.append(f"line {number}: “{key}” is given twice")
                continue
            try:
                out[key] = _parse_number(text_number)
            except NumberError:
                errors.append(f"line {number}: “{text_number}” is not a number; write it like 0.25")
                continue
        if errors:
            more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
            raise ValidationError("Please check " + "; ".join(errors[:3]) + more + ".", code="invalid")
        return out


#: A line "name number": the name may hold spaces; ":", "=", "," or ";" may separate it from the number (which
#: ``_parse_number`` reads: ASCII digits only).
_LINE = re.compile(r"^(?P<name>.+?)[\s:=,;]+(?P<number>[\-\u2212\u2013]?(?:[0-9]+(?:[.,][0-9]*)?|[.,][0-9]+))$")


def _names(names: list[str]) -> str:
    quoted = [f"“{n}”" for n in names[:5]] + ([f"{len(names) - 5} more"] if len(names) > 5 else [])
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


class GraphField(NamedNumbersField):
    """The owner's weighted edges to a graph attribute's items: a weight in [-1, 1] per item, or no edge.

    Cleans to ``{item: float}`` (items without an edge left out), the raw value ``value_create`` takes.
    """

    what = "weight"
    names_word = "items"

    def __init__(self, attribute: Attribute, **kwargs):
        super().__init__(attribute, min="-1", max="1", **kwargs)

    def instructions(self) -> str:
        if self.as_lines:
            shown = ", ".join(self.names[:8]) + (f" … ({len(self.names)} items)" if len(self.names) > 8 else "")
            return (f"One line per item you have an edge to: the item's name, a space, and the edge's weight, a "
                    f"number from −1 to 1 (for example “{self.example().splitlines()[0]}”). Items you leave out "
                    f"have no edge. Items: {shown}.")
        return ("For each item you have an edge to, enter the edge's weight: a number from −1 (strongly negative) "
                "to 1 (strongly positive); 0 is an edge with a neutral weight. Leave an item empty for no edge.")

    def clean(self, value):
        weights = super().clean(value)
        outside = [n for n, w in weights.items() if not -1 <= w <= 1]
        if outside:
            raise ValidationError(f"Edge weights must be between −1 and 1: check the weight for {_names(outside)}.",
                                  code="range")
        if not weights:
            raise ValidationError("Please give a weight for at least one item (leave the items you have no edge "
                                  "to empty).", code="required")
        return {n: float(weights[n]) for n in self.names if n in weights}


class DistributionField(NamedNumbersField):
    """The owner's probability for each label: non-negative, adding up to 1 within ``SUM_TOLERANCE``.

    Empty labels count as 0.  Cleans to ``{label: float}`` over every label, rescaled to add up to exactly 1
    (kept as typed when they already do), the raw value ``value_create`` takes.
    """

    what = "probability"

    def __init__(self, attribute: Attribute, **kwargs):
        super().__init__(attribute, min="0", max="1", **kwargs)

    def example(self) -> str:
        return "\n".join(f"{n} {x}" for n, x in zip(self.names[:2], ("0.7", "0.3")))

    def instructions(self) -> str:
        how = ("One line per label: the label, a space, and its probability; labels you leave out count as 0."
               if self.as_lines else "Enter a probability for each label; an empty label counts as 0.")
        return (f"{how} Probabilities are numbers from 0 to 1 that must add up to 1 (a difference of up to "
                f"{SUM_TOLERANCE} is accepted, for example 0.333 three times, and then rescaled to add up to exactly "
                f"1). They are probabilities, not counts or percentages.")

    def clean(self, value):
        p = super().clean(value)
        negative = [n for n, x in p.items() if x < 0]
        if negative:
            raise ValidationError(f"Probabilities cannot be negative: check {_names(negative)}.", code="range")
        total = sum(p.values(), Decimal(0))
        if total == 0:
            raise ValidationError("Please enter your probabilities: they must add up to 1.", code="required")
        if abs(total - 1) > SUM_TOLERANCE:
            hint = " (they look like percentages: divide each by 100)" if abs(total - 100) <= 100 * SUM_TOLERANCE \
                else ""
            raise ValidationError(f"Your probabilities add up to {total.normalize():f}; they must add up to 1{hint}.",
                                  code="sum")
        if total == 1:
            return {n: float(p.get(n, 0)) for n in self.names}
        return {n: float(p.get(n, Decimal(0)) / total) for n in self.names}


# ----------------------------------------------------------------------------------------------- PUM tags

NO_TAG = ""


class PumTagForm(PlainLabels, forms.Form):
    """Tag a uRR/uRAP value as personally sensitive under one of its attribute's tags, or remove the tag."""

    tag = forms.ChoiceField(
        label="Is this answer personally sensitive for you?", widget=forms.RadioSelect, required=False,
        error_messages={"invalid_choice": "Please choose one of the tags in the list, or no tag."})

    def __init__(self, *args, attribute: Attribute, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tag"].choices = [(NO_TAG, "No: not personally sensitive (no tag)")] + [
            (t, f"Yes, tag it “{t}”") for t in attribute.pum_tags]

    def clean_tag(self):
        if self.is_bound and "tag" not in self.data:  # nothing chosen: never remove a tag by omission
            raise ValidationError("Please choose one of the tags, or no tag.", code="required")
        return self.cleaned_data["tag"]



class PayoutForm(PlainLabels, forms.Form):
    """An owner's payout request: an amount, or blank for the whole earnings balance (whole cents)."""

    amount = StrictDecimalFormField(
        signed=True, label="Amount", required=False, min_value=Decimal("0.01"), max_digits=14, decimal_places=2,
        help_text="Leave blank to ask for your whole earnings balance (in whole cents).",
        error_messages={"min_value": "Please enter a positive amount.",
                        "max_decimal_places": "Please use at most two decimal places (cents).",
                        "invalid": "Please enter an amount such as 25.00."})
