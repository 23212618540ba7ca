"""Datasets, attributes, owners' values and their stored relaxation chains (docs/architecture.md#apps-and-models)."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Length
from django.db.models.lookups import Exact
from django.utils import timezone

from ldpmarket.keys import newest_value_key_id
from mechanisms import registry
from mechanisms.release_stats import Shape

EPS = {"max_digits": 12, "decimal_places": 6}


class Dataset(models.Model):
    title = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True)
    curator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="curated_datasets")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title


#: Attribute mechanisms without a relaxation chain: every release is a fresh draw charged to ``oneshot_loss``.
ONESHOT_MECHANISMS = registry.ONESHOT_CODES
#: Survey mechanisms (a buyer commissions one question over a cohort of a binary attribute; aggregate only).
SURVEY_MECHANISMS = registry.SURVEY_CODES


def mechanism_choices(records, label) -> type[models.TextChoices]:
    """Choices derived from the mechanism registry (``mechanisms.registry``,
    docs/mechanisms.md#the-mechanism-registry)."""
    return models.TextChoices("Mechanism", [(r.code.upper(), (r.code, label(r))) for r in records])


def _by(records, key) -> dict:
    groups: dict = {}
    for r in records:
        groups.setdefault(key(r), []).append(r.code)
    return groups


def _mechanism_fits_kind() -> Q:
    """An attribute's mechanism is one whose record lists its kind (``registry.Mechanism.kinds``)."""
    q = Q()
    for kinds, codes in _by(registry.ATTRIBUTE_MECHANISMS, lambda r: r.kinds).items():
        mech = {"mechanism": codes[0]} if len(codes) == 1 else {"mechanism__in": codes}
        q |= Q(**mech, **({"kind": kinds[0]} if len(kinds) == 1 else {"kind__in": list(kinds)}))
    return q


def _guarantee_fits_mechanism() -> Q:
    """A purchase's guarantee is its mechanism's (``registry.Mechanism.guarantee``); chain purchases carry none,
    and no charged epsilon or survey result."""
    q = Q(mechanism=registry.GRADUAL_RR.code, guarantee="", charged_epsilon__isnull=True, result__isnull=True)
    oneshot = [r for r in registry.RECORDS if r.is_oneshot]
    for guarantee, codes in _by(oneshot, lambda r: r.guarantee).items():
        q |= (Q(mechanism__in=codes, guarantee=guarantee) if len(codes) > 1
              else Q(mechanism=codes[0], guarantee=guarantee))
    return q
#: Most items of a graph attribute and labels of a distribution attribute (sealed inputs stay small).
MAX_ITEMS = 1000


class Attribute(models.Model):
    """One question of a dataset: its kind, domain, mechanism and epsilon grid.

    The grid ``grid_start, grid_start + grid_step, ...`` up to ``grid_stop`` is
    where chains are pre-generated as ceilings grow; purchases may still ask
    for any epsilon (bridged, tightened or extended).

    One-shot mechanisms (docs/budget-rules.md#one-shot-losses-add-up) have no chain: ``urr`` and
    ``urap`` (categorical, with a non-empty ``sensitive`` set of labels and
    optional ``pum_tags``), ``rr3`` (``ternary``: three states), ``lpp``
    (``graph``: weighted edges to ``num_items`` items) and ``private_sample``
    (``distribution``: a probability vector over ``labels``, with the public
    ``prior``).  Their grid only shapes the catalog's histogram.
    """

    class Kind(models.TextChoices):
        CATEGORICAL = "categorical", "Categorical"
        BINARY = "binary", "Binary"
        NUMERIC = "numeric", "Bounded numeric"
        STRING = "string", "String (RAPPOR Bloom filter)"
        TERNARY = "ternary", "Three states (RR3)"
        GRAPH = "graph", "Weighted edges to items (bipartite graph, LPP)"
        DISTRIBUTION = "distribution", "Probability distribution over labels (private sampling)"

    Mechanism = mechanism_choices(registry.ATTRIBUTE_MECHANISMS, lambda r: r.title)

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
    sensitive = models.JSONField(default=list, blank=True,
                                 help_text="uRR/uRAP: the labels protected with full epsilon-LDP (non-empty).")
    pum_tags = models.JSONField(default=list, blank=True,
                                help_text="uRR/uRAP: public names of the tags owners may attach to their value "
                                          "(personalized mechanism, PUM), e.g. [\"home\", \"workplace\"].")
    num_items = models.PositiveIntegerField(null=True, blank=True, help_text="Graph attributes: the items.")
    prior = models.JSONField(default=list, blank=True,
                             help_text="Distribution attributes: the public prior over the labels (positive, "
                                       "summing to 1).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "name"], name="attribute_name_unique_in_dataset"),
            models.CheckConstraint(condition=Q(kind__in=["categorical", "binary", "numeric", "string", "ternary",
                                                         "graph", "distribution"]),
                                   name="attribute_kind_valid"),
            models.CheckConstraint(condition=_mechanism_fits_kind(), name="attribute_mechanism_fits_kind"),
            models.CheckConstraint(
                condition=(Q(mechanism__in=list(registry.SENSITIVE_CODES)) & ~Q(sensitive=[]))
                | (~Q(mechanism__in=list(registry.SENSITIVE_CODES)) & Q(sensitive=[], pum_tags=[])),
                name="attribute_sensitive_for_uldp"),
            models.CheckConstraint(
                condition=(Q(kind="graph", num_items__isnull=False, num_items__gte=1, num_items__lte=MAX_ITEMS))
                | (~Q(kind="graph") & Q(num_items__isnull=True)),
                name="attribute_graph_items"),
            models.CheckConstraint(condition=(Q(kind="distribution") & ~Q(prior=[]))
                                   | (~Q(kind="distribution") & Q(prior=[])),
                                   name="attribute_distribution_prior"),
            models.CheckConstraint(condition=Q(grid_start__gte=0, grid_step__gt=0, grid_stop__gte=F("grid_start"),
                                               grid_stop__lte=30), name="attribute_grid_valid"),
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
        """``m``, the size of the domain the mechanism randomizes: the labels of a categorical or distribution
        attribute; 3 states for a ternary value and for each item of a graph value (none, +1, -1); 2 for binary,
        discretized numeric and each Bloom bit of a string."""
        if self.kind in (self.Kind.CATEGORICAL, self.Kind.DISTRIBUTION):
            return len(self.labels)
        if self.kind in (self.Kind.TERNARY, self.Kind.GRAPH):
            return 3
        return 2

    @property
    def record(self) -> registry.Mechanism:
        """The attribute's mechanism in the registry (docs/mechanisms.md#the-mechanism-registry)."""
        return registry.get(self.mechanism)

    @property
    def is_oneshot(self) -> bool:
        """Whether values have no chain and every release is a one-shot draw
        (docs/budget-rules.md#one-shot-losses-add-up)."""
        return registry.get(self.mechanism).is_oneshot

    @property
    def supports_owner_custody(self) -> bool:
        """Whether owners may keep their value on their device (docs/custody.md): a gradual-release chain of one
        k-RR output per value over the attribute's labels (categorical and binary attributes), of the discretized
        bit (numeric), or one binary chain per Bloom bit drawn at ``epsilon / draw_divisor`` (strings)."""
        if self.is_oneshot:
            return False
        if self.kind in (self.Kind.NUMERIC, self.Kind.STRING):
            return True
        return self.kind in (self.Kind.CATEGORICAL, self.Kind.BINARY) and self.width == 1 and self.draw_divisor == 1

    @property
    def domain_labels(self) -> list[str]:
        """The names of the domain: the labels, or "0".."m-1" for a binary, ternary or graph attribute without
        labels of its own."""
        defaults = {self.Kind.BINARY: 2, self.Kind.TERNARY: 3, self.Kind.GRAPH: self.num_items or 0}
        if self.kind in defaults:
            n = defaults[self.kind]
            return list(self.labels) if len(self.labels) == n else [str(j) for j in range(n)]
        return list(self.labels)

    @property
    def shape(self) -> Shape:
        """The public facts a mechanism reads (``mechanisms.release_stats.Shape``)."""
        labels = list(self.labels)
        sensitive = tuple(sorted(labels.index(x) for x in self.sensitive if x in labels)) if self.sensitive else ()
        return Shape(kind=self.kind, labels=tuple(self.domain_labels), sensitive=sensitive,
                     pum_tags=tuple(self.pum_tags or ()), num_items=self.num_items,
                     prior=tuple(float(x) for x in self.prior) if self.prior else ())

    @property
    def draw_divisor(self) -> int:
        """How many of one release's outputs two owners' values can differ in: a purchase at epsilon draws
        each output at ``epsilon / draw_divisor`` so the release as a whole is epsilon-LDP.  ``2 num_hashes``
        for strings (two strings' Bloom filters differ in at most that many bits), 1 otherwise
        (docs/mechanisms.md, "Strings")."""
        return 2 * self.num_hashes if self.kind == self.Kind.STRING else 1

    @property
    def width(self) -> int:
        """Outputs per release: 1; the Bloom filter's bits for strings; the uRAP bit vector (labels and PUM
        bots) for uRAP; 2 (item, state) for LPP."""
        if self.kind == self.Kind.STRING:
            return self.num_bits
        return registry.get(self.mechanism).width(self.shape)


class ChainBlock(models.Model):
    """Up to ``capacity`` values of one gradual-release attribute, in the order they arrived
    (docs/architecture.md#chains-in-blocks).  A value's ``(block, slot)`` never changes.

    ``heads``: little-endian int64 per slot, the micro-epsilon of the slot's highest stored point (0: an empty
    slot).  Heads are public facts (a chain's highest pre-generated epsilon, as the ceiling and the loss are);
    the outputs are in the block's sealed ``ChainPoint`` rows.  ``revision`` grows with every write: a writer
    updates the row only at the revision it read, so two writers never both extend a slot's head.
    """

    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="chain_blocks", db_index=False)
    index = models.PositiveIntegerField()
    capacity = models.PositiveIntegerField()
    size = models.PositiveIntegerField(default=0)
    heads = models.BinaryField()
    revision = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["attribute", "index"], name="chain_block_index_unique"),
            models.CheckConstraint(condition=Q(capacity__gte=1, size__lte=F("capacity")), name="chain_block_size"),
            models.CheckConstraint(condition=Exact(Length("heads"), F("capacity") * 8),
                                   name="chain_block_heads_length"),
        ]

    def __str__(self) -> str:
        return f"Chain block {self.index} of attribute #{self.attribute_id} ({self.size} of {self.capacity} slots)"


class ChainPoint(models.Model):
    """One stored epsilon of a block's chains: the outputs of the block's slots at ``epsilon`` (micro-epsilons),
    sealed at rest (``market.values.sealing.seal_points``: AES-256-GCM bound to the row's attribute, block, epsilon and
    ``present`` bitmap).  ``present``: one bit per slot (LSB first), set where the slot has a point here.

    ``UNIQUE (block, epsilon)``: a point is inserted once; a writer adding slots to an existing point updates it
    only at the ``revision`` it read.  Either way a second writer working from the same state is refused, so a
    chain never forks, even without the attribute's chain lock (docs/architecture.md#chains-in-blocks).
    """

    block = models.ForeignKey(ChainBlock, on_delete=models.CASCADE, related_name="points", db_index=False)
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="+", db_index=False)
    epsilon = models.BigIntegerField()
    present = models.BinaryField()
    sealed = models.BinaryField()
    revision = models.PositiveIntegerField(default=0)
    #: The id of the value key that sealed ``sealed`` (``market.values.sealing``, docs/security.md#keys).
    value_key_id = models.IntegerField(default=newest_value_key_id, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["block", "epsilon"], name="chain_point_unique"),
            models.CheckConstraint(condition=Q(epsilon__gte=0, epsilon__lte=700_000_000), name="chain_point_epsilon"),
        ]

    def __str__(self) -> str:
        return f"Point at {self.epsilon / 1e6:g} of chain block #{self.block_id}"


class Value(models.Model):
    """An owner's datum for one attribute.

    ``raw_sealed`` is the raw value (Fernet, for the owner's eyes);
    ``input_sealed`` is the mechanism's input (category index, discretized
    bit, or Bloom bits) sealed by ``market.values.sealing`` so chains can be extended
    in vectorized batches.  Both are deleted together when the owner deletes
    the raw value; the chain (slot ``slot`` of ``block``) stays sellable up to its head.

    ``custody`` (docs/custody.md): ``service`` values are held as above; ``owner`` values never reach the
    service: neither column is ever set, the owner's device uploads the chain up to an *upload level* (the
    chain's head), and the service sells the value only up to it.
    """

    class Custody(models.TextChoices):
        SERVICE = "service", "Held by the service"
        OWNER = "owner", "Held on the owner's device"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="values")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="values")
    raw_sealed = models.BinaryField(null=True, editable=False)
    input_sealed = models.BinaryField(null=True, editable=False)
    cohort = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    raw_deleted_at = models.DateTimeField(null=True, blank=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    # Gradual release: the value's chain is slot ``slot`` of ``block`` (docs/architecture.md#chains-in-blocks).
    block = models.ForeignKey(ChainBlock, null=True, blank=True, on_delete=models.PROTECT, related_name="values",
                              db_index=False)
    slot = models.PositiveIntegerField(null=True, blank=True)
    custody = models.CharField(max_length=8, choices=Custody.choices, default=Custody.SERVICE,
                               db_default=Custody.SERVICE)
    #: The id of the value key that sealed ``raw_sealed`` and ``input_sealed`` (always together; meaningless while
    #: they are NULL): ``market.values.sealing``, docs/security.md#keys.
    value_key_id = models.IntegerField(default=newest_value_key_id, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "attribute"], name="value_one_per_owner_attribute"),
            models.CheckConstraint(
                condition=Q(custody="service", raw_sealed__isnull=True, input_sealed__isnull=True,
                            raw_deleted_at__isnull=False)
                | Q(custody="service", raw_sealed__isnull=False, input_sealed__isnull=False,
                    raw_deleted_at__isnull=True)
                | Q(custody="owner", raw_sealed__isnull=True, input_sealed__isnull=True, raw_deleted_at__isnull=True,
                    block__isnull=False),
                name="value_raw_and_input_together"),
            models.UniqueConstraint(fields=["block", "slot"], name="value_block_slot_unique"),
            models.CheckConstraint(condition=Q(block__isnull=True, slot__isnull=True)
                                   | Q(block__isnull=False, slot__isnull=False), name="value_block_and_slot_together"),
        ]

    def __str__(self) -> str:
        return f"Value #{self.pk} (attribute #{self.attribute_id}, owner #{self.owner_id})"


class Purchase(models.Model):
    """A buyer's purchase of one attribute at one epsilon (docs/architecture.md#the-path-of-a-purchase).

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

    Mechanism = mechanism_choices(registry.RECORDS, lambda r: r.short)

    buyer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="purchases")
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="purchases")
    epsilon = models.DecimalField(**EPS)
    cohort = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    idempotency_key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    candidates = models.PositiveIntegerField(default=0)
    included = models.PositiveIntegerField(default=0)
    excluded_ceiling = models.PositiveIntegerField(default=0)  # the ceiling is below the epsilon itself
    # the ceiling is not below the epsilon, but the remaining budget (ceiling minus loss) is too small
    excluded_budget = models.PositiveIntegerField(default=0)
    excluded_paused = models.PositiveIntegerField(default=0)
    excluded_withdrawn = models.PositiveIntegerField(default=0)
    excluded_no_raw = models.PositiveIntegerField(default=0)
    excluded_awaiting_owner = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Owner-held values whose uploaded chain stops below the epsilon.")
    new_points = models.PositiveIntegerField(default=0)
    price = models.DecimalField(max_digits=16, decimal_places=4, default=Decimal(0))
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # One-shot releases and surveys (docs/budget-rules.md#one-shot-losses-add-up); a chain purchase keeps the defaults.
    mechanism = models.CharField(max_length=32, choices=Mechanism.choices, default=Mechanism.GRADUAL_RR)
    parameters = models.JSONField(default=dict, blank=True,
                                  help_text="The mechanism's parameters as requested (eps1/eps2, family, theta, pi_b, "
                                            "p2) and as realised (an IC deck's card counts).")
    charged_epsilon = models.DecimalField(
        **EPS, null=True, blank=True,
        help_text="One-shot: the exact epsilon charged to each released value's oneshot_loss, rounded up to 6 "
                  "decimal places (never under-charged). Set when the purchase completes.")
    guarantee = models.CharField(max_length=32, blank=True, default="",
                                 help_text="One-shot: ldp, uldp, or per_report_non_collusion (improved "
                                           "Christofides); empty for chain purchases.")
    result = models.JSONField(null=True, blank=True,
                              help_text="Surveys: the aggregate estimate (the only thing a survey releases).")
    # Recovery (market.sweeper, docs/operations.md): when the purchase was last claimed, started or sent again,
    # and how many times a worker started it.  Pending or running, not held (its row unlocked) and with a
    # heartbeat older than LDP_STALE_AFTER_SECONDS, it is stranded: the sweeper sends it again or fails it.
    heartbeat_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["heartbeat_at"], condition=Q(status__in=["pending", "running"]),
                                name="purchase_unfinished_heartbeat")]
        constraints = [
            models.UniqueConstraint(fields=["buyer", "idempotency_key"], name="purchase_idempotency_key_unique"),
            models.CheckConstraint(condition=Q(epsilon__gt=0, epsilon__lte=700), name="purchase_epsilon_range"),
            models.CheckConstraint(condition=Q(price__gte=0), name="purchase_price_nonnegative"),
            models.CheckConstraint(condition=Q(included__lte=F("candidates")), name="purchase_counts_consistent"),
            models.CheckConstraint(condition=_guarantee_fits_mechanism(), name="purchase_guarantee_fits_mechanism"),
            models.CheckConstraint(
                condition=Q(charged_epsilon__isnull=True)
                | Q(charged_epsilon__isnull=False, charged_epsilon__gt=0, charged_epsilon__lte=700),
                name="purchase_charged_epsilon_range"),
            models.CheckConstraint(
                condition=~Q(status="completed") | Q(mechanism="gradual_rr") | Q(charged_epsilon__isnull=False),
                name="purchase_oneshot_completed_charged"),
        ]

    @property
    def is_survey(self) -> bool:
        return self.mechanism in SURVEY_MECHANISMS

    @property
    def is_oneshot(self) -> bool:
        return registry.get(self.mechanism).is_oneshot

    def __str__(self) -> str:
        return f"Purchase #{self.pk} ({self.get_mechanism_display()} at ε {self.epsilon.normalize():f}, {self.status})"


class PurchaseChunk(models.Model):
    """Released outputs of a purchase, in chunks: value ids (int64) and outputs (int16, width each, sealed at rest:
    ``market.values.sealing.seal_released``)."""

    # No index of its own: the (purchase, seq) unique index serves every lookup by purchase.
    purchase = models.ForeignKey(Purchase, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    #: The purchase's attribute, the table's distribution column (docs/architecture.md#scaling-out); a trigger keeps it
    #: equal to the purchase's on PostgreSQL (accounts migration 0019).
    attribute = models.ForeignKey(Attribute, on_delete=models.PROTECT, related_name="+", db_index=False)
    seq = models.PositiveIntegerField()
    count = models.PositiveIntegerField()
    value_ids = models.BinaryField()
    outputs = models.BinaryField()
    #: The id of the value key that sealed ``outputs`` (``market.values.sealing``, docs/security.md#keys).
    value_key_id = models.IntegerField(default=newest_value_key_id, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["purchase", "seq"], name="purchase_chunk_seq_unique")]

    def __str__(self) -> str:
        return f"Chunk {self.seq} of purchase #{self.purchase_id} ({self.count} outputs)"
