"""Serializers of the buyer API (spec service.md section 4).

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

from accounts.epsilon import MAX_EPSILON, PLACES, EpsilonError, parse
from market.models import Attribute, Purchase

BIGINT_MAX = 2 ** 63 - 1
COHORT_MAX = 32767


# ------------------------------------------------------------------------------------------------- fields

@extend_schema_field({
    "oneOf": [{"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": float(MAX_EPSILON)},
              {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*$", "example": "0.5"}],
    "description": f"A finite number in (0, {MAX_EPSILON}] with at most {PLACES} decimal places, "
                   "as a JSON number or a decimal string.",
})
class EpsilonField(serializers.Field):
    """An epsilon from user input: exact (``Decimal``), > 0, <= 700, at most 6 decimals; clear messages otherwise."""

    default_error_messages = {"invalid": "{message}"}

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = data.strip()
        try:
            return parse(data, name="epsilon", allow_zero=False)
        except EpsilonError as exc:
            self.fail("invalid", message=str(exc))

    def to_representation(self, value):
        return str(Decimal(value).quantize(Decimal(1).scaleb(-PLACES)))


class AttributeIdField(serializers.PrimaryKeyRelatedField):
    """An attribute by id: an integer in range (checked before any query), then looked up."""

    default_error_messages = {"does_not_exist": "There is no attribute with id {pk_value}."}

    def __init__(self, **kwargs):
        kwargs.setdefault("queryset", Attribute.objects.select_related("dataset"))
        kwargs.setdefault("pk_field", serializers.IntegerField(min_value=1, max_value=BIGINT_MAX))
        super().__init__(**kwargs)


def epsilon_out(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=12, decimal_places=PLACES, read_only=True, **kwargs)


def money_out(**kwargs) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=16, decimal_places=4, read_only=True, **kwargs)


# ------------------------------------------------------------------------------------------------ problems

class ProblemSerializer(serializers.Serializer):
    """An error, RFC 9457 ``application/problem+json``."""

    type = serializers.CharField(help_text="A URI identifying the kind of problem (about:blank: see the status).")
    title = serializers.CharField(help_text="A short summary of the kind of problem.")
    status = serializers.IntegerField(help_text="The HTTP status code.")
    detail = serializers.CharField(help_text="What went wrong with this request, in plain words.")
    instance = serializers.CharField(required=False, help_text="The request path.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False,
        help_text="For invalid input: the messages for each field (non_field_errors: for the request as a whole).")


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


class HistogramBucketSerializer(serializers.Serializer):
    epsilon = epsilon_out()
    available = serializers.IntegerField(help_text="How many values a purchase at this epsilon would include now.")


class AttributeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    kind = serializers.ChoiceField(choices=Attribute.Kind.choices)
    labels = serializers.ListField(child=serializers.CharField(),
                                   help_text="The categories (categorical, binary); empty otherwise.")
    bounds = BoundsSerializer(allow_null=True, help_text="Numeric attributes: the values lie in [low, high].")
    bloom = BloomSerializer(allow_null=True, help_text="String attributes: the RAPPOR Bloom filter.")
    mechanism = serializers.ChoiceField(choices=Attribute.Mechanism.choices)
    grid = GridSerializer()
    price_policy = PricePolicySerializer(allow_null=True, help_text="Null when the attribute is not for sale.")
    histogram = HistogramBucketSerializer(
        many=True, help_text="Values available at each grid epsilon (every k-th point of a long grid): a histogram "
                             "of the owners' ceilings, never raw values or owners.")


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


class PurchaseRequestSerializer(serializers.Serializer):
    """``{attribute, epsilon, cohort?}``: the values of an attribute (optionally one RAPPOR cohort) at one epsilon."""

    attribute = AttributeIdField(help_text="The attribute's id (see the catalog).")
    epsilon = EpsilonField()
    cohort = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=COHORT_MAX,
                                      help_text="String attributes: only the values of this RAPPOR cohort.")

    def validate(self, attrs):
        return check_cohort(attrs)


class QuoteRequestSerializer(PurchaseRequestSerializer):
    pass


class ExcludedSerializer(serializers.Serializer):
    ceiling = serializers.IntegerField(help_text="Values whose ceiling is below the epsilon.")
    paused = serializers.IntegerField(help_text="Values whose owner paused sales.")
    withdrawn = serializers.IntegerField(help_text="Values whose owner withdrew.")
    no_raw = serializers.IntegerField(help_text="Values whose chain stops below the epsilon and whose raw datum "
                                                "was deleted, so they cannot be extended.")


class CategoryErrorSerializer(serializers.Serializer):
    label = serializers.CharField()
    standard_error = serializers.FloatField()
    worst_case_standard_error = serializers.FloatField()


class PredictedErrorSerializer(serializers.Serializer):
    target = serializers.ChoiceField(
        choices=[("frequency", "each category's frequency"), ("mean", "the mean"),
                 ("bit_frequency", "each Bloom bit's frequency")])
    standard_error = serializers.FloatField(
        help_text="For a population spread uniformly over the categories (or the range).")
    worst_case_standard_error = serializers.FloatField(help_text="The largest over every possible population.")
    per_category = CategoryErrorSerializer(many=True)


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
    predicted_error = PredictedErrorSerializer(
        allow_null=True, help_text="The estimate's standard error: from the mechanism, epsilon and count only, so "
                                   "it reveals nothing about the data.")
    expires_at = serializers.DateTimeField()


# ----------------------------------------------------------------------------------------------- purchases

class PurchaseCreateSerializer(serializers.Serializer):
    """Either ``{quote}`` or ``{attribute, epsilon, cohort?}``."""

    quote = serializers.CharField(required=False, max_length=4000, help_text="A quote from POST /api/v1/quotes/.")
    attribute = AttributeIdField(required=False)
    epsilon = EpsilonField(required=False)
    cohort = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=COHORT_MAX)

    def validate(self, attrs):
        if "quote" in attrs:
            if {"attribute", "epsilon"} & attrs.keys() or attrs.get("cohort") is not None:
                raise serializers.ValidationError("Give either a quote or attribute and epsilon, not both.")
            return attrs
        missing = [f for f in ("attribute", "epsilon") if f not in attrs]
        if missing:
            raise serializers.ValidationError({f: ["This field is required (or give a quote)."] for f in missing})
        return check_cohort(attrs)


class PurchaseFromQuoteSerializer(serializers.Serializer):
    """``{quote}``: buy what a quote stands for, refused if the price rose above the quoted price."""

    quote = serializers.CharField(max_length=4000, help_text="A quote from POST /api/v1/quotes/.")


#: The purchase request as documented: a quote, or attribute and epsilon (``PurchaseCreateSerializer`` validates).
PURCHASE_CREATE_REQUEST = PolymorphicProxySerializer(
    component_name="PurchaseCreateRequest", serializers=[PurchaseRequestSerializer, PurchaseFromQuoteSerializer],
    resource_type_field_name=None, many=False)


class ProgressSerializer(serializers.Serializer):
    processed = serializers.IntegerField()
    total = serializers.IntegerField()


class PurchaseSerializer(serializers.ModelSerializer):
    dataset = serializers.IntegerField(source="attribute.dataset_id", read_only=True)
    epsilon = epsilon_out()
    excluded = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField(help_text="While pending or running: values processed so far.")
    outputs_url = serializers.SerializerMethodField()
    estimate_url = serializers.SerializerMethodField()

    class Meta:
        model = Purchase
        fields = ["id", "attribute", "dataset", "epsilon", "cohort", "status", "idempotency_key", "candidates",
                  "included", "excluded", "new_points", "price", "error", "created_at", "completed_at", "progress",
                  "outputs_url", "estimate_url"]
        read_only_fields = fields

    @extend_schema_field(ExcludedSerializer)
    def get_excluded(self, obj):
        return {"ceiling": obj.excluded_ceiling, "paused": obj.excluded_paused, "withdrawn": obj.excluded_withdrawn,
                "no_raw": obj.excluded_no_raw}

    @extend_schema_field(ProgressSerializer(allow_null=True))
    def get_progress(self, obj):
        if obj.status in (Purchase.Status.COMPLETED, Purchase.Status.FAILED):
            return None
        from market.selectors import progress_get

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
    estimate = serializers.FloatField(help_text="Unbiased; may fall outside [0, 1].")
    standard_error = serializers.FloatField()
    ci95_low = serializers.FloatField()
    ci95_high = serializers.FloatField()
    projected = serializers.FloatField(help_text="The unbiased estimates projected onto the simplex.")
    maximum_likelihood = serializers.FloatField()


class IntervalSerializer(serializers.Serializer):
    estimate = serializers.FloatField()
    standard_error = serializers.FloatField()
    ci95_low = serializers.FloatField()
    ci95_high = serializers.FloatField()


class BitFrequencySerializer(IntervalSerializer):
    bit = serializers.IntegerField()


class EstimateSerializer(serializers.Serializer):
    purchase = serializers.IntegerField()
    attribute = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=Attribute.Kind.choices)
    n = serializers.IntegerField(help_text="Outputs the estimate uses.")
    epsilons = EpsilonGroupSerializer(many=True, help_text="How many outputs were released at each epsilon.")
    frequencies = FrequencySerializer(many=True, help_text="Categorical, binary and numeric (low/high) outputs.")
    mean = IntervalSerializer(allow_null=True, help_text="Binary: the share of the second label; numeric: the mean.")
    bits = BitFrequencySerializer(many=True, help_text="String attributes: each Bloom bit's frequency.")


# ------------------------------------------------------------------------------------------------ tokens

class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as the header Authorization: Token <token>.")
