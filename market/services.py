"""Market services: contributing values and growing their chains (docs/architecture.md#apps-and-models).

Each service is one transaction; the ledger block is written in it; Celery
work is enqueued only on commit.
"""
from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from accounts import ledger, roles
from accounts.epsilon import from_micro, parse, to_micro
from accounts.models import BudgetAccount, LedgerEntry, User
from accounts.services import BudgetError, Schedule, event_rows
from ldpmarket import storage

from . import chains, domain, pgcopy, sealing
from .models import Attribute, Chain, Value


def values_create_many(*, attribute: Attribute, owners: list[User], raws: list, ceiling=None,
                       schedule: Schedule | None = None, now: datetime | None = None, rng=None) -> list[Value]:
    """Contribute one value per owner to ``attribute`` under one ceiling policy, in one transaction.

    Each value gets its sealed raw value and mechanism input, a budget account,
    a chain from the grid start up to its ceiling (the first grid point at
    least: pre-generation costs no privacy), and a ledger entry for its policy.
    Values of one-shot attributes (``Attribute.is_oneshot``) get no chain: each
    release draws afresh from the sealed input (``market.oneshot``).
    """
    if (ceiling is None) == (schedule is None):
        raise BudgetError("Give either a fixed ceiling or a schedule.")
    if len(owners) != len(raws):
        raise ValueError("owners and raws must have the same length")
    if not all(roles.can_contribute(o) for o in owners):
        raise BudgetError("Only owners can contribute values.")
    now = now or timezone.now()
    current = parse(ceiling, name="ceiling") if schedule is None else schedule.ceiling_at(now)
    if attribute.is_oneshot:
        try:
            domain.check_attribute(attribute)
        except domain.InvalidAttribute as exc:
            raise domain.InvalidValue(f"This attribute cannot take values yet: {exc}.") from None
    inputs, payload, cohorts = domain.to_inputs(attribute, list(raws), rng)
    owner_ids = np.array([o.id for o in owners], dtype=np.int64)
    sealed_inputs = sealing.seal_inputs(owner_ids, np.full(len(owners), attribute.id), payload)
    if not attribute.is_oneshot:
        grid = chains.Grid.of(attribute)
        top = int(grid.last_point_upto(np.array([to_micro(current)]))[0])
        points = np.arange(grid.start, top + 1, grid.step, dtype=np.int64)
        outputs = chains.generate(inputs, points, attribute.domain_size, rng, attribute.draw_divisor)
    policy = schedule.fields() if schedule else {}
    with transaction.atomic():
        values = Value.objects.bulk_create(
            [Value(owner=o, attribute=attribute, input_sealed=s, cohort=int(c),
                   raw_sealed=sealing.seal_raw(domain.raw_text(attribute, r), owner_id=o.id,
                                               attribute_id=attribute.id))
             for o, r, s, c in zip(owners, raws, sealed_inputs, cohorts)], batch_size=2000)
        budgets = BudgetAccount.objects.bulk_create(
            [BudgetAccount(value=v, ceiling=current, **policy) for v in values], batch_size=2000)
        if not attribute.is_oneshot:
            Chain.objects.bulk_create(
                [Chain(value=v, **dict(zip(("epsilons", "outputs", "head_output"),
                                           chains.encode(points, outputs[i]))),
                       length=points.size, head=from_micro(int(points[-1])))
                 for i, v in enumerate(values)], batch_size=2000)
        ledger.append(event_rows(budgets, LedgerEntry.Kind.SCHEDULE if schedule else LedgerEntry.Kind.CEILING),
                      shard=attribute.id)
    return values


def value_create(*, owner: User, attribute: Attribute, raw, ceiling=None, schedule: Schedule | None = None,
                 rng=None) -> Value:
    """Contribute one value (see ``values_create_many``)."""
    if Value.objects.filter(owner=owner, attribute=attribute).exists():
        raise BudgetError("You have already contributed a value to this attribute.")
    return values_create_many(attribute=attribute, owners=[owner], raws=[raw], ceiling=ceiling, schedule=schedule,
                              rng=rng)[0]


def value_delete_raw(*, value_id: int) -> Value:
    """Delete the raw value and the sealed input; the chain stays sellable up to its head."""
    with transaction.atomic():
        budget = BudgetAccount.objects.select_for_update().get(value_id=value_id)
        value = Value.objects.select_for_update().get(id=value_id)
        if value.raw_deleted_at is None:
            value.raw_sealed = value.input_sealed = None
            value.raw_deleted_at = timezone.now()
            value.save(update_fields=["raw_sealed", "input_sealed", "raw_deleted_at"])
            ledger.append(event_rows([budget], LedgerEntry.Kind.RAW_DELETED), shard=value.attribute_id)
    return value


def value_set_pum_tag(*, value_id: int, tag: str | None, owner: User | None = None) -> Value:
    """Tag a uRR/uRAP value as personally sensitive under one of its attribute's ``pum_tags`` (or untag it).

    The tag is sealed with the mechanism input (``market.domain``: bound to the
    owner and attribute, like the input itself), so the server stores only
    ciphertext and a release reveals no more than the mechanism's output: a
    tagged value is released as the tag's bot ``⊥tag`` through the common uRR/uRAP
    with the sensitive set extended by the bots (``mechanisms.uldp.pum_preprocess``).
    Only the value's owner may tag it (``owner``, when given, must be the owner:
    the portal passes the signed-in user).  No budget changes, so no ledger entry;
    the budget row is locked first, as every writer of a value does.
    """
    with transaction.atomic():
        BudgetAccount.objects.select_for_update().filter(value_id=value_id).values_list("value_id").first()
        value = Value.objects.select_for_update().select_related("attribute").filter(id=value_id).first()
        if value is None or (owner is not None and value.owner_id != owner.id):
            raise BudgetError("No such value.")
        attribute = value.attribute
        if not attribute.record.uses_sensitive:
            raise BudgetError("Only values of uRR and uRAP attributes can carry a personal sensitivity tag.")
        tags = list(attribute.pum_tags)
        if tag in (None, ""):
            code = -1
        elif tag in tags:
            code = tags.index(tag)
        else:
            choices = ", ".join(tags) if tags else "none: this attribute offers no tags"
            raise BudgetError(f"{tag!r} is not one of this attribute's tags ({choices}).")
        if value.input_sealed is None:
            raise BudgetError("The raw value was deleted: there is nothing left to tag.")
        payload = sealing.open_inputs([bytes(value.input_sealed)], [value.owner_id], [attribute.id],
                                      domain.payload_bytes(attribute))
        value.input_sealed = sealing.seal_inputs([value.owner_id], [attribute.id],
                                                 domain.with_pum_tag(payload, code))[0]
        value.save(update_fields=["input_sealed"])
    return value


def _extendable(attribute: Attribute, value_ids=None):
    qs = Chain.objects.filter(value__attribute=attribute, value__input_sealed__isnull=False,
                              value__budget__ceiling__gt=F("head"), head__lt=attribute.grid_stop)
    if value_ids is not None:
        qs = qs.filter(value_id__in=list(value_ids))
    return qs


def chains_extend(*, attribute_id: int, value_ids=None, batch_size: int | None = None, rng=None) -> int:
    """Grow every chain of the attribute whose ceiling passed its next grid point; returns values extended.

    Batches of ``batch_size`` values, each its own transaction, taken in
    value-id order (memory stays flat in the number of values: on PostgreSQL
    the ids stream from one server-side cursor, elsewhere by keyset): the
    rows are locked (``FOR UPDATE``, blocking, in value-id order as purchases
    lock them; PostgreSQL re-checks the filter after a wait, so a chain another
    worker just extended is not extended again), re-read, advanced by
    ``chains.grow`` (one ``relax`` call per grid step) and written back
    set-based.  Idempotent: a second run finds nothing to do.  A worker killed
    mid-batch leaves that batch untouched (rolled back), and the batches before it
    committed: the sweeper (``market.sweeper``) sends the extension again and it grows
    what is left.  While it runs it holds the attribute's extension lock
    (``_extension_running``), which tells the sweeper it is not stranded.
    """
    attribute = Attribute.objects.get(id=attribute_id)
    with _extension_running(attribute.id):
        return _extend(attribute, value_ids, batch_size, rng)


#: First key of the advisory locks that mark a running extension (the second is the attribute id).
EXTENSION_LOCK = 0x4C445045  # "LDPE"


def extension_lock_key(attribute_id: int) -> tuple[int, int]:
    return EXTENSION_LOCK, int(attribute_id) % (2 ** 31)


@contextmanager
def _extension_running(attribute_id: int):
    """Mark an extension of the attribute as running, for the sweeper (``market.sweeper``), on PostgreSQL: a
    shared advisory lock (extensions still run side by side), held by the session, so a killed worker's lock
    ends with its session; inside a transaction, until it ends."""
    with storage.advisory_lock_shared(*extension_lock_key(attribute_id)):
        yield


def _extend(attribute: Attribute, value_ids, batch_size: int | None, rng) -> int:
    batch_size = batch_size or settings.LDP_EXTENSION_BATCH
    grid = chains.Grid.of(attribute)
    pending = _extendable(attribute, value_ids).order_by("value_id").values_list("value_id", flat=True)
    extended = 0
    # One query, streamed on PostgreSQL (a server-side cursor outliving each batch's commit; keyset batches
    # elsewhere: storage.id_batches).  A listed id that no longer needs growth is skipped under its lock.
    for ids in storage.id_batches(pending, "value_id", batch_size):
        with transaction.atomic():
            extended += _extend_batch(attribute, grid, ids, rng)
    return extended


def _extend_batch(attribute: Attribute, grid: chains.Grid, ids: list[int], rng) -> int:
    """Lock, re-read, grow and write back one batch (the caller's transaction).

    On PostgreSQL: ``market.pgcopy`` (binary COPY out of the fixed-width fields,
    binary COPY in of the appended steps, one ``UPDATE ... FROM``).  Elsewhere
    (SQLite): the generic path below, through the ORM, rewriting whole blobs.
    Both take the same rows in the same order and call ``chains.grow`` alike.
    """
    if pgcopy.enabled():
        return pgcopy.extend_batch(attribute, grid, ids, rng)
    # Blocking locks in value-id order (as purchases take them): a chain held by a purchase is waited for,
    # not skipped, and PostgreSQL re-checks the filter after the wait, so nothing is extended twice.
    locked = _extendable(attribute, ids).select_for_update(of=("self",)).order_by("value_id")
    rows = list(locked.values_list("value_id", "value__owner_id", "value__input_sealed", "head", "head_output",
                                   "value__budget__ceiling", "epsilons", "outputs", "length"))
    if not rows:
        return 0
    value_ids, owner_ids, sealed, head, head_output, ceiling, eps_blobs, out_blobs, lengths = zip(*rows)
    head = np.array([to_micro(h) for h in head], dtype=np.int64)
    target = grid.last_point_upto(np.array([to_micro(c) for c in ceiling], dtype=np.int64))
    payload = sealing.open_inputs([bytes(s) for s in sealed], owner_ids, [attribute.id] * len(rows),
                                  domain.payload_bytes(attribute))
    inputs = domain.from_payload(attribute, payload)
    width = attribute.width
    last = np.frombuffer(b"".join(bytes(h) for h in head_output), dtype=chains.OUT).reshape(len(rows), width)
    growth = chains.grow(inputs, head, last, target, grid, attribute.domain_size, rng, attribute.draw_divisor)
    grown = np.flatnonzero(growth.count > 0)
    if grown.size == 0:
        return 0
    _write_growth(attribute, [value_ids[i] for i in grown], [bytes(eps_blobs[i]) for i in grown],
                  [bytes(out_blobs[i]) for i in grown], np.array(lengths)[grown], growth, grown)
    return int(grown.size)


def _write_growth(attribute, value_ids, eps_blobs, out_blobs, lengths, growth: chains.Growth, rows) -> None:
    """Append each row's new steps to its chain (one executemany of full rows; the generic path)."""
    params = []
    for j, i in enumerate(rows):
        k = int(growth.count[i])
        new_eps = growth.eps[i, :k].astype(chains.EPS)
        new_out = growth.out[i, :k].astype(chains.OUT)
        params.append((eps_blobs[j] + new_eps.tobytes(), out_blobs[j] + new_out.tobytes(), int(lengths[j]) + k,
                       from_micro(int(new_eps[-1])), new_out[-1].tobytes(), timezone.now(), value_ids[j]))
    table = Chain._meta.db_table
    with connection.cursor() as cur:
        cur.executemany(
            f"UPDATE {table} SET epsilons = %s, outputs = %s, length = %s, head = %s, head_output = %s, "
            f"updated_at = %s WHERE value_id = %s", params)
