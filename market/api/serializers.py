"""Serializers of the buyer API (docs/architecture.md#the-path-of-a-purchase).

Requests are validated here with messages meant for people (``accounts.epsilon.parse``
for every epsilon).  Responses are built from plain dicts by the views (so a
serializer can never reach a raw value or an owner through a relation) and
declared here for the OpenAPI schema.
"""
from __future__ import annotations

from decimal import Decimal

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from accounts import roles
from accounts.epsilon import MAX_SALE_EPSILON, PLACES, EpsilonError, parse
from accounts.models import LedgerEntry
from accounts.money.format import MoneyField
from accounts.money.format import currency as market_currency
from ldpmarket.fields import StrictIntegerField
from ldpmarket.numbers import BIGINT_MAX, NumberError, parse_ascii_decimal
from ldpmarket.problems import ParameterError
from market import selectors
from market.models import SURVEY_MECHANISMS, Attribute, Purchase
from market.purchases import oneshot_specs
from market.selectors import progress_get

COHORT_MAX = 32767


# ------------------------------------------------------------------------------------------------- fields

@extend_schema_field({
    "oneOf": [{"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": float(MAX_SALE_EPSILON)},
              {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*$", "example": "0.5"}],
    "description": f"A finite number in (0, {MAX_SALE_EPSILON}] with at most {PLACES} decimal places, "
                   "as a JSON number or a decimal string.",
})
class EpsilonField(serializers.Field):
    """An epsilon from user input: exact (``Decimal``), > 0, <= MAX_SALE_EPSILON (30), at most 6 decimals; clear
    messages otherwise (the limit: docs/mechanisms.md)."""

    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = data.strip()
        try:
            return parse(data, name="epsilon", allow_zero=False, limit=MAX_SALE_EPSILON)
        except EpsilonError as exc:
            self.fail("invalid", message=str(exc))

    def to_representation(self, value):
        return str(Decimal(value).quantize(Decimal(1).scaleb(-PLACES)))


@extend_schema_field({
    "oneOf": [{"type": "number", "minimum": 0, "maximum": 1},
              {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*$", "example": "0.5"}],
    "description": f"A probability: a number in [0, 1] with at most {PLACES} decimal places, as a JSON number or "
                   "a decimal string (the mechanism says whether 0 or 1 is allowed).",
})
class ProbabilityField(serializers.Field):
    """A probability parameter (theta, pi_b, p2), exact; its range is checked with the mechanism's rules."""

    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (str, int, Decimal)):
            self.fail("invalid", message="This must be a number in [0, 1].")
        try:  # text: a plain ASCII decimal (ldpmarket.numbers)
            d = parse_ascii_decimal(data.strip()) if isinstance(data, str) else Decimal(data)
        except (ArithmeticError, NumberError):
            self.fail("invalid", message="This must be a number in [0, 1].")
        if not d.is_finite() or d < 0 or d > 1:
            self.fail("invalid", message="This must be a number in [0, 1].")
        if d != d.quantize(Decimal(1).scaleb(-PLACES)):
            self.fail("invalid", message=f"This may have at most {PLACES} decimal places.")
        return d

    def to_representation(self, value):
        return str(value)


class AttributeIdField(serializers.PrimaryKeyRelatedField):
    """An attribute by id: an integer in range (checked before any query), then looked up."""

    default_error_messages = {"does_not_exist": "There is no attribute with id {pk_value}."}

    def __init__(self, **kwargs):
        kwargs.setdefault("queryset", Attribute.objects.select_related("dataset"))
        kwargs.setdefault("pk_field", StrictIntegerField(min_value=1, max_value=BIGINT_MAX))
        super().__init__(**kwargs)


def epsilon_out(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=12, decimal_places=PLACES, read_only=True, **kwargs)


def money_out(**kwargs) -> serializers.DecimalField:
    """An amount: a decimal string with exactly 4 places, never rounded (docs/money.md#how-amounts-are-shown)."""
    return MoneyField(**kwargs)


@extend_schema_field(OpenApiTypes.STR)
class CurrencyField(serializers.Field):
    """The currency of the object's amounts: the market's one currency (setting LDP_CURRENCY, docs/money.md)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", "ISO 4217 code of every amount here (setting LDP_CURRENCY).")
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, value) -> str:
        return market_currency()


# ------------------------------------------------------------------------------------------------- catalog

class BoundsSerializer(serializers.Serializer):
    low = serializers.DecimalField(max_digits=20, decimal_places=6)
    high = serializers.DecimalField(max_digits=20, decimal_places=6)


class BloomSerializer(serializers.Serializer):
    num_bits = serializers.IntegerField()
    num_hashes = serializers.IntegerField()
    num_cohorts = serializers.IntegerField()


class GridSerializer(serializers.Serializer):
    start = epsilon_out()
    step = epsilon_out()
    stop = epsilon_out()


class PricePointSerializer(serializers.Serializer):
    epsilon = epsilon_out()
    price = money_out()


class PricePolicySerializer(serializers.Serializer):
    points = PricePointSerializer(many=True, help_text="Price per value: piecewise linear through these points, "
                                                       "constant after the last; never decreasing.")
    owner_share = serializers.DecimalField(max_digits=6, decimal_places=4,
                                           help_text="The share of each payment that goes to the value's owner.")
    currency = CurrencyField()


class HistogramBucketSerializer(serializers.Serializer):
    epsilon = epsilon_out()
    available = serializers.IntegerField(help_text="How many values a purchase at this epsilon would include now.")


class AvailabilitySerializer(serializers.Serializer):
    values = serializers.IntegerField(help_text="Values a purchase at the grid's first epsilon would include now.")
    max_epsilon = epsilon_out(allow_null=True, help_text="The largest grid epsilon at which any value is available "
                                                         "now; null when none is.")
    at_max_epsilon = serializers.IntegerField(help_text="How many values are available at max_epsilon.")


class AttributeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    kind = serializers.ChoiceField(choices=Attribute.Kind.choices)
    labels = serializers.ListField(child=serializers.CharField(),
                                   help_text="The categories (categorical, binary); empty otherwise.")
    bounds = BoundsSerializer(allow_null=True, help_text="Numeric attributes: the values lie in [low, high].")
    bloom = BloomSerializer(allow_null=True, help_text="String attributes: the RAPPOR Bloom filter.")
    mechanism = serializers.ChoiceField(choices=Attribute.Mechanism.choices,
                                        help_text="gradual_rr: chains (a purchase at an epsilon). The others are "
                                                  "one-shot: every purchase draws afresh and adds its exact epsilon "
                                                  "to each value's loss.")
    sensitive = serializers.ListField(child=serializers.CharField(),
                                      help_text="uRR/uRAP: the labels protected with full epsilon-LDP; the others "
                                                "may be revealed (utility-optimized LDP).")
    pum_tags = serializers.ListField(child=serializers.CharField(),
                                     help_text="uRR/uRAP: tags owners may attach to their value to have it protected "
                                               "too; a tagged value is released as the tag's bot \"⊥tag\".")
    num_items = serializers.IntegerField(allow_null=True, help_text="Graph attributes: the number of items.")
    prior = serializers.ListField(child=serializers.FloatField(),
                                  help_text="Distribution attributes: the public prior over the labels.")
    grid = GridSerializer()
    max_epsilon = serializers.SerializerMethodField(
        help_text="The largest epsilon any purchase may ask for (and any grid, ceiling or mechanism parameter may "
                  "use): the samplers' limit, above which they could not realise the epsilon charged "
                  "(docs/mechanisms.md).")
    price_policy = PricePolicySerializer(allow_null=True, help_text="Null when the attribute is not for sale.")
    availability = AvailabilitySerializer(help_text="A summary of what is for sale now.")
    histogram = HistogramBucketSerializer(
        many=True, help_text="Values available at grid epsilons: a histogram of the owners' remaining budgets, never "
                             "raw values or owners. By default a summary of at most 5 buckets evenly spaced over the "
                             "grid; with ?histogram=full every grid point (every k-th of a long grid, at most 100).")


    @extend_schema_field({"type": "string", "example": str(MAX_SALE_EPSILON)})
    def get_max_epsilon(self, _attribute) -> str:
        return str(MAX_SALE_EPSILON)


class DatasetSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()
    attributes = AttributeSerializer(many=True)


# -------------------------------------------------------------------------------------------------- quotes

def check_cohort(attrs: dict) -> dict:
    """A cohort must exist for the attribute: RAPPOR cohorts 0..num_cohorts-1 for strings, only 0 otherwise."""
    attribute, cohort = attrs["attribute"], attrs.get("cohort")
    if cohort is not None:
        limit = attribute.num_cohorts if attribute.kind == Attribute.Kind.STRING else 1
        if cohort >= limit:
            msg = (f"This attribute's cohorts are 0 to {limit - 1}." if attribute.kind == Attribute.Kind.STRING
                   else "Only string attributes have cohorts (leave cohort out, or 0).")
            raise serializers.ValidationError({"cohort": [msg]})
    attrs["cohort"] = cohort
    return attrs


def _family_field():
    return serializers.ChoiceField(choices=[(f, f) for f in oneshot_specs.RR3_FAMILIES], required=False,
                                   help_text="RR3 attributes: ewrr3 (epsilon; p* = e^eps/(e^eps+2)) or rr3_ddagger "
                                             "(eps1, eps2). Default: ewrr3, or rr3_ddagger when eps1/eps2 are given.")


def _eps_part(name: str, what: str):
    return EpsilonField(required=False, help_text=f"RR3‡ and LPP‡: {what}. The charged epsilon is the exact level "
                                                  f"of (eps1, eps2), not their sum.")


MECHANISM_PARAMETERS = ("mechanism", "family", "eps1", "eps2", "theta", "pi_b", "p2")


def check_spec(attrs: dict, *, survey: bool = False) -> dict:
    """Cohort, then the mechanism's parameters (``market.purchases.oneshot.parse_spec``): ``attrs["spec"]`` (None: a
    chain purchase, which needs an epsilon)."""
    attrs = check_cohort(attrs)
    params = {k: attrs.get(k) for k in MECHANISM_PARAMETERS}
    try:
        spec = oneshot_specs.parse_spec(attrs["attribute"], epsilon=attrs.get("epsilon"), **params)
    except ParameterError as exc:
        raise serializers.ValidationError({exc.field: [str(exc)]}) from None
    if survey and (spec is None or not spec.is_survey):  # pragma: no cover - the mechanism field is required
        raise serializers.ValidationError({"mechanism": ["Choose a survey mechanism."]})
    if spec is not None and spec.is_survey and not survey:
        raise serializers.ValidationError({"mechanism": ["Surveys are commissioned with POST /api/v1/surveys/."]})
    if spec is None and attrs.get("epsilon") is None:
        raise serializers.ValidationError({"epsilon": ["This field is required."]})
    attrs["spec"] = spec
    return attrs


class MechanismParametersMixin(serializers.Serializer):
    """The optional parameters of one-shot mechanisms (ignored by none: a parameter that does not apply is a 400)."""

    family = _family_field()
    eps1 = _eps_part("eps1", "epsilon of reporting the state (edge or no edge)")
    eps2 = _eps_part("eps2", "epsilon of the sign (+1 or -1)")
    theta = ProbabilityField(required=False, help_text="uRAP: the probability of keeping the own sensitive bit, in "
                                                       "(0, 1) (default e^(eps/2)/(e^(eps/2)+1)).")


class _RequestBase(serializers.Serializer):
    attribute = AttributeIdField(help_text="The attribute's id (see the catalog).")
    cohort = StrictIntegerField(required=False, allow_null=True, min_value=0, max_value=COHORT_MAX,
                                      help_text="String attributes: only the values of this RAPPOR cohort.")


class PurchaseRequestSerializer(_RequestBase):
    """``{attribute, epsilon, cohort?}``: the values of an attribute (optionally one RAPPOR cohort) at one epsilon.

    Chain attributes, and the one-shot mechanisms with one epsilon: uRR, uRAP, EWRR3 (RR3) and private samples.
    """

    epsilon = EpsilonField()

    def validate(self, attrs):
        return check_spec(attrs)


class UrapRequestSerializer(PurchaseRequestSerializer):
    """``{attribute, epsilon, theta, cohort?}``: uRAP with its own keep probability."""

    theta = ProbabilityField(help_text="uRAP: the probability of keeping the own sensitive bit, in (0, 1) (default "
                                       "e^(eps/2)/(e^(eps/2)+1)).")


class TwoEpsilonRequestSerializer(_RequestBase):
    """``{attribute, eps1, eps2, family?, cohort?}``: RR3‡ (RR3 attributes) and LPP‡ (graph attributes)."""

    eps1 = EpsilonField(help_text="RR3‡ and LPP‡: epsilon of reporting the state (edge or no edge). The charged "
                                  "epsilon is the exact level of (eps1, eps2), not their sum.")
    eps2 = EpsilonField(help_text="RR3‡ and LPP‡: epsilon of the sign (+1 or -1).")
    family = serializers.ChoiceField(choices=[("rr3_ddagger", "rr3_ddagger")], required=False,
                                     help_text="RR3 attributes: rr3_ddagger (the default when eps1 and eps2 are "
                                               "given; EWRR3 takes an epsilon instead).")

    def validate(self, attrs):
        return check_spec(attrs)


class SurveyParametersMixin(serializers.Serializer):
    pi_b = ProbabilityField(required=False, help_text="Simmons: the probability that the unrelated question is "
                                                      "answered yes, in (0, 1).")
    p2 = ProbabilityField(required=False, help_text="Christofides and improved Christofides: the share of middle "
                                                    "cards (2), in [0, 1).")


class QuoteRequestSerializer(SurveyParametersMixin, MechanismParametersMixin, _RequestBase):
    """Validates a quote's request: a purchase's (any of its forms) or a survey's (``mechanism``)."""

    epsilon = EpsilonField(required=False)
    mechanism = serializers.ChoiceField(choices=[(m, m) for m in SURVEY_MECHANISMS], required=False,
                                        help_text="Quote a survey of this binary attribute with this mechanism.")

    def validate(self, attrs):
        return check_spec(attrs, survey=attrs.get("mechanism") is not None)


class ExcludedSerializer(serializers.Serializer):
    ceiling = serializers.IntegerField(help_text="Values whose ceiling is below the epsilon (charged) itself.")
    budget = serializers.IntegerField(help_text="Values whose ceiling is not below the epsilon but whose remaining "
                                                "budget (the ceiling minus what was already spent) is too small.")
    paused = serializers.IntegerField(help_text="Values whose owner paused sales.")
    withdrawn = serializers.IntegerField(help_text="Values whose owner withdrew.")
    no_raw = serializers.IntegerField(help_text="Values whose chain stops below the epsilon and whose raw datum "
                                                "was deleted, so they cannot be extended.")
    awaiting_owner = serializers.IntegerField(
        help_text="Owner-held values (docs/custody.md) whose chain, uploaded by the owner's device, stops below the "
                  "epsilon: they are sold once the owner uploads further.")


class CategoryErrorSerializer(serializers.Serializer):
    label = serializers.CharField()
    standard_error = serializers.FloatField()
    worst_case_standard_error = serializers.FloatField(allow_null=True)


class PredictedErrorSerializer(serializers.Serializer):
    target = serializers.ChoiceField(
        choices=[("frequency", "each category's frequency"), ("mean", "the mean"),
                 ("bit_frequency", "each Bloom bit's frequency"), ("proportion", "a survey's proportion"),
                 ("mean_distribution", "each label's share in the owners' average distribution"),
                 ("item_degree_weight", "LPP: each item's degree and weight (per_category: one row each)")])
    standard_error = serializers.FloatField(
        help_text="For a population spread uniformly over the categories (or the range; surveys: a proportion "
                  "of 1/2; private samples: the largest label's, for owners distributed like the prior; LPP: an "
                  "item's degree, for owners split evenly over no edge, +1 and -1).")
    worst_case_standard_error = serializers.FloatField(
        allow_null=True, help_text="The largest over every possible population (null: no closed form).")
    per_category = CategoryErrorSerializer(many=True)
    expected_l2 = serializers.FloatField(allow_null=True, required=False,
                                         help_text="uRR/uRAP: the exact expected squared l2 loss of the estimate.")
    variance = serializers.FloatField(allow_null=True, required=False, help_text="Surveys: the variance.")
    covariance = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()), allow_null=True,
                                       required=False, help_text="RR3: the estimator's covariance matrix.")


class QuoteSerializer(serializers.Serializer):
    quote = serializers.CharField(help_text="Pass this as {\"quote\": ...} to POST /api/v1/purchases/ before it "
                                            "expires.")
    attribute = serializers.IntegerField()
    epsilon = epsilon_out()
    cohort = serializers.IntegerField(allow_null=True)
    candidates = serializers.IntegerField(help_text="Values of the attribute (and cohort).")
    included = serializers.IntegerField(help_text="Values a purchase now would include.")
    excluded = ExcludedSerializer()
    price = money_out(help_text="What this buyer pays now, after upgrade credit for values already held.")
    list_price = money_out(help_text="The price without upgrade credit.")
    upgrade_credit = money_out()
    price_per_value = money_out()
    currency = CurrencyField()
    predicted_error = PredictedErrorSerializer(
        allow_null=True, help_text="The estimate's standard error: from the mechanism, epsilon and count only, so "
                                   "it reveals nothing about the data.")
    expires_at = serializers.DateTimeField()
    mechanism = serializers.ChoiceField(choices=Purchase.Mechanism.choices)
    charged_epsilon = epsilon_out(allow_null=True, help_text="One-shot and surveys: the exact epsilon each included "
                                                             "value would be charged (rounded up to 6 places). "
                                                             "Chain: the epsilon released (a value's chain loss "
                                                             "becomes max(chain loss, epsilon)).")
    guarantee = serializers.ChoiceField(choices=LedgerEntry.Guarantee.choices)
    guarantee_label = serializers.CharField()
    parameters = serializers.DictField(child=serializers.CharField())


# ----------------------------------------------------------------------------------------------- purchases

class PurchaseCreateSerializer(MechanismParametersMixin):
    """Either ``{quote}`` or ``{attribute, epsilon, cohort?}`` (plus a one-shot mechanism's parameters)."""

    quote = serializers.CharField(required=False, max_length=4000, help_text="A quote from POST /api/v1/quotes/.")
    attribute = AttributeIdField(required=False)
    epsilon = EpsilonField(required=False)
    cohort = StrictIntegerField(required=False, allow_null=True, min_value=0, max_value=COHORT_MAX)
    request_fields = ("attribute", "epsilon", "family", "eps1", "eps2", "theta")
    survey = False

    def validate(self, attrs):
        if "quote" in attrs:
            if set(self.request_fields) & attrs.keys() or attrs.get("cohort") is not None:
                raise serializers.ValidationError("Give either a quote or the request's fields, not both.")
            return attrs
        if "attribute" not in attrs:
            raise serializers.ValidationError({"attribute": ["This field is required (or give a quote)."]})
        if self.survey and attrs.get("mechanism") is None:
            raise serializers.ValidationError({"mechanism": ["This field is required (or give a quote)."]})
        return check_spec(attrs, survey=self.survey)


class PurchaseFromQuoteSerializer(serializers.Serializer):
    """``{quote}``: buy what a quote stands for, refused if the price rose above the quoted price."""

    quote = serializers.CharField(max_length=4000, help_text="A quote from POST /api/v1/quotes/.")


#: The purchase request as documented: a quote, or attribute and epsilon (or the one-shot forms);
#: ``PurchaseCreateSerializer`` validates.
PURCHASE_CREATE_REQUEST = PolymorphicProxySerializer(
    component_name="PurchaseCreateRequest",
    serializers=[PurchaseRequestSerializer, UrapRequestSerializer, TwoEpsilonRequestSerializer,
                 PurchaseFromQuoteSerializer],
    resource_type_field_name=None, many=False)


class SurveyRequestSerializer(SurveyParametersMixin):
    """``{attribute, mechanism, epsilon, cohort?, pi_b?, p2?}``: one yes/no question to every eligible owner."""

    attribute = AttributeIdField(help_text="A binary attribute: x = 1 (its second label) means member of the "
                                           "sensitive group.")
    mechanism = serializers.ChoiceField(choices=[(m, m) for m in SURVEY_MECHANISMS],
                                        help_text="The randomizing device. improved_christofides carries a distinct "
                                                  "guarantee: per-report epsilon under a non-collusion assumption.")
    epsilon = EpsilonField(help_text="Each answer's epsilon (improved Christofides: the target; the deck dealt "
                                     "may realise less, which is what is charged).")
    cohort = StrictIntegerField(required=False, allow_null=True, min_value=0, max_value=COHORT_MAX)

    def validate(self, attrs):
        return check_spec(attrs, survey=True)


class SurveyCreateSerializer(SurveyParametersMixin, PurchaseCreateSerializer):
    """Either ``{quote}`` (a survey quote) or the survey's fields."""

    mechanism = serializers.ChoiceField(choices=[(m, m) for m in SURVEY_MECHANISMS], required=False)
    request_fields = ("attribute", "epsilon", "mechanism", "pi_b", "p2", "family", "eps1", "eps2", "theta")
    survey = True


#: A quote's request as documented (``QuoteRequestSerializer`` validates).
QUOTE_REQUEST = PolymorphicProxySerializer(
    component_name="QuoteRequest",
    serializers=[PurchaseRequestSerializer, UrapRequestSerializer, TwoEpsilonRequestSerializer,
                 SurveyRequestSerializer],
    resource_type_field_name=None, many=False)

SURVEY_CREATE_REQUEST = PolymorphicProxySerializer(
    component_name="SurveyCreateRequest", serializers=[SurveyRequestSerializer, PurchaseFromQuoteSerializer],
    resource_type_field_name=None, many=False)


def chain_release(mechanism: str, guarantee: str, charged_epsilon, epsilon):
    """``(guarantee, charged epsilon)`` as the API reports them: a chain (``gradual_rr``) purchase or quote, stored
    without either, releases epsilon-LDP outputs at its epsilon, so it reports ``ldp`` and that epsilon, like a
    one-shot purchase reports its own."""
    if mechanism == Purchase.Mechanism.GRADUAL_RR and not guarantee:
        return LedgerEntry.Guarantee.LDP, (charged_epsilon if charged_epsilon is not None else epsilon)
    return guarantee, charged_epsilon


class ProgressSerializer(serializers.Serializer):
    processed = serializers.IntegerField()
    total = serializers.IntegerField()


class PurchaseSerializer(serializers.ModelSerializer):
    dataset = serializers.IntegerField(source="attribute.dataset_id", read_only=True)
    epsilon = epsilon_out(help_text="The epsilon asked for (RR3‡, LPP‡: the exact level of eps1 and eps2).")
    mechanism = serializers.ChoiceField(choices=Purchase.Mechanism.choices, read_only=True)
    parameters = serializers.DictField(read_only=True, help_text="The mechanism's parameters (one-shot and surveys).")
    charged_epsilon = epsilon_out(allow_null=True, help_text=(
        "The epsilon of the release. One-shot: the exact epsilon added to each released value's loss, rounded up to "
        "6 places. Chain (gradual_rr): the epsilon released; each value's chain loss becomes max(chain loss, "
        "epsilon), so a value already sold at or above it is charged nothing more (docs/budget-rules.md"
        "#chain-loss-the-maximum-released-epsilon). Null only while a purchase has not been priced."))
    guarantee = serializers.ChoiceField(choices=LedgerEntry.Guarantee.choices, read_only=True,
                                        help_text="What the released outputs guarantee: ldp (chain purchases and "
                                                  "most one-shot ones), uldp, or per_report_non_collusion.")
    guarantee_label = serializers.SerializerMethodField()
    excluded = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField(help_text="While pending or running: values processed so far.")
    outputs_url = serializers.SerializerMethodField()
    estimate_url = serializers.SerializerMethodField()
    price = money_out()
    currency = CurrencyField()

    class Meta:
        model = Purchase
        fields = ["id", "attribute", "dataset", "mechanism", "epsilon", "parameters", "charged_epsilon", "guarantee",
                  "guarantee_label", "cohort", "status", "idempotency_key", "candidates", "included", "excluded",
                  "new_points", "price", "currency", "error", "created_at", "completed_at", "progress", "outputs_url",
                  "estimate_url"]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.STR)
    def get_guarantee_label(self, obj):
        return oneshot_specs.guarantee_label(chain_release(obj.mechanism, obj.guarantee, obj.charged_epsilon,
                                                     obj.epsilon)[0])

    def to_representation(self, instance):
        data = super().to_representation(instance)
        guarantee, charged = chain_release(instance.mechanism, instance.guarantee, instance.charged_epsilon,
                                           instance.epsilon)
        data["guarantee"] = guarantee
        if data.get("charged_epsilon") is None and charged is not None:
            data["charged_epsilon"] = self.fields["charged_epsilon"].to_representation(charged)
        return data

    @extend_schema_field(ExcludedSerializer)
    def get_excluded(self, obj):
        return selectors.excluded_counts(obj)

    @extend_schema_field(ProgressSerializer(allow_null=True))
    def get_progress(self, obj):
        if obj.status in (Purchase.Status.COMPLETED, Purchase.Status.FAILED):
            return None

        return progress_get(obj.id) or {"processed": 0, "total": 0}

    def _url(self, name, obj):
        request = self.context.get("request")
        path = reverse(name, kwargs={"pk": obj.pk})
        return request.build_absolute_uri(path) if request is not None else path

    @extend_schema_field(OpenApiTypes.URI)
    def get_outputs_url(self, obj):
        return self._url("api:purchase-outputs", obj)

    @extend_schema_field(OpenApiTypes.URI)
    def get_estimate_url(self, obj):
        return self._url("api:purchase-estimate", obj)


# ------------------------------------------------------------------------------------------------- outputs

@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}],
                      "description": "The category label (categorical, binary), \"low\" or \"high\" (numeric: "
                                     "which bound the randomized bit stands for), or the list of randomized "
                                     "Bloom bits (string)."})
class OutputField(serializers.Field):
    def to_representation(self, value):
        return value


class OutputRowSerializer(serializers.Serializer):
    pseudonym = serializers.CharField(help_text="Stable for you across purchases, unrelated to other buyers'.")
    epsilon = epsilon_out()
    output = OutputField()


class OutputPageSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="Rows in the whole purchase.")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = OutputRowSerializer(many=True)


# ----------------------------------------------------------------------------------------------- estimates

class EpsilonGroupSerializer(serializers.Serializer):
    epsilon = serializers.FloatField()
    count = serializers.IntegerField()


class FrequencySerializer(serializers.Serializer):
    label = serializers.CharField()
    estimate = serializers.FloatField(help_text="By the response's method: unbiased (the default; may fall outside "
                                                "[0, 1]), or consistent (norm_sub, ibu: in [0, 1], summing to 1).")
    standard_error = serializers.FloatField(allow_null=True, help_text="Of the unbiased estimate; null for the "
                                                                       "consistent methods (biased: no interval).")
    ci95_low = serializers.FloatField(allow_null=True)
    ci95_high = serializers.FloatField(allow_null=True)
    projected = serializers.FloatField(help_text="Norm-Sub: the unbiased estimates projected onto the simplex.")
    maximum_likelihood = serializers.FloatField(
        allow_null=True, help_text="The maximum-likelihood (IBU) estimate; null for OUE and OLH unless "
                                   "method=ibu was asked for (it costs reports x values to compute).")


class IntervalSerializer(serializers.Serializer):
    estimate = serializers.FloatField()
    standard_error = serializers.FloatField(allow_null=True)
    ci95_low = serializers.FloatField(allow_null=True)
    ci95_high = serializers.FloatField(allow_null=True)


class BitFrequencySerializer(IntervalSerializer):
    bit = serializers.IntegerField()


class GraphItemSerializer(serializers.Serializer):
    item = serializers.CharField()
    samples = serializers.IntegerField(help_text="Reports of users who sampled this item.")
    degree = serializers.FloatField(allow_null=True, help_text="Unbiased: owners with an edge to the item.")
    degree_standard_error = serializers.FloatField(
        allow_null=True, help_text="Plug-in: the item's own samples, its estimated states (null: nobody sampled it).")
    degree_ci95_low = serializers.FloatField(allow_null=True)
    degree_ci95_high = serializers.FloatField(allow_null=True)
    weight = serializers.FloatField(allow_null=True, help_text="Unbiased: the sum of their edges' weights.")
    weight_standard_error = serializers.FloatField(allow_null=True)
    weight_ci95_low = serializers.FloatField(allow_null=True)
    weight_ci95_high = serializers.FloatField(allow_null=True)
    mean_weight = serializers.FloatField(allow_null=True, help_text="weight / degree (consistent only).")


class GraphEstimateSerializer(serializers.Serializer):
    items = GraphItemSerializer(many=True)
    users = serializers.IntegerField()
    total_degree = serializers.FloatField(allow_null=True)
    total_weight = serializers.FloatField(allow_null=True)
    vertex_pairs = serializers.IntegerField(help_text="(users + items)(users + items - 1)/2: the paper's divisor.")
    average_degree_over_vertex_pairs = serializers.FloatField(allow_null=True)
    average_weight_over_vertex_pairs = serializers.FloatField(allow_null=True)


class EstimateSerializer(serializers.Serializer):
    purchase = serializers.IntegerField()
    attribute = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=Attribute.Kind.choices)
    mechanism = serializers.ChoiceField(choices=Purchase.Mechanism.choices)
    guarantee = serializers.ChoiceField(choices=LedgerEntry.Guarantee.choices)
    n = serializers.IntegerField(help_text="Outputs the estimate uses.")
    epsilons = EpsilonGroupSerializer(many=True, help_text="How many outputs were released at each epsilon.")
    frequencies = FrequencySerializer(many=True, help_text="Categorical, binary and numeric (low/high) outputs.")
    mean = IntervalSerializer(allow_null=True, help_text="Binary: the share of the second label; numeric: the mean.")
    bits = BitFrequencySerializer(many=True, help_text="String attributes: each Bloom bit's frequency.")
    graph = GraphEstimateSerializer(allow_null=True, help_text="LPP‡: per item degree and weight.")
    method = serializers.ChoiceField(choices=[("unbiased", "unbiased"), ("norm_sub", "norm_sub"), ("ibu", "ibu")],
                                     help_text="How `estimate` was computed (docs/mechanisms-reference.md"
                                               "#consistent-estimates).")
    iterations = serializers.IntegerField(allow_null=True, help_text="IBU: its EM steps (null otherwise).")
    converged = serializers.BooleanField(allow_null=True, help_text="IBU: whether it met its tolerance (null "
                                                                    "otherwise).")


# ------------------------------------------------------------------------------------------------ surveys

class SurveyResultSerializer(serializers.Serializer):
    estimate = serializers.FloatField(help_text="Unbiased estimate of the share of respondents in the group.")
    variance = serializers.FloatField(help_text="From the mechanism's closed form (census: N answers once).")
    standard_error = serializers.FloatField()
    ci95_low = serializers.FloatField()
    ci95_high = serializers.FloatField()
    n = serializers.IntegerField(help_text="Respondents: every eligible owner answered exactly once.")
    variance_note = serializers.CharField()
    mechanism = serializers.ChoiceField(choices=[(m, m) for m in SURVEY_MECHANISMS])
    epsilon = epsilon_out(help_text="The epsilon charged for each answer.")
    guarantee = serializers.ChoiceField(choices=LedgerEntry.Guarantee.choices)
    guarantee_label = serializers.CharField()


class SurveySerializer(PurchaseSerializer):
    """A survey: the aggregate only (individual answers are never stored nor shown)."""

    respondents = serializers.IntegerField(source="included", read_only=True)
    result = serializers.SerializerMethodField()

    class Meta(PurchaseSerializer.Meta):
        fields = ["id", "attribute", "dataset", "mechanism", "epsilon", "parameters", "charged_epsilon", "guarantee",
                  "guarantee_label", "cohort", "status", "idempotency_key", "candidates", "respondents", "excluded",
                  "price", "currency", "error", "created_at", "completed_at", "progress", "result"]
        read_only_fields = fields

    @extend_schema_field(SurveyResultSerializer(allow_null=True, help_text=(
        "The aggregate: for the buyer who commissioned the survey, and staff; null for auditors (they see the "
        "bookkeeping only) and until the survey has completed.")))
    def get_result(self, obj):
        request = self.context.get("request")
        if obj.result is None or request is None or not roles.can_read_purchased_data(request.user, obj):
            return None
        return SurveyResultSerializer(obj.result).data

