"""Users and roles; privacy budgets; the append-only, hash-chained privacy ledger; money.

Invariants of docs/budget-rules.md#budgets-and-ceilings are CHECK constraints here wherever a
single row can express them; the services keep the rest (with row locks) and
``accounts.audit`` re-proves everything from the ledger.
"""
from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Round

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

    role = models.CharField(max_length=16, choices=Role.choices, default=Role.OWNER)
    organisation = models.CharField(max_length=200, blank=True, help_text="Shown to owners for buyers' purchases.")

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(role__in=["owner", "buyer", "auditor", "staff"]),
                                              name="user_role_valid")]


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

    @property
    def loss(self):
        return self.chain_loss + self.oneshot_loss

    @property
    def scheduled(self) -> bool:
        return bool(self.schedule_shape)


class LedgerBlock(models.Model):
    """A block of ledger entries written by one transaction, hash-chained to the previous block.

    ``hash = sha256(prev_hash || header || canonical bytes of the block's
    entries)`` (``accounts.ledger``); editing, deleting or inserting an entry
    changes a recomputed hash, so the audit detects it.
    """

    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)
    entry_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(entry_count__gte=1), name="ledger_block_nonempty")]


class LedgerHead(models.Model):
    """Singleton row locked by every ledger write: serialises the hash chain."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_block = models.ForeignKey(LedgerBlock, null=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="ledger_head_singleton")]


class LedgerEntry(models.Model):
    """The privacy ledger: releases and budget events of a value, append-only.

    A release row records the epsilon released, the losses before and after,
    and the ceiling in force; budget rows record each change of ceiling policy,
    so the audit can recompute ``ceiling(t)`` independently of BudgetAccount.
    """

    class Kind(models.TextChoices):
        CHAIN_RELEASE = "chain_release", "Chain release"
        ONESHOT_RELEASE = "oneshot_release", "One-shot release"
        CEILING = "ceiling", "Ceiling set"
        SCHEDULE = "schedule", "Schedule set"
        PAUSE = "pause", "Sales paused"
        RESUME = "resume", "Sales resumed"
        RAW_DELETED = "raw_deleted", "Raw value deleted"

    class Guarantee(models.TextChoices):
        """What a release's epsilon guarantees (docs/budget-rules.md#one-shot-losses-add-up, docs/mechanisms-reference.md#surveys-warner-simmons-christofides-improved-christofides).

        Empty for budget events and for chain releases (the gradual-release chain: epsilon-LDP over all
        buyers together); one-shot releases always name theirs.
        """

        NONE = "", "None (budget event or chain release)"
        LDP = "ldp", "epsilon-LDP"
        ULDP = "uldp", "epsilon-ULDP (utility-optimized: non-sensitive values may be revealed)"
        PER_REPORT = "per_report_non_collusion", "per-report eps, non-collusion assumption"

    KIND_CODES = {k: i for i, k in enumerate(Kind.values)}

    block = models.ForeignKey(LedgerBlock, on_delete=models.PROTECT, related_name="entries")
    # No index of its own: the (value, id) index below serves every lookup by value.
    value = models.ForeignKey("market.Value", on_delete=models.PROTECT, related_name="ledger_entries", db_index=False)
    purchase = models.ForeignKey("market.Purchase", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="ledger_entries")
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
        indexes = [models.Index(fields=["value", "id"]), models.Index(fields=["created_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=[
                "chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted"]),
                name="ledger_kind_valid"),
            models.CheckConstraint(
                condition=Q(chain_loss_after__gte=F("chain_loss_before"),
                            oneshot_loss_after__gte=F("oneshot_loss_before")),
                name="ledger_loss_monotone"),
            models.CheckConstraint(condition=Q(ceiling__gte=_sum6("chain_loss_after", "oneshot_loss_after")),
                                   name="ledger_loss_within_ceiling"),
            models.CheckConstraint(
                condition=Q(kind__in=["chain_release", "oneshot_release"], epsilon__isnull=False, epsilon__gt=0)
                | (~Q(kind__in=["chain_release", "oneshot_release"]) & Q(epsilon__isnull=True)),
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


class MoneyAccount(models.Model):
    """A balance in Decimal: a buyer's credit, an owner's earnings, or the platform's fees."""

    class Kind(models.TextChoices):
        BUYER_CREDIT = "buyer_credit", "Buyer credit"
        OWNER_EARNINGS = "owner_earnings", "Owner earnings"
        PLATFORM = "platform", "Platform fees"

    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="money_accounts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    balance = models.DecimalField(**MONEY, default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(balance__gte=0), name="money_balance_nonnegative"),
            models.UniqueConstraint(fields=["user", "kind"], name="money_one_account_per_kind"),
            models.UniqueConstraint(fields=["kind"], condition=Q(user__isnull=True), name="money_one_platform_account"),
            models.CheckConstraint(condition=Q(kind="platform", user__isnull=True)
                                   | (~Q(kind="platform") & Q(user__isnull=False)), name="money_account_owner"),
        ]


class MoneyEntry(models.Model):
    """One movement of money; ``balance_after`` lets the audit replay every account."""

    account = models.ForeignKey(MoneyAccount, on_delete=models.PROTECT, related_name="entries")
    purchase = models.ForeignKey("market.Purchase", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="money_entries")
    amount = models.DecimalField(**MONEY)
    balance_after = models.DecimalField(**MONEY)
    memo = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(balance_after__gte=0), name="money_entry_balance_nonnegative")]
