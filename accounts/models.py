"""Users and roles; privacy budgets; the append-only, hash-chained privacy ledger; money.

Invariants of docs/budget-rules.md#budgets-and-ceilings are CHECK constraints here wherever a
single row can express them; the services keep the rest (with row locks) and
``audit.budget_audit`` re-proves everything from the ledger.
"""
from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models, transaction
from django.db.models import F, Q
from django.db.models.functions import Length, Round
from django.db.models.lookups import Exact

from accounts.money.format import format_money
from ldpmarket.storage import Int64ArrayField, value_ranges_overlap

EPS = {"max_digits": 12, "decimal_places": 6}
MONEY = {"max_digits": 16, "decimal_places": 4}


def _sum6(a: str, b: str):
    """A sum of two 6-place epsilons in a CHECK, rounded to 6 places: exact on PostgreSQL (NUMERIC); on SQLite,
    which stores decimals as doubles, the nearest double of the exact sum, so it compares equal to a stored value
    (``0.1 + 0.2`` must not exceed a ceiling of ``0.3``)."""
    return Round(F(a) + F(b), 6)


class User(AbstractUser):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        BUYER = "buyer", "Buyer"
        AUDITOR = "auditor", "Auditor"
        STAFF = "staff", "Staff"

    role = models.CharField(
        max_length=16, choices=Role.choices, default=Role.OWNER,
        help_text="What this account may do. Owner: contributes values and uses the owner portal for them. "
                  "Buyer: buys data and commissions surveys through the API. Auditor: reads the admin console, "
                  "the audit pages and the audit API, never raw values or purchased data, and changes nothing. "
                  "Staff: reads everything and curates datasets, attributes and users. Auditors and staff may "
                  "sign in to this console (see docs/security.md, \"Roles\").")
    organisation = models.CharField(max_length=200, blank=True, help_text="Shown to owners for buyers' purchases.")
    #: A buyer account may buy once the operator approved it (docs/security.md#buyer-accounts): a buyer who signed
    #: up alone waits with both empty; ``accounts.services.buyer_approve`` sets them.  Only buyers are approved
    #: (CHECK): another role has no approval, and changing a buyer's role clears it (``accounts.roles.grant_role``).
    buyer_approved_at = models.DateTimeField(
        null=True, blank=True, help_text="Buyers: when the operator approved this buyer account (empty: awaiting "
                                         "approval, it may not buy yet).")
    buyer_approved_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Buyers: who approved the account (empty: a command, the demo, or approved before approvals).")

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(role__in=["owner", "buyer", "auditor", "staff"]),
                                              name="user_role_valid"),
                       models.CheckConstraint(condition=Q(buyer_approved_at__isnull=True) | Q(role="buyer"),
                                              name="user_approval_only_buyers")]

    def save(self, *args, **kwargs):
        """Save; a new password (``set_password``, by any path: the portal, the admin, ``changepassword``, a
        command) also revokes every API token of the user (docs/security.md#credentials-and-sign-in), as Django
        already ends the user's other sessions.  ``_password`` is Django's mark of a password set since the
        last save."""
        password_changed = self._password is not None and self.pk is not None
        with transaction.atomic():
            super().save(*args, **kwargs)
            if password_changed:
                self.auth_token_set.all().delete()


class TokenName(models.Model):
    """The name a user gave an API token (docs/security.md#credentials-and-sign-in): a side table of knox's
    ``AuthToken`` (its digest is the key), deleted with the token when it is revoked or cleaned up.  Tokens made by
    ``POST /api/v1/auth/token/`` have none."""

    token = models.OneToOneField("knox.AuthToken", on_delete=models.CASCADE, primary_key=True,
                                 related_name="token_name")
    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.name


class BudgetAccount(models.Model):
    """The privacy budget of one value (docs/architecture.md#apps-and-models).

    ``ceiling`` is the ceiling in force now: fixed, or materialised from the
    schedule by ``schedules_advance`` (schedules only raise it).  ``loss =
    chain_loss + oneshot_loss`` never exceeds it (CHECK).
    """

    class Shape(models.TextChoices):
        LINEAR = "linear", "Linear"
        STEPS = "steps", "Steps"

    value = models.OneToOneField("market.Value", on_delete=models.CASCADE, primary_key=True, related_name="budget")
    #: The value's attribute, the table's distribution column (docs/architecture.md#scaling-out); a trigger keeps it
    #: equal to the value's on PostgreSQL (migration 0019), the services set it.
    attribute = models.ForeignKey("market.Attribute", on_delete=models.PROTECT, related_name="+", db_index=False)
    ceiling = models.DecimalField(**EPS)
    chain_loss = models.DecimalField(**EPS, default=0)
    oneshot_loss = models.DecimalField(**EPS, default=0)
    paused = models.BooleanField(default=False)
    schedule_start = models.DecimalField(**EPS, null=True, blank=True)
    schedule_cap = models.DecimalField(**EPS, null=True, blank=True)
    schedule_start_at = models.DateTimeField(null=True, blank=True)
    schedule_end_at = models.DateTimeField(null=True, blank=True)
    schedule_shape = models.CharField(max_length=8, choices=Shape.choices, blank=True)
    schedule_steps = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(ceiling__gte=0, ceiling__lte=700), name="budget_ceiling_range"),
            models.CheckConstraint(condition=Q(chain_loss__gte=0, oneshot_loss__gte=0), name="budget_loss_nonnegative"),
            models.CheckConstraint(condition=Q(ceiling__gte=_sum6("chain_loss", "oneshot_loss")),
                                   name="budget_loss_within_ceiling"),
            models.CheckConstraint(
                condition=(
                    Q(schedule_shape="", schedule_start__isnull=True, schedule_cap__isnull=True,
                      schedule_start_at__isnull=True, schedule_end_at__isnull=True, schedule_steps__isnull=True)
                    | (Q(schedule_shape__in=["linear", "steps"], schedule_start__isnull=False,
                         schedule_cap__isnull=False, schedule_start_at__isnull=False, schedule_end_at__isnull=False,
                         schedule_start__gte=0,
                         schedule_cap__gte=F("schedule_start"), schedule_end_at__gt=F("schedule_start_at"),
                         ceiling__gte=F("schedule_start"), ceiling__lte=F("schedule_cap"))
                       & (Q(schedule_shape="linear", schedule_steps__isnull=True)
                          | Q(schedule_shape="steps", schedule_steps__isnull=False, schedule_steps__gte=1,
                              schedule_steps__lte=10000)))
                ),
                name="budget_schedule_consistent",
            ),
        ]

    def __str__(self) -> str:
        return f"Budget of value #{self.value_id}: ε {self.loss.normalize():f} of ε {self.ceiling.normalize():f}"

    @property
    def loss(self):
        return self.chain_loss + self.oneshot_loss

    @property
    def scheduled(self) -> bool:
        return bool(self.schedule_shape)


class LedgerBlock(models.Model):
    """A block of ledger entries written by one transaction, hash-chained to the previous block of its shard.

    The ledger is a set of hash chains, one per ``shard`` (docs/budget-rules.md#the-ledger): shard 0 holds the
    ledger written before shards existed (and owner-wide events), shard ``a`` every block about the values of
    attribute ``a``, so writers of different attributes never wait for each other.  ``hash = sha256(prev_hash ||
    header || canonical bytes of the block's entries)`` (``accounts.ledger``); editing, deleting or inserting an
    entry changes a recomputed hash, so the audit detects it.  ``UNIQUE (shard, prev_hash)``: a shard's chain
    cannot fork, even if a writer forgot its head's lock.
    """

    shard = models.PositiveIntegerField(default=0)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)
    entry_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["shard", "id"], name="ledger_block_shard_id")]
        constraints = [models.CheckConstraint(condition=Q(entry_count__gte=1), name="ledger_block_nonempty"),
                       models.UniqueConstraint(fields=["shard", "prev_hash"], name="ledger_block_no_fork")]

    def __str__(self) -> str:
        return (f"Ledger block #{self.pk} of shard {self.shard} "
                f"({self.entry_count} entr{'y' if self.entry_count == 1 else 'ies'})")


class LedgerHead(models.Model):
    """The head of one shard's hash chain (``shard``: 0, or an attribute's id), locked by every ledger write to
    that shard where the global lock order puts it (``accounts.locks``): it serialises that shard's chain, and
    only it."""

    shard = models.PositiveIntegerField(primary_key=True)
    last_block = models.ForeignKey(LedgerBlock, null=True, on_delete=models.PROTECT, related_name="+")
    blocks = models.PositiveIntegerField(default=0, help_text="How many blocks the shard's chain holds.")

    def __str__(self) -> str:
        return (f"Ledger head of shard {self.shard} (last block #{self.last_block_id})" if self.last_block_id
                else f"Ledger head of shard {self.shard} (empty)")


class LedgerCheckpoint(models.Model):
    """A signed checkpoint of the ledger (docs/budget-rules.md#checkpoints): the root of an RFC 6962 Merkle tree
    over the checkpoint log's first ``tree_size`` leaves, signed with Ed25519.

    The log is append-only: each checkpoint appends one leaf per shard whose head moved since the previous one
    (``LedgerCheckpointLeaf``: the shard, its block count and its head hash), so a later checkpoint is always
    consistent with an earlier one, and the audit checks that every shard chain still holds every head ever
    checkpointed (a shard's lost tail is caught)."""

    created_at = models.DateTimeField()
    tree_size = models.PositiveIntegerField()
    root_hash = models.CharField(max_length=64)
    key_id = models.CharField(max_length=64, help_text="SHA-256 of the raw Ed25519 public key that signed it.")
    signature = models.CharField(max_length=128, help_text="Ed25519 signature (hex) of the signed statement.")
    note = models.TextField(
        blank=True, default="",
        help_text="The checkpoint as a C2SP signed note (docs/receipts.md#checkpoints-as-signed-notes): origin, tree "
                  "size and base64 root, a blank line, the log's signature lines.  Empty for checkpoints made "
                  "before signed notes (they carry only the statement signature above).")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tree_size"], name="ledger_checkpoint_tree_size_unique")]

    def __str__(self) -> str:
        return f"Ledger checkpoint #{self.pk} ({self.tree_size} leaves, root {self.root_hash[:12]}...)"


class LedgerCheckpointLeaf(models.Model):
    """One leaf of the checkpoint log (``index`` is its position): a block, or, for leaves written before receipts
    existed, a shard's head as a checkpoint saw it (docs/receipts.md#where-the-entries-sit-two-trees).

    Either way ``shard``, ``blocks`` (the height: how many blocks the shard's chain holds up to it) and
    ``head_hash`` (that block's hash) say which block of which chain the leaf vouches for.  A block leaf
    (``block_id`` set) also holds the block's id, entry count and time and its **entries root**, the RFC 6962
    root over its entries (``accounts.ledger.leaves.entry_tree``), with the roots of its chunks of ``TREE_CHUNK``
    entries (32 bytes each) so that a receipt's proof needs only one chunk's entries."""

    index = models.PositiveIntegerField(primary_key=True)
    checkpoint = models.ForeignKey(LedgerCheckpoint, on_delete=models.PROTECT, related_name="leaves")
    shard = models.PositiveIntegerField()
    blocks = models.PositiveIntegerField()
    head_hash = models.CharField(max_length=64)
    # Not a foreign key: the log vouches for the chain and must outlive a block deleted by tampering, which the
    # audit then reports.
    block_id = models.BigIntegerField(null=True, blank=True)
    entry_count = models.PositiveIntegerField(null=True, blank=True)
    block_created_at = models.DateTimeField(null=True, blank=True)
    entries_root = models.CharField(max_length=64, blank=True, default="")
    chunk_roots = models.BinaryField(null=True, blank=True)
    #: The leaf format (docs/receipts.md#block-leaf-data-135-bytes): 1, entry leaves hash the entry data alone; 2,
    #: entry leaves are blinded with a per-entry secret given only to the entry's owner and auditors.
    version = models.PositiveSmallIntegerField(default=1)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["block_id"], name="ledger_checkpoint_leaf_block_unique"),
            models.CheckConstraint(
                condition=Q(block_id__isnull=True, entry_count__isnull=True, block_created_at__isnull=True,
                            entries_root="", chunk_roots__isnull=True)
                | Q(block_id__isnull=False, entry_count__gte=1, block_created_at__isnull=False,
                    chunk_roots__isnull=False) & ~Q(entries_root=""),
                name="ledger_checkpoint_leaf_kind"),
            # leaf versions (docs/receipts.md#entry-data): shard-head leaves are version 1
            models.CheckConstraint(condition=Q(version__in=[1, 2]) & (Q(block_id__isnull=False) | Q(version=1)),
                                   name="ledger_checkpoint_leaf_version"),
        ]

    def __str__(self) -> str:
        what = f"block #{self.block_id}" if self.block_id is not None else "head"
        return f"Checkpoint leaf {self.index}: shard {self.shard} at {self.blocks} blocks ({what})"


class LedgerLogKey(models.Model):
    """A key that has signed the ledger's checkpoints (docs/receipts.md#rotating-the-log-key): the published key
    history.  ``first_size`` and ``last_size`` are the tree sizes of the first and latest checkpoint it signed;
    ``retired_at`` is set once it is no longer in ``LDP_LEDGER_SIGNING_KEYS`` (it signs no new checkpoint, and
    what it signed keeps verifying with it)."""

    vkey = models.CharField(max_length=400, unique=True, help_text="The C2SP verifier key (type 0x01).")
    public_key = models.CharField(max_length=64, unique=True, help_text="The raw Ed25519 public key, hex.")
    key_id = models.CharField(max_length=64, unique=True,
                              help_text="SHA-256 of the raw public key (the statement signatures' key id).")
    first_size = models.PositiveBigIntegerField()
    last_size = models.PositiveBigIntegerField()
    added_at = models.DateTimeField()
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(first_size__lte=F("last_size")),
                                              name="ledger_log_key_sizes")]

    def __str__(self) -> str:
        return f"Log key {self.vkey.split('+')[1] if '+' in self.vkey else self.key_id[:8]}"


class LedgerTile(models.Model):
    """A full tile of the checkpoint log served as a C2SP tiled log (docs/receipts.md#the-tiled-log): the 256
    hashes ``MTH(D[(256 index + i) 256^level : (256 index + i + 1) 256^level])``, ``i = 0 .. 255``, concatenated
    (8,192 bytes).  The log only grows, so a full tile never changes: it is computed once
    (``accounts.ledger.tiles``) and stored; partial tiles are not stored."""

    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hashes = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["level", "index"], name="ledger_tile_unique"),
            models.CheckConstraint(condition=Q(level__lte=63, index__gte=0), name="ledger_tile_position"),
            models.CheckConstraint(condition=Exact(Length("hashes"), 8192), name="ledger_tile_full"),
        ]

    def __str__(self) -> str:
        return f"Ledger tile {self.level}/{self.index}"


class LedgerWitness(models.Model):
    """A witness this log submits its checkpoints to (docs/receipts.md#witnesses): one ``witness`` line of the
    ``LDP_WITNESS_POLICY`` file, by its verifier key, with what the log knows of it.

    ``size`` is the tree size the witness last cosigned, as far as the log knows (from a 200, or from a 409's
    body); ``last_status`` / ``last_error`` the answer to the latest submission; ``failures`` the submissions
    that failed in a row (the retry backoff grows with it); ``next_attempt_at`` when the next may be made."""

    vkey = models.CharField(max_length=400, unique=True)
    name = models.CharField(max_length=200)
    url = models.CharField(max_length=500, blank=True, default="")
    size = models.PositiveBigIntegerField(default=0)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"Witness {self.name}"


class LedgerCosignature(models.Model):
    """A witness's cosignature of a checkpoint (C2SP tlog-cosignature, Ed25519, type 0x04): the signature line as
    the witness returned it, verified against its key before it is stored, appended to the served checkpoint."""

    checkpoint = models.ForeignKey(LedgerCheckpoint, on_delete=models.PROTECT, related_name="cosignatures")
    witness = models.ForeignKey(LedgerWitness, on_delete=models.PROTECT, related_name="cosignatures")
    timestamp = models.PositiveBigIntegerField(help_text="The cosignature's time, POSIX seconds.")
    line = models.TextField(help_text="The note signature line, without its newline.")
    received_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["checkpoint", "witness"], name="ledger_cosignature_once")]

    def __str__(self) -> str:
        return f"Cosignature of checkpoint #{self.checkpoint_id} by {self.witness.name}"


class LedgerKind(models.TextChoices):
    CHAIN_RELEASE = "chain_release", "Chain release"
    ONESHOT_RELEASE = "oneshot_release", "One-shot release"
    CEILING = "ceiling", "Ceiling set"
    SCHEDULE = "schedule", "Schedule set"
    PAUSE = "pause", "Sales paused"
    RESUME = "resume", "Sales resumed"
    RAW_DELETED = "raw_deleted", "Raw value deleted"
    OWNER_CUSTODY = "owner_custody", "Held on the owner's device"
    OWNER_UPLOAD = "owner_upload", "Chain uploaded by the owner"


class LedgerGuarantee(models.TextChoices):
    """What a release's epsilon guarantees (docs/budget-rules.md#one-shot-losses-add-up,
    docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).

    Empty for budget events and for chain releases (the gradual-release chain: epsilon-LDP over all
    buyers together); one-shot releases always name theirs.
    """

    NONE = "", "None (budget event or chain release)"
    LDP = "ldp", "epsilon-LDP"
    ULDP = "uldp", "epsilon-ULDP (utility-optimized: non-sensitive values may be revealed)"
    PER_REPORT = "per_report_non_collusion", "per-report eps, non-collusion assumption"


class LedgerEvent(models.Model):
    """A budget event of one value in the privacy ledger (append-only): each change of ceiling policy, pause,
    resume or raw-value deletion, so the audit can recompute ``ceiling(t)`` independently of BudgetAccount.

    Releases are stored compactly (``LedgerRelease``); ledgers written before that kept them here too, and
    the constraints below still state the release rules.  ``position`` is the entry's place in its block's
    canonical order (the order its hash covers): ``LedgerEntry`` (the per-value view) orders by it.
    """

    Kind = LedgerKind
    Guarantee = LedgerGuarantee

    block = models.ForeignKey(LedgerBlock, on_delete=models.PROTECT, related_name="events")
    #: The block's shard, the table's distribution column (docs/architecture.md#scaling-out); a trigger keeps it equal
    #: to the block's on PostgreSQL (migration 0019).
    shard = models.PositiveIntegerField()
    position = models.PositiveIntegerField(help_text="The entry's place in its block's canonical (hashed) order.")
    # No index of its own: the (value, id) index below serves every lookup by value.
    value = models.ForeignKey("market.Value", on_delete=models.PROTECT, related_name="ledger_events", db_index=False)
    purchase = models.ForeignKey("market.Purchase", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="ledger_events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    created_at = models.DateTimeField()
    epsilon = models.DecimalField(**EPS, null=True, blank=True)
    chain_loss_before = models.DecimalField(**EPS)
    chain_loss_after = models.DecimalField(**EPS)
    oneshot_loss_before = models.DecimalField(**EPS)
    oneshot_loss_after = models.DecimalField(**EPS)
    ceiling = models.DecimalField(**EPS, help_text="Ceiling in force after this entry.")
    schedule_start = models.DecimalField(**EPS, null=True, blank=True)
    schedule_cap = models.DecimalField(**EPS, null=True, blank=True)
    schedule_start_at = models.DateTimeField(null=True, blank=True)
    schedule_end_at = models.DateTimeField(null=True, blank=True)
    schedule_shape = models.CharField(max_length=8, blank=True)
    schedule_steps = models.PositiveIntegerField(null=True, blank=True)
    guarantee = models.CharField(max_length=32, blank=True, default="", choices=Guarantee.choices,
                                 help_text="One-shot releases: the guarantee of the epsilon released (in the hash).")

    class Meta:
        verbose_name = "ledger event"
        indexes = [models.Index(fields=["value", "id"], name="accounts_le_value_i_1318d1_idx"),
                   models.Index(fields=["created_at"], name="accounts_le_created_9596dd_idx")]
        constraints = [
            models.UniqueConstraint(fields=["block", "position"], name="ledger_event_position_unique"),
            models.CheckConstraint(condition=Q(kind__in=[
                "chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted",
                "owner_custody", "owner_upload"]),
                name="ledger_kind_valid"),
            models.CheckConstraint(
                condition=Q(chain_loss_after__gte=F("chain_loss_before"),
                            oneshot_loss_after__gte=F("oneshot_loss_before")),
                name="ledger_loss_monotone"),
            models.CheckConstraint(condition=Q(ceiling__gte=_sum6("chain_loss_after", "oneshot_loss_after")),
                                   name="ledger_loss_within_ceiling"),
            models.CheckConstraint(
                condition=Q(kind__in=["chain_release", "oneshot_release", "owner_upload"], epsilon__isnull=False,
                            epsilon__gt=0)
                | (~Q(kind__in=["chain_release", "oneshot_release", "owner_upload"]) & Q(epsilon__isnull=True)),
                name="ledger_release_has_epsilon"),
            models.CheckConstraint(
                condition=~Q(kind="chain_release")
                | Q(chain_loss_after__gte=F("epsilon"), oneshot_loss_after=F("oneshot_loss_before")),
                name="ledger_chain_release_rule"),
            models.CheckConstraint(
                condition=~Q(kind="oneshot_release")
                | Q(oneshot_loss_after=_sum6("oneshot_loss_before", "epsilon"),
                    chain_loss_after=F("chain_loss_before")),
                name="ledger_oneshot_release_rule"),
            models.CheckConstraint(
                condition=Q(kind="oneshot_release", guarantee__in=["ldp", "uldp", "per_report_non_collusion"])
                | Q(kind="chain_release", guarantee__in=["", "ldp"])
                | (~Q(kind__in=["chain_release", "oneshot_release"]) & Q(guarantee="")),
                name="ledger_guarantee_only_on_releases"),
        ]

    def __str__(self) -> str:
        at = f" at ε {self.epsilon.normalize():f}" if self.epsilon is not None else ""
        return f"Ledger event #{self.pk}: {self.get_kind_display()}{at}, value #{self.value_id}"



class LedgerRelease(models.Model):
    """The released values of one purchase in one chain block (or one run of at most ``LDP_CHAIN_BLOCK`` values of
    an attribute without chains): the compact ledger (docs/budget-rules.md#the-ledger).

    One row holds, as arrays in value-id order, what one ledger entry per value held: each value's id and owner,
    its losses before and after, the ceiling in force, and the owner's earnings for it (money units of 1/10000;
    NULL for releases written before earnings were recorded per value: those were paid to the owners' balances
    at purchase time).  ``position`` is its first value's place in its block's canonical order; ``first_value``
    and ``last_value`` bound its value ids (an index finds the rows of a value).  The per-value view
    ``LedgerEntry`` unnests the arrays; the block's hash covers exactly the entries that view shows.
    """

    block = models.ForeignKey(LedgerBlock, on_delete=models.PROTECT, related_name="releases")
    position = models.PositiveIntegerField()
    shard = models.PositiveIntegerField(help_text="The attribute (the ledger shard) of the values.")
    purchase = models.ForeignKey("market.Purchase", on_delete=models.PROTECT, related_name="ledger_releases",
                                 db_index=False)
    chain_block = models.ForeignKey("market.ChainBlock", null=True, blank=True, on_delete=models.PROTECT,
                                    related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=[("chain_release", "Chain release"),
                                                    ("oneshot_release", "One-shot release")])
    guarantee = models.CharField(max_length=32, blank=True, default="")
    epsilon = models.DecimalField(**EPS)
    created_at = models.DateTimeField()
    count = models.PositiveIntegerField()
    first_value = models.BigIntegerField()
    last_value = models.BigIntegerField()
    value_ids = Int64ArrayField()
    owner_ids = Int64ArrayField()
    chain_before = Int64ArrayField(help_text="micro-epsilons")
    chain_after = Int64ArrayField(help_text="micro-epsilons")
    oneshot_before = Int64ArrayField(help_text="micro-epsilons")
    oneshot_after = Int64ArrayField(help_text="micro-epsilons")
    ceiling = Int64ArrayField(help_text="micro-epsilons")
    earnings = Int64ArrayField(null=True, blank=True, help_text="money units of 1/10000")

    class Meta:
        indexes = [models.Index(fields=["purchase", "id"], name="ledger_release_purchase"),
                   models.Index(fields=["block", "position"], name="ledger_release_block"),
                   models.Index(fields=["shard", "first_value"], name="ledger_release_values")]
        constraints = [
            models.CheckConstraint(condition=Q(count__gte=1, first_value__lte=F("last_value"), epsilon__gt=0),
                                   name="ledger_release_nonempty"),
            models.CheckConstraint(condition=Q(kind="oneshot_release", guarantee__in=["ldp", "uldp",
                                                                                       "per_report_non_collusion"])
                                   | Q(kind="chain_release", guarantee__in=["", "ldp"]),
                                   name="ledger_release_guarantee"),
            models.UniqueConstraint(fields=["block", "position"], name="ledger_release_position_unique"),
        ]

    def __str__(self) -> str:
        return f"Ledger release #{self.pk}: purchase #{self.purchase_id}, {self.count} values at ε {self.epsilon}"


class LedgerEntryQuerySet(models.QuerySet):
    def of_values(self, value_ids) -> "LedgerEntryQuerySet":
        """The entries of these values.  On PostgreSQL the compact rows are first narrowed to those whose value-id
        range holds one of the ids (``&&`` a multirange: the GiST index ``ledger_release_value_range``), so only
        they are unnested; filtering the view by ``value_id`` alone would unnest every release row."""
        ids = sorted({int(v) for v in value_ids})
        qs = self.filter(value_id__in=ids)
        narrow = value_ranges_overlap("accounts_ledgerentry.first_value", "accounts_ledgerentry.last_value", ids)
        if narrow is not None:
            qs = qs.extra(where=[narrow[0]], params=narrow[1])
        return qs


class LedgerEntry(models.Model):
    """The privacy ledger, one row per value and entry: a SQL view (``accounts_ledgerentry``) over the budget
    events (``LedgerEvent``) and the compact releases (``LedgerRelease``, unnested), read-only.

    A release row records the epsilon released, the losses before and after, the ceiling in force and the
    owner's earnings; budget rows record each change of ceiling policy.  ``id`` is ``block id * 2**24 +
    position``: ordering by id is the ledger's order, block by block, in the order each block's hash covers.
    """

    Kind = LedgerKind
    Guarantee = LedgerGuarantee

    KIND_CODES = {k: i for i, k in enumerate(Kind.values)}
    RELEASE_KINDS = ("chain_release", "oneshot_release")

    id = models.BigIntegerField(primary_key=True)
    block = models.ForeignKey(LedgerBlock, on_delete=models.DO_NOTHING, related_name="entries", db_constraint=False)
    value = models.ForeignKey("market.Value", on_delete=models.DO_NOTHING, related_name="ledger_entries",
                              db_constraint=False)
    purchase = models.ForeignKey("market.Purchase", null=True, blank=True, on_delete=models.DO_NOTHING,
                                 related_name="ledger_entries", db_constraint=False)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    created_at = models.DateTimeField()
    epsilon = models.DecimalField(**EPS, null=True, blank=True)
    chain_loss_before = models.DecimalField(**EPS)
    chain_loss_after = models.DecimalField(**EPS)
    oneshot_loss_before = models.DecimalField(**EPS)
    oneshot_loss_after = models.DecimalField(**EPS)
    ceiling = models.DecimalField(**EPS, help_text="Ceiling in force after this entry.")
    schedule_start = models.DecimalField(**EPS, null=True, blank=True)
    schedule_cap = models.DecimalField(**EPS, null=True, blank=True)
    schedule_start_at = models.DateTimeField(null=True, blank=True)
    schedule_end_at = models.DateTimeField(null=True, blank=True)
    schedule_shape = models.CharField(max_length=8, blank=True)
    schedule_steps = models.PositiveIntegerField(null=True, blank=True)
    guarantee = models.CharField(max_length=32, blank=True, default="", choices=Guarantee.choices,
                                 help_text="One-shot releases: the guarantee of the epsilon released (in the hash).")
    earning = models.DecimalField(**MONEY, null=True, blank=True,
                                  help_text="Releases: the owner's earnings for this value (not set before 2026-11).")
    first_value = models.BigIntegerField(help_text="The lowest value id of the compact row holding this entry.")
    last_value = models.BigIntegerField(help_text="The highest value id of the compact row holding this entry.")

    objects = LedgerEntryQuerySet.as_manager()

    class Meta:
        managed = False
        db_table = "accounts_ledgerentry"
        verbose_name = "ledger entry"
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        at = f" at ε {self.epsilon.normalize():f}" if self.epsilon is not None else ""
        return f"Ledger entry #{self.pk}: {self.get_kind_display()}{at}, value #{self.value_id}"



class MoneyAccount(models.Model):
    """A balance in Decimal: a buyer's credit, an owner's earnings, the platform's fees, or the owners' earnings
    from one attribute's sales awaiting settlement (``owners_pending``, one per ``shard``: docs/money.md#settlement)."""

    class Kind(models.TextChoices):
        BUYER_CREDIT = "buyer_credit", "Buyer credit"
        OWNER_EARNINGS = "owner_earnings", "Owner earnings"
        PLATFORM = "platform", "Platform fees"
        OWNERS_PENDING = "owners_pending", "Owners' earnings awaiting settlement"

    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="money_accounts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    shard = models.PositiveIntegerField(null=True, blank=True,
                                        help_text="Owners' pending earnings: the attribute whose sales they are.")
    balance = models.DecimalField(**MONEY, default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(balance__gte=0), name="money_balance_nonnegative"),
            models.UniqueConstraint(fields=["user", "kind"], name="money_one_account_per_kind"),
            models.UniqueConstraint(fields=["kind"], condition=Q(kind="platform"), name="money_one_platform_account"),
            models.UniqueConstraint(fields=["shard"], condition=Q(kind="owners_pending"),
                                    name="money_one_pending_account_per_shard"),
            models.CheckConstraint(condition=Q(kind="platform", user__isnull=True, shard__isnull=True)
                                   | Q(kind="owners_pending", user__isnull=True, shard__isnull=False)
                                   | (~Q(kind__in=["platform", "owners_pending"]) & Q(user__isnull=False,
                                                                                      shard__isnull=True)),
                                   name="money_account_owner"),
        ]

    def __str__(self) -> str:
        if self.kind == self.Kind.OWNERS_PENDING:
            return f"{self.get_kind_display()} account #{self.pk} of attribute #{self.shard}"
        whose = f"user #{self.user_id}" if self.user_id else "the platform"
        return f"{self.get_kind_display()} account #{self.pk} of {whose}"


class Settlement(models.Model):
    """One batch of owners' earnings settled into their balances (docs/money.md#settlement): the compact ledger
    rows (``LedgerRelease``) of attribute ``shard`` with ids in ``(after_release, through_release]``, each owner
    credited the exact sum of their values' earnings in them, the shard's ``owners_pending`` account debited the
    total.  Settlements of a shard follow each other without gap or overlap: ``UNIQUE (shard, after_release)``
    refuses two settlements of the same rows even without the pending account's lock; on PostgreSQL a deferred
    trigger checks that a settlement's money entries sum to zero."""

    shard = models.PositiveIntegerField()
    after_release = models.BigIntegerField(help_text="The last release row settled before (0: none).")
    through_release = models.BigIntegerField(help_text="The last release row this settlement covers.")
    releases = models.PositiveIntegerField(help_text="How many release rows it covers.")
    owners = models.PositiveIntegerField(help_text="How many owners it credits.")
    amount = models.DecimalField(**MONEY)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["shard", "after_release"], name="settlement_no_overlap"),
            models.CheckConstraint(condition=Q(through_release__gt=F("after_release"), amount__gte=0),
                                   name="settlement_range"),
        ]

    def __str__(self) -> str:
        return f"Settlement #{self.pk} of attribute #{self.shard}: {format_money(self.amount)}"


class MoneyEntry(models.Model):
    """One movement of money; ``balance_after`` lets the audit replay every account."""

    account = models.ForeignKey(MoneyAccount, on_delete=models.PROTECT, related_name="entries")
    purchase = models.ForeignKey("market.Purchase", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="money_entries")
    settlement = models.ForeignKey(Settlement, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="entries")

    class Kind(models.TextChoices):
        TOPUP = "topup", "Top-up"
        PURCHASE = "purchase", "Purchase"
        EARNING = "earning", "Earning"
        SETTLEMENT = "settlement", "Settlement"
        PAYOUT = "payout", "Payout"
        FEE = "fee", "Platform fee"
        ADJUSTMENT = "adjustment", "Adjustment"

    amount = models.DecimalField(**MONEY)
    balance_after = models.DecimalField(**MONEY)
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.ADJUSTMENT,
                            db_default=Kind.ADJUSTMENT)
    memo = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "money entry"
        verbose_name_plural = "money entries"
        constraints = [
            models.CheckConstraint(condition=Q(balance_after__gte=0), name="money_entry_balance_nonnegative"),
            models.CheckConstraint(condition=~Q(kind="topup") | Q(amount__gt=0), name="money_topup_credits"),
        ]

    def __str__(self) -> str:

        return f"Money entry #{self.pk}: {format_money(self.amount)} on account #{self.account_id}"


class TopUp(models.Model):
    """An operator's credit to a buyer's account: who, how much, why (docs/money.md).  Its ``entry`` is the money
    movement; ``idempotency_key`` makes a retried top-up credit once."""

    buyer = models.ForeignKey(User, on_delete=models.PROTECT, related_name="topups")
    amount = models.DecimalField(**MONEY)
    reason = models.CharField(max_length=200)
    by = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="topups_made")
    idempotency_key = models.CharField(max_length=255, null=True, blank=True, unique=True)
    entry = models.OneToOneField(MoneyEntry, on_delete=models.PROTECT, related_name="topup")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "top-up"
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="topup_amount_positive"),
            models.CheckConstraint(condition=~Q(reason=""), name="topup_reason_given"),
        ]


class PayoutRequest(models.Model):
    """An owner's request to be paid their earnings (docs/money.md).  Requesting debits the earnings account at
    once (``hold``, a payout movement), so held money cannot be spent twice and a payout never exceeds the
    balance (the balance's CHECK); settling records that it was paid out; rejecting credits it back
    (``release``)."""

    class Status(models.TextChoices):
        REQUESTED = "requested", "Requested"
        SETTLED = "settled", "Settled"
        REJECTED = "rejected", "Rejected"

    owner = models.ForeignKey(User, on_delete=models.PROTECT, related_name="payout_requests")
    amount = models.DecimalField(**MONEY)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.REQUESTED)
    hold = models.OneToOneField(MoneyEntry, on_delete=models.PROTECT, related_name="payout_hold")
    release = models.OneToOneField(MoneyEntry, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="payout_release")
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="payouts_decided")
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="payout_amount_positive"),
            models.CheckConstraint(condition=Q(status="requested", decided_at__isnull=True)
                                   | (~Q(status="requested") & Q(decided_at__isnull=False)),
                                   name="payout_decided_when_not_requested"),
            models.CheckConstraint(condition=Q(status="rejected", release__isnull=False)
                                   | (~Q(status="rejected") & Q(release__isnull=True)),
                                   name="payout_released_only_when_rejected"),
        ]
