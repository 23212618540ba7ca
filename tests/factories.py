"""factory_boy factories for the service's models: users of each role, datasets and attributes of each kind.

Values, budgets and chains are made through ``market.values.services.values_create_many`` (the service path), not
by factories, so a test never depends on a hand-built chain; ``make_owners`` bulk-creates many owners fast.
"""
from __future__ import annotations

from decimal import Decimal

import factory
from django.utils import timezone
from factory.django import DjangoModelFactory

from accounts.models import MoneyAccount, MoneyEntry, User
from accounts.roles import CONSOLE_ROLES
from market.models import Attribute, Dataset

PASSWORD = "correct horse battery staple"


class UserFactory(DjangoModelFactory):
    """A user of a role, as a deployment makes one: ``is_staff`` follows the role exactly as
    ``accounts.roles.grant_role`` sets it (True for auditors and staff)."""

    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    role = User.Role.OWNER
    is_staff = factory.LazyAttribute(lambda u: u.role in CONSOLE_ROLES)
    password = factory.django.Password(PASSWORD)


class OwnerFactory(UserFactory):
    username = factory.Sequence(lambda n: f"owner{n}")
    role = User.Role.OWNER


class BuyerFactory(UserFactory):
    """An approved buyer, as an operator makes one (``buyer_approved_at=None``: one that signed up and awaits
    approval, docs/security.md#buyer-accounts)."""

    username = factory.Sequence(lambda n: f"buyer{n}")
    role = User.Role.BUYER
    organisation = factory.Sequence(lambda n: f"Research lab {n}")
    buyer_approved_at = factory.LazyFunction(timezone.now)


class AuditorFactory(UserFactory):
    username = factory.Sequence(lambda n: f"auditor{n}")
    role = User.Role.AUDITOR


class StaffFactory(UserFactory):
    username = factory.Sequence(lambda n: f"staff{n}")
    role = User.Role.STAFF


class DatasetFactory(DjangoModelFactory):
    class Meta:
        model = Dataset

    title = factory.Sequence(lambda n: f"Dataset {n}")
    description = "A test dataset."
    curator = factory.SubFactory(StaffFactory)


class AttributeFactory(DjangoModelFactory):
    """A categorical attribute over three labels by default; see the kind-specific factories below."""

    class Meta:
        model = Attribute

    dataset = factory.SubFactory(DatasetFactory)
    name = factory.Sequence(lambda n: f"attribute{n}")
    kind = Attribute.Kind.CATEGORICAL
    labels = factory.LazyFunction(lambda: ["red", "green", "blue"])
    grid_start = Decimal("0.1")
    grid_step = Decimal("0.1")
    grid_stop = Decimal("10")
    price_policy = factory.LazyFunction(lambda: {"per_value": "0.01"})


class CategoricalAttributeFactory(AttributeFactory):
    pass


class BinaryAttributeFactory(AttributeFactory):
    kind = Attribute.Kind.BINARY
    labels = factory.LazyFunction(lambda: ["no", "yes"])


class NumericAttributeFactory(AttributeFactory):
    kind = Attribute.Kind.NUMERIC
    labels = factory.LazyFunction(list)
    low = Decimal("0")
    high = Decimal("100")


class StringAttributeFactory(AttributeFactory):
    kind = Attribute.Kind.STRING
    labels = factory.LazyFunction(list)
    num_bits = 16
    num_hashes = 2
    num_cohorts = 4


class UrrAttributeFactory(AttributeFactory):
    """Categorical under uRR: labels a..e, sensitive {a, b}, two PUM tags (a one-shot attribute)."""

    mechanism = Attribute.Mechanism.URR
    labels = factory.LazyFunction(lambda: ["a", "b", "c", "d", "e"])
    sensitive = factory.LazyFunction(lambda: ["a", "b"])
    pum_tags = factory.LazyFunction(lambda: ["home", "work"])


class UrapAttributeFactory(UrrAttributeFactory):
    mechanism = Attribute.Mechanism.URAP


class TernaryAttributeFactory(AttributeFactory):
    kind = Attribute.Kind.TERNARY
    mechanism = Attribute.Mechanism.RR3
    labels = factory.LazyFunction(lambda: ["none", "plus", "minus"])


class GraphAttributeFactory(AttributeFactory):
    kind = Attribute.Kind.GRAPH
    mechanism = Attribute.Mechanism.LPP
    labels = factory.LazyFunction(list)
    num_items = 4


class DistributionAttributeFactory(AttributeFactory):
    kind = Attribute.Kind.DISTRIBUTION
    mechanism = Attribute.Mechanism.PRIVATE_SAMPLE
    labels = factory.LazyFunction(lambda: ["x", "y", "z"])
    prior = factory.LazyFunction(lambda: [0.2, 0.3, 0.5])


def make_owners(n: int, prefix: str = "bulk-owner") -> list[User]:
    """``n`` owners in one bulk INSERT (no password hashing); returned with their ids."""
    users = User.objects.bulk_create(
        [User(username=f"{prefix}-{i}", role=User.Role.OWNER, password="!") for i in range(n)], batch_size=5000)
    if users and users[0].pk is None:  # backends without RETURNING: read the ids back
        users = list(User.objects.filter(username__startswith=f"{prefix}-").order_by("id"))
    return users


def contribute(attribute: Attribute, raws: list, *, prefix: str | None = None, **policy):
    """One new owner per raw value, contributed through ``values_create_many`` (the service path)."""
    from market.values.services import values_create_many

    owners = make_owners(len(raws), prefix or f"a{attribute.id}-owner")
    return values_create_many(attribute=attribute, owners=owners, raws=list(raws), **policy)


def stored_chains(attribute: Attribute, value_ids=None) -> dict:
    """``{value_id: (micro-epsilons, outputs (L, width))}``: each value's slot across its block's stored rows,
    opened (``market.chains.store``)."""
    import numpy as np

    from market.chains import store as chainstore
    from market.models import Value

    qs = Value.objects.filter(attribute=attribute, block__isnull=False)
    if value_ids is not None:
        qs = qs.filter(id__in=list(value_ids))
    rows = list(qs.order_by("id").values_list("id", "block_id", "slot"))
    if not rows:
        return {}
    ids, blocks, slots = (np.array(c, dtype=np.int64) for c in zip(*rows))
    state = chainstore.read(blocks)
    eps = chainstore.epsilons_of(state, blocks, slots)
    every = np.unique(np.concatenate(eps))
    present, outputs = chainstore.grid_of_points(attribute, state, blocks, slots, every)
    return {int(v): (every[present[i]], outputs[i][present[i]]) for i, v in enumerate(ids.tolist())}


def chain_rows(attribute: Attribute) -> dict:
    """Every chain of the attribute as stored, opened: ``{value_id: (epsilons bytes, outputs bytes, length,
    head)}``, for identity checks (the sealed bytes themselves differ with every seal: a fresh nonce)."""
    return {v: (e.astype("<i8").tobytes(), o.astype("<i2").tobytes(), int(e.size), int(e[-1]) if e.size else 0)
            for v, (e, o) in stored_chains(attribute).items()}


def chain_heads(values) -> dict:
    """``{value_id: (head, points)}``: each value's chain head (a Decimal epsilon) and number of stored points."""
    from accounts.epsilon import from_micro
    from market.chains import store as chainstore

    values = list(values)
    got = chainstore.lengths_and_heads([(v.block_id, v.slot) for v in values if v.block_id is not None])
    return {v.id: (from_micro(got[(v.block_id, v.slot)][1]), got[(v.block_id, v.slot)][0])
            for v in values if v.block_id is not None}


def chain_head(value) -> tuple:
    """``(head, points)`` of one value's chain (re-read: its block and slot are fixed)."""
    from market.models import Value

    value = Value.objects.get(id=value.id)
    return chain_heads([value])[value.id]


def replace_chain(value, eps_micro, outputs) -> None:
    """Test set-up: make ``value``'s chain exactly ``(eps_micro, outputs (L, width))``, as if it had been stored
    so: its slot is cleared from every row of its block, then the points are stored (``market.chains.store``)."""
    import numpy as np

    from market.chains import store as chainstore
    from market.models import ChainBlock, ChainPoint, Value
    from market.values import sealing

    value = Value.objects.select_related("attribute").get(id=value.id)
    attribute, slot = value.attribute, value.slot
    blocks = chainstore.read([value.block_id])
    block = blocks[value.block_id]
    opened = chainstore.open_rows(attribute, block, range(block.eps.size))
    for r, out in opened.items():
        present = block.present[r].copy()
        present[slot] = False
        out[slot] = -1
        bits = chainstore.bitmap(present)
        ChainPoint.objects.filter(id=int(block.point_ids[r])).update(
            present=bits, sealed=sealing.seal_points(out, attribute_id=attribute.id, block_id=block.id,
                                                     epsilon=int(block.eps[r]), present=bits))
    heads = block.heads.copy()
    heads[slot] = 0
    ChainBlock.objects.filter(id=block.id).update(heads=heads.astype("<i8").tobytes())
    eps_micro = np.asarray(eps_micro, dtype=np.int64)
    blocks = chainstore.read([value.block_id])
    chainstore.store(attribute, blocks, np.full(eps_micro.size, value.block_id), np.full(eps_micro.size, slot),
                     eps_micro, np.asarray(outputs).reshape(eps_micro.size, -1))


def fund(user, amount) -> MoneyAccount:
    """Give a buyer credit, with its money entry (as a deposit would)."""
    account, _ = MoneyAccount.objects.get_or_create(user=user, kind=MoneyAccount.Kind.BUYER_CREDIT)
    account.balance += Decimal(str(amount))
    account.save(update_fields=["balance"])
    MoneyEntry.objects.create(account=account, amount=Decimal(str(amount)), balance_after=account.balance,
                              memo="test deposit")
    return account
