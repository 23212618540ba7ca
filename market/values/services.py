"""Market services: contributing values and growing their chains (docs/architecture.md#apps-and-models).

Each service is one transaction; the ledger block is written in it; Celery
work is enqueued only on commit.
"""
from __future__ import annotations

import numbers
from datetime import datetime

import numpy as np
from django.db import transaction
from django.utils import timezone

from accounts import roles
from accounts.epsilon import from_micro, parse, to_micro
from accounts.ledger import hashchain as ledger
from accounts.locks import Lock
from accounts.locks import take as take_lock
from accounts.models import BudgetAccount, LedgerEntry, User
from accounts.services import BudgetError, Schedule, event_rows
from ldpmarket.problems import CustodyRefused
from market.chains import grow as chains
from market.chains import store
from market.models import Attribute, Value
from market.values import inputs as domain
from market.values import sealing
from mechanisms.random import uniform_below


def values_create_many(*, attribute: Attribute, owners: list[User], raws: list | None, ceiling=None,
                       schedule: Schedule | None = None, now: datetime | None = None, rng=None,
                       custody: str = Value.Custody.SERVICE) -> list[Value]:
    """Contribute one value per owner to ``attribute`` under one ceiling policy, in one transaction.

    ``custody="owner"`` (docs/custody.md): ``raws`` is None, nothing of the values reaches the service; each value
    gets its budget, an empty chain slot that the owner's device fills (``value_upload_chain``), its policy
    entry and an ``owner_custody`` entry in the ledger.

    Each value gets its sealed raw value and mechanism input, a budget account,
    a chain from the grid start up to its ceiling (the first grid point at
    least: pre-generation costs no privacy) in the next free slots of the
    attribute's chain blocks (``market.chains.store``, under its chain lock),
    and a ledger entry for its policy.
    Values of one-shot attributes (``Attribute.is_oneshot``) get no chain: each
    release draws afresh from the sealed input (``market.purchases.oneshot``).
    """
    if (ceiling is None) == (schedule is None):
        raise BudgetError("Give either a fixed ceiling or a schedule.")
    if custody == Value.Custody.OWNER:
        return _values_create_held(attribute=attribute, owners=owners, ceiling=ceiling, schedule=schedule, now=now,
                                   rng=rng)
    if custody != Value.Custody.SERVICE:
        raise BudgetError(f"Custody must be 'service' or 'owner', not {custody!r}.")
    if raws is None or len(owners) != len(raws):
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
    key_id = sealing.newest_key_id()  # the key seal_inputs and seal_raw use
    with transaction.atomic():
        block_ids = slots = [None] * len(owners)
        if not attribute.is_oneshot:
            store.lock(attribute.id)
            block_ids, slots = store.place(attribute, len(owners))
        values = Value.objects.bulk_create(
            [Value(owner=o, attribute=attribute, input_sealed=s, cohort=int(c),
                   raw_sealed=sealing.seal_raw(domain.raw_text(attribute, r), owner_id=o.id,
                                               attribute_id=attribute.id), value_key_id=key_id,
                   block_id=None if b is None else int(b), slot=None if k is None else int(k))
             for o, r, s, c, b, k in zip(owners, raws, sealed_inputs, cohorts, block_ids, slots)], batch_size=2000)
        budgets = BudgetAccount.objects.bulk_create(
            [BudgetAccount(value=v, attribute_id=v.attribute_id, ceiling=current, **policy) for v in values],
            batch_size=2000)
        if not attribute.is_oneshot:
            n, steps = len(values), points.size
            store.store(attribute, store.read(block_ids), np.repeat(block_ids, steps),
                             np.repeat(slots, steps), np.tile(points, n), outputs.reshape(n * steps, -1))
        ledger.append(event_rows(budgets, LedgerEntry.Kind.SCHEDULE if schedule else LedgerEntry.Kind.CEILING),
                      shard=attribute.id)
    return values


def _values_create_held(*, attribute: Attribute, owners: list[User], ceiling, schedule: Schedule | None,
                        now: datetime | None, rng=None) -> list[Value]:
    """``values_create_many`` for owner-held values: budgets, empty chain slots and ledger entries only.  A string
    value gets its RAPPOR cohort here, uniformly at random as a service-held one (public: the device hashes
    with it, docs/custody.md)."""
    if not attribute.supports_owner_custody:
        raise CustodyRefused("Only the values of gradual-release categorical, binary, numeric and string attributes "
                             "can be kept on their owner's device (docs/custody.md).", field="custody")
    if not all(roles.can_contribute(o) for o in owners):
        raise BudgetError("Only owners can contribute values.")
    now = now or timezone.now()
    current = parse(ceiling, name="ceiling") if schedule is None else schedule.ceiling_at(now)
    policy = schedule.fields() if schedule else {}
    cohorts = np.zeros(len(owners), dtype=np.int64)
    if attribute.kind == Attribute.Kind.STRING and owners:
        cohorts = uniform_below(rng, attribute.num_cohorts, len(owners))
    with transaction.atomic():
        store.lock(attribute.id)
        block_ids, slots = store.place(attribute, len(owners))
        values = Value.objects.bulk_create(
            [Value(owner=o, attribute=attribute, custody=Value.Custody.OWNER, block_id=int(b), slot=int(k),
                   cohort=int(c))
             for o, b, k, c in zip(owners, block_ids, slots, cohorts)], batch_size=2000)
        budgets = BudgetAccount.objects.bulk_create(
            [BudgetAccount(value=v, attribute_id=v.attribute_id, ceiling=current, **policy) for v in values],
            batch_size=2000)
        # each value's policy entry, then (after all of them) its custody entry: one block
        rows = event_rows(budgets + budgets, LedgerEntry.Kind.SCHEDULE if schedule else LedgerEntry.Kind.CEILING)
        rows.records["kind"][len(budgets):] = ledger.KINDS.index(LedgerEntry.Kind.OWNER_CUSTODY)
        ledger.append(rows, shard=attribute.id)
    return values


def value_create(*, owner: User, attribute: Attribute, raw=None, ceiling=None, schedule: Schedule | None = None,
                 rng=None, custody: str = Value.Custody.SERVICE) -> Value:
    """Contribute one value (see ``values_create_many``); an owner-held value takes no ``raw``."""
    if Value.objects.filter(owner=owner, attribute=attribute).exists():
        raise BudgetError("You have already contributed a value to this attribute.")
    return values_create_many(attribute=attribute, owners=[owner], raws=None if custody == Value.Custody.OWNER
                              else [raw], ceiling=ceiling, schedule=schedule, rng=rng, custody=custody)[0]


def value_upload_chain(*, value_id: int, owner: User, epsilons: list, outputs: list) -> Value:
    """Store the chain points an owner's device drew for its owner-held value (docs/custody.md#uploads).

    ``epsilons`` (Decimals) must be strictly increasing, continue the stored chain (the first upload starts at
    the grid start, a later one at the grid point right after the stored head), lie on the attribute's grid
    except perhaps the last (the *upload level* the owner chose) and not pass the grid's stop; ``outputs`` are
    label indices 0..m-1 (numeric: the discretized bit's chain, 0 or 1), or for a string attribute one text of
    ``num_bits`` characters 0/1 per epsilon (each Bloom bit's chain, drawn at ``epsilon / draw_divisor``).
    Points above the ceiling cost nothing and are never sold above it (rule 5).  Under the value's budget lock
    and the attribute's chain lock (``accounts.locks``); the points are sealed like every chain point, and an
    ``owner_upload`` ledger entry records the new upload level.
    """
    with transaction.atomic():
        take_lock(Lock.BUDGETS)
        budget = BudgetAccount.objects.select_for_update().filter(value_id=value_id).first()
        value = Value.objects.select_related("attribute").filter(id=value_id).first()
        if budget is None or value is None or value.owner_id != owner.id:
            raise CustodyRefused("No such value of yours.", field="value")
        if value.custody != Value.Custody.OWNER:
            raise CustodyRefused("This value is held by the service, which grows its chain itself.", field="value")
        if value.withdrawn_at is not None:
            raise CustodyRefused("This value was withdrawn.", field="value")
        attribute = value.attribute
        store.lock(attribute.id)
        blocks = store.read([value.block_id])
        head = int(store.heads_of(blocks, np.array([value.block_id]), np.array([value.slot]))[0])
        eps, outs = _check_upload(attribute, head, epsilons, outputs)
        n = eps.size
        store.store(attribute, blocks, np.full(n, value.block_id), np.full(n, value.slot), eps,
                    outs.reshape(n, attribute.width))
        rows = event_rows([budget], LedgerEntry.Kind.OWNER_UPLOAD)
        rows.records["epsilon"] = eps[-1]
        ledger.append(rows, shard=attribute.id)
    return value


def _check_upload(attribute: Attribute, head: int, epsilons: list, outputs: list) -> tuple[np.ndarray, np.ndarray]:
    """The upload as micro-epsilons and outputs, or ``CustodyRefused`` naming the field (docs/custody.md#uploads)."""
    grid, m = chains.Grid.of(attribute), attribute.domain_size
    if not epsilons:
        raise CustodyRefused("Upload at least one chain point.", field="epsilons")
    if len(outputs) != len(epsilons):
        raise CustodyRefused(f"Give one output per epsilon: {len(epsilons)} epsilons, {len(outputs)} "
                             "outputs.", field="outputs")
    micros = []
    for e in epsilons:
        micro = to_micro(e)
        if from_micro(micro) != e:
            raise CustodyRefused(f"{e} has more than 6 decimal places.", field="epsilons")
        micros.append(micro)
    eps = np.array(micros, dtype=np.int64)
    if (np.diff(eps) <= 0).any():
        raise CustodyRefused("The epsilons must be strictly increasing.", field="epsilons")
    first = grid.start if head == 0 else int(grid.next_point_after(np.array([head]))[0])
    if eps[0] != first:
        where = "the grid start" if head == 0 else f"the grid point after the stored head {from_micro(head)}"
        raise CustodyRefused(f"The upload must start at {where}: {from_micro(first)}, not "
                             f"{from_micro(int(eps[0]))}.", field="epsilons")
    on_grid = ((eps - grid.start) % grid.step == 0) & (eps >= grid.start)
    if not on_grid[:-1].all():
        bad = int(eps[:-1][~on_grid[:-1]][0])
        raise CustodyRefused(f"{from_micro(bad)} is not on the attribute's grid (from "
                             f"{from_micro(grid.start)} in steps of {from_micro(grid.step)}); only the "
                             "last epsilon, the upload level, may lie between grid points.", field="epsilons")
    if n_gap := int((np.diff(eps) > grid.step).sum()):
        raise CustodyRefused(f"The upload skips {n_gap} grid point(s): every grid point up to the upload "
                             "level must be given.", field="epsilons")
    if eps[-1] > grid.stop:
        raise CustodyRefused(f"The upload level {from_micro(int(eps[-1]))} is above the attribute's cap "
                             f"{from_micro(grid.stop)}.", field="epsilons")
    if attribute.kind == Attribute.Kind.STRING:
        return eps, _bloom_outputs(outputs, attribute.num_bits)
    if any(isinstance(o, bool) or not isinstance(o, numbers.Integral) or not 0 <= o < m for o in outputs):
        # before numpy: 2**63 does not even fit its int64
        raise CustodyRefused(f"Outputs are label indices from 0 to {m - 1}.", field="outputs")
    return eps, np.asarray(outputs, dtype=np.int64)


def _bloom_outputs(outputs: list, num_bits: int) -> np.ndarray:
    """A string upload's outputs, one text of ``num_bits`` characters 0/1 per epsilon (docs/custody.md#uploads), as
    an (n, num_bits) array, or ``CustodyRefused`` naming ``outputs``."""
    for k, o in enumerate(outputs):
        if not isinstance(o, str):
            raise CustodyRefused(f"outputs[{k}] must be a text of {num_bits} characters 0 or 1 (the Bloom bits' "
                                 f"outputs), got {type(o).__name__}.", field="outputs")
        if len(o) != num_bits:
            raise CustodyRefused(f"outputs[{k}] must have {num_bits} characters (one per Bloom bit), not "
                                 f"{len(o)}.", field="outputs")
        if o.strip("01"):
            raise CustodyRefused(f"outputs[{k}] may hold only the characters 0 and 1.", field="outputs")
    return np.array([[c == "1" for c in o] for o in outputs], dtype=np.int64).reshape(len(outputs), num_bits)


def value_delete_raw(*, value_id: int) -> Value:
    """Delete the raw value and the sealed input; the chain stays sellable up to its head."""
    with transaction.atomic():
        take_lock(Lock.BUDGETS)
        budget = BudgetAccount.objects.select_for_update().get(value_id=value_id)
        take_lock(Lock.VALUE)
        value = Value.objects.select_for_update().get(id=value_id)
        if value.custody == Value.Custody.OWNER:
            raise BudgetError("This value is kept on your device: the service holds no raw value to delete.")
        if value.raw_deleted_at is None:
            value.raw_sealed = value.input_sealed = None
            value.raw_deleted_at = timezone.now()
            value.save(update_fields=["raw_sealed", "input_sealed", "raw_deleted_at"])
            ledger.append(event_rows([budget], LedgerEntry.Kind.RAW_DELETED), shard=value.attribute_id)
    return value


def value_set_pum_tag(*, value_id: int, tag: str | None, owner: User | None = None) -> Value:
    """Tag a uRR/uRAP value as personally sensitive under one of its attribute's ``pum_tags`` (or untag it).

    The tag is sealed with the mechanism input (``market.values.inputs``: bound to the
    owner and attribute, like the input itself), so the server stores only
    ciphertext and a release reveals no more than the mechanism's output: a
    tagged value is released as the tag's bot ``⊥tag`` through the common uRR/uRAP
    with the sensitive set extended by the bots (``mechanisms.uldp.pum_preprocess``).
    Only the value's owner may tag it (``owner``, when given, must be the owner:
    the portal passes the signed-in user).  No budget changes, so no ledger entry;
    the budget row, then the value's (``accounts.locks``).
    """
    with transaction.atomic():
        take_lock(Lock.BUDGETS)
        BudgetAccount.objects.select_for_update().filter(value_id=value_id).values_list("value_id").first()
        take_lock(Lock.VALUE)
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
                                      domain.payload_bytes(attribute), value.value_key_id)
        value.input_sealed = sealing.seal_inputs([value.owner_id], [attribute.id],
                                                 domain.with_pum_tag(payload, code))[0]
        if value.value_key_id != sealing.newest_key_id():  # the raw value shares the row's key: sealed again too
            value.raw_sealed = sealing.seal_raw(sealing.raw_of(value), owner_id=value.owner_id,
                                                attribute_id=value.attribute_id)
            value.value_key_id = sealing.newest_key_id()
        value.save(update_fields=["input_sealed", "raw_sealed", "value_key_id"])
    return value


