"""Datasets, attributes, owners' values and their stored relaxation chains (spec service.md 1, 3)."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Length
from django.db.models.lookups import Exact

EPS = {"max_digits": 12, "decimal_places": 6}


class Dataset(models.Model):
    title = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True)
    curator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="curated_datasets")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title


class Attribute(models.Model):
    """One question of a dataset: its kind, domain, mechanism and epsilon grid.

    The grid ``grid_start, grid_start + grid_step, ...`` up to ``grid_stop`` is
    where chains are pre-generated as ceilings grow; purchases may still ask
    for any epsilon (bridged, tightened or extended).
    """

    class Kind(models.TextChoices):
        CATEGORICAL = "categorical", "Categorical"
        BINARY = "binary", "Binary"
        NUMERIC = "numeric", "Bounded numeric"
        STRING = "string", "String (RAPPOR Bloom filter)"

    class Mechanism(models.TextChoices):
        GRADUAL_RR = "gradual_rr", "Gradual-release randomized response"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="attributes")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    labels = models.JSONField(default=list, blank=True, help_text="Category labels (categorical and binary).")
    low = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    high = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    num_bits = models.PositiveSmallIntegerField(null=True, blank=True)
    num_hashes = models.PositiveSmallIntegerField(null=True, blank=True)
    num_cohorts = models.PositiveSmallIntegerField(null=True, blank=True)
    mechanism = models.CharField(max_length=32, choices=Mechanism.choices, default=Mechanism.GRADUAL_RR)
    grid_start = models.DecimalField(**EPS, default=Decimal("0.1"))
    grid_step = models.DecimalField(**EPS, default=Decimal("0.1"))
    grid_stop = models.DecimalField(**EPS, default=Decimal("10"))
    price_policy = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "name"], name="attribute_name_unique_in_dataset"),
            models.CheckConstraint(condition=Q(kind__in=["categorical", "binary", "numeric", "string"]),
                                   name="attribute_kind_valid"),
            models.CheckConstraint(condition=Q(grid_start__gte=0, grid_step__gt=0, grid_stop__gte=F("grid_start"),
                                               grid_stop__lte=700), name="attribute_grid_valid"),
            models.CheckConstraint(condition=~Q(kind="numeric") | Q(low__isnull=False, high__isnull=False,
                                                                     high__gt=F("low")),
                                   name="attribute_numeric_bounds"),
            models.CheckConstraint(
                condition=~Q(kind="string") | Q(num_bits__isnull=False, num_hashes__isnull=False,
                                                num_cohorts__isnull=False, num_bits__gte=8, num_hashes__gte=1,
                                                num_cohorts__gte=1),
                name="attribute_string_bloom"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset.title} / {self.name}"

    @property
    def domain_size(self) -> int:
        """``m`` of the mechanism: categories, or 2 for binary, discretized numeric and Bloom bits."""
        return len(self.labels) if self.kind == self.Kind.CATEGORICAL else 2

    @property
    def width(self) -> int:
        """Outputs per chain step: 1, or the Bloom filter's bits for strings."""
        return self.num_bits if self.kind == self.Kind.STRING else 1


class Value(models.Model):
    """An owner's datum for one attribute.

    ``raw_sealed`` is the raw value (Fernet, for the owner's eyes);
    ``input_sealed`` is the mechanism's input (category index, discretized
    bit, or Bloom bits) sealed by ``market.sealing`` so chains can be extended
    in vectorized batches.  Both are deleted together when the owner deletes
    the raw value; the chain stays sellable up to its head.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="values")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="values")
    raw_sealed = models.BinaryField(null=True, editable=False)
    input_sealed = models.BinaryField(null=True, editable=False)
    cohort = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    raw_deleted_at = models.DateTimeField(null=True, blank=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "attribute"], name="value_one_per_owner_attribute"),
            models.CheckConstraint(
                condition=Q(raw_sealed__isnull=True, input_sealed__isnull=True, raw_deleted_at__isnull=False)
                | Q(raw_sealed__isnull=False, input_sealed__isnull=False, raw_deleted_at__isnull=True),
                name="value_raw_and_input_together"),
        ]


class Chain(models.Model):
    """The stored relaxation chain of a value, compact (spec service.md section 1).

    ``epsilons``: little-endian int64 micro-epsilons, strictly increasing.
    ``outputs``: little-endian int16 outputs, ``width`` per step, same order.
    ``head`` is the last epsilon; ``head_output`` the last step's outputs.
    """

    value = models.OneToOneField(Value, on_delete=models.CASCADE, primary_key=True, related_name="chain")
    epsilons = models.BinaryField()
    outputs = models.BinaryField()
    length = models.PositiveIntegerField()
    head = models.DecimalField(**EPS)
    head_output = models.BinaryField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(length__gte=1, head__gte=0), name="chain_nonempty"),
            models.CheckConstraint(condition=Exact(Length("epsilons"), F("length") * 8), name="chain_epsilons_length"),
            models.CheckConstraint(condition=Exact(Length("outputs"), F("length") * Length("head_output")),
                                   name="chain_outputs_length"),
        ]


class Purchase(models.Model):
    """A buyer's purchase of one attribute at one epsilon (spec service.md section 4).

    The row is created first (idempotency key claimed), then filled by one
    transaction that releases every included value; a purchase is either
    completed with all its releases, ledger entries and money movements, or
    has none of them.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"

    buyer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="purchases")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="purchases")
    epsilon = models.DecimalField(**EPS)
    cohort = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    idempotency_key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    candidates = models.PositiveIntegerField(default=0)
    included = models.PositiveIntegerField(default=0)
    excluded_ceiling = models.PositiveIntegerField(default=0)
    excluded_paused = models.PositiveIntegerField(default=0)
    excluded_withdrawn = models.PositiveIntegerField(default=0)
    excluded_no_raw = models.PositiveIntegerField(default=0)
    new_points = models.PositiveIntegerField(default=0)
    price = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["buyer", "idempotency_key"], name="purchase_idempotency_key_unique"),
            models.CheckConstraint(condition=Q(epsilon__gt=0, epsilon__lte=700), name="purchase_epsilon_range"),
            models.CheckConstraint(condition=Q(price__gte=0), name="purchase_price_nonnegative"),
            models.CheckConstraint(condition=Q(included__lte=F("candidates")), name="purchase_counts_consistent"),
        ]


class PurchaseChunk(models.Model):
    """Released outputs of a purchase, in chunks: value ids (int64) and outputs (int16, width each)."""

    purchase = models.ForeignKey(Purchase, on_delete=models.CASCADE, related_name="chunks")
    seq = models.PositiveIntegerField()
    count = models.PositiveIntegerField()
    value_ids = models.BinaryField()
    outputs = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["purchase", "seq"], name="purchase_chunk_seq_unique")]


class Holding(models.Model):
    """The highest epsilon a buyer holds for a value: the basis of upgrade credit."""

    buyer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="holdings")
    value = models.ForeignKey(Value, on_delete=models.CASCADE, related_name="holdings")
    epsilon = models.DecimalField(**EPS)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["buyer", "value"], name="holding_unique"),
                       models.CheckConstraint(condition=Q(epsilon__gt=0), name="holding_epsilon_positive")]
