"""``python manage.py load_demo``: the paper's two experiments as datasets
(docs/mechanisms-reference.md#the-demo-experiments), owner-held values (docs/custody.md) and one-shot demos.

* "Binary experiment": one binary attribute, 1000 values (600 ones, 400 zeros),
  a fixed ceiling of 1.0 so the paper's whole path eps_ns(1..10) (eps_alpha = 1,
  eps_beta = 0.5, which stays below eps_alpha = 1) is sellable at once.
* "Categorical experiment": one categorical attribute over "1".."5" with
  100/200/300/400/500 values, on a release schedule growing linearly from 0.1
  now to 1.0 in 30 days (Celery beat, or ``manage.py advance_schedules``,
  raises the ceilings; workers extend the chains).

Every value has its own owner (``demo-b-0001``..., ``demo-c-0001``..., with
unusable passwords), except one value of each experiment (binary, categorical
and device-held), which belongs to ``demo-owner`` so the owner portal has
something to show.  ``demo-buyer`` gets
1000 of credit.  Idempotent: a dataset whose title exists and users whose
usernames exist are left as they are, and the summary is read from the
database, so a second run creates nothing and prints the same summary.

Five small datasets show the one-shot mechanisms (docs/budget-rules.md#one-shot-losses-add-up),
each with its own owners (``demo-u-``, ``demo-t-``, ``demo-g-``, ``demo-d-``, ``demo-h-``) and a
fixed ceiling of 5: a categorical attribute with a sensitive set under uRR and
two PUM tags, a three-state attribute under RR3, a bipartite graph under LPP‡,
a distribution attribute for private samples and 1,000 products under OLH.  Surveys run on the binary
experiment.  Their contents are fixed (a seeded generator, not privacy noise).

"Device-held experiment" shows owner-held values (docs/custody.md): 200 values of one
categorical attribute over four labels (owners ``demo-o-0001``..., and one of
demo-owner's), fixed ceiling 1.0, contributed without their raw values
(``values_create_many(custody="owner")``).  Each owner's "device" draws its chain
with the owner SDK's own sampler (``ldpmarket_client.sampler.chain``, from the
OS CSPRNG, as a device does) and uploads it through ``value_upload_chain`` (what
``POST /api/v1/owner/values/{id}/chain/`` runs): most up to 1.0, some only to 0.5
(demo-owner's among them), so purchases above 0.5 leave those out as
``awaiting_owner``, and a few not at all.  Which label each owner has and how far
each device uploads are fixed (a seeded generator); the chains are not.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import numpy as np
from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from accounts.epsilon import from_micro
from accounts.ledger.checkpoints import blocks_awaiting_checkpoint, checkpoint_make
from accounts.models import User
from accounts.money import selectors as money_selectors
from accounts.money.format import format_money
from accounts.money.services import money_topup
from accounts.services import Schedule, buyer_approve
from ldpmarket import jobs
from market.chains import store
from market.models import Attribute, Dataset, Value
from market.purchases.pricing import PricePolicy
from market.values import inputs as domain
from market.values import sealing
from market.values.services import value_upload_chain, values_create_many

BUYER = "demo-buyer"
BUYER_PASSWORD = "demo-buyer-password"
BUYER_ORGANISATION = "Demo Analytics"
BUYER_CREDIT = Decimal("1000")
OWNER = "demo-owner"
OWNER_PASSWORD = "demo-owner-password"
BASE_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Experiment:
    title: str
    description: str
    attribute: str
    kind: str
    labels: list[str]
    counts: dict[str, int]  # label -> number of values, in label order
    owner_prefix: str
    demo_owner_label: str  # the label of demo-owner's value (one of the counted values)
    ceiling: Decimal | None = None  # fixed ceiling, or
    schedule: tuple[Decimal, Decimal, timedelta] | None = None  # (start, cap, duration), linear from now
    grid: tuple[Decimal, Decimal, Decimal] = (Decimal("0.1"), Decimal("0.1"), Decimal("2.0"))
    attribute_description: str = ""  # the question, in plain words, for buyers and owners


#: The binary experiment in plain words (what owners and buyers read).  Its ceiling of 1.0 covers the paper's whole
#: RAPPOR path eps_ns(1..10) (eps_alpha = 1, eps_beta = 0.5): docs/mechanisms-reference.md#the-demo-experiments.
BINARY_DESCRIPTION = ("The paper's binary experiment: 1000 owners answer a yes/no question (600 yes, 400 no). Each "
                      "value may spend at most ε 1.0, enough for all ten precision levels the experiment sells.")
#: Dataset descriptions of earlier versions, in the papers' terms, and what ``load_demo`` now says instead (issue
#: 31): a database loaded before gets the new ones (``describe_existing``), unless someone edited them since.
REWORDED = {
    "Binary experiment": (
        "The paper's binary experiment: 1000 owners answer a yes/no question (600 ones, 400 zeros). Ceiling 1.0 "
        "covers the RAPPOR noisy-sampling path eps_ns(1..10) with eps_alpha = 1, eps_beta = 0.5."),
    "Places visited (utility-optimized LDP)": (
        "Where 200 owners spent last evening. The clinic and the night club are sensitive and get full epsilon-LDP; "
        "the other places go through uRR with less noise. Owners may tag their value as personally sensitive "
        "(home, workplace)."),
    "Opinions (three states)": "150 owners' relation to a brand: none, likes or dislikes; sold through RR3.",
    "Film ratings (bipartite graph)": "120 owners' ratings of five films, weights in [-1, 1]; sold through LPP‡.",
    "Favourite products (1,000 labels, optimal local hashing)": (
        "3,000 owners' favourite among 1,000 products (a few popular, a long tail); sold through optimal local "
        "hashing (OLH), whose reports are a hash seed and one of a few buckets, so they stay small however many "
        "labels there are."),
}


EXPERIMENTS = [
    Experiment(
        title="Binary experiment",
        description=BINARY_DESCRIPTION,
        attribute="answer", kind=Attribute.Kind.BINARY, labels=["0", "1"], counts={"0": 400, "1": 600},
        owner_prefix="demo-b-", demo_owner_label="1", ceiling=Decimal("1.0"),
        attribute_description="Your answer to a yes/no question: 1 means yes, 0 means no. Surveys ask this question."),
    Experiment(
        title="Categorical experiment",
        description=("The paper's categorical experiment: 1500 owners over five categories "
                     "(100, 200, 300, 400, 500 of categories 1..5); budgets grow linearly from 0.1 to 1.0 "
                     "over 30 days."),
        attribute="category", kind=Attribute.Kind.CATEGORICAL, labels=["1", "2", "3", "4", "5"],
        counts={"1": 100, "2": 200, "3": 300, "4": 400, "5": 500},
        owner_prefix="demo-c-", demo_owner_label="3",
        schedule=(Decimal("0.1"), Decimal("1.0"), timedelta(days=30)),
        attribute_description="Which of five groups, 1 to 5, you belong to."),
]


def _user(username: str, password: str, **fields) -> User:
    """Get or create a demo user; an existing one is left exactly as it is (idempotence)."""
    user = User.objects.filter(username=username).first()
    if user is None:
        user = User(username=username, **fields)
        user.set_password(password)
        user.save()
    return user


def demo_users() -> tuple[User, User]:
    """demo-buyer (approved, with 1000 of credit, one account and its ledger entry in one transaction) and
    demo-owner."""
    with transaction.atomic():
        buyer = _user(BUYER, BUYER_PASSWORD, role=User.Role.BUYER, organisation=BUYER_ORGANISATION,
                      email="demo-buyer@example.org")
        buyer = buyer_approve(buyer=buyer, notify=False)  # an account the operator made (docs/security.md)
        owner = _user(OWNER, OWNER_PASSWORD, role=User.Role.OWNER, email="demo-owner@example.org")
        if money_selectors.account_of(buyer, money_selectors.KIND_OF_ROLE["buyer"]) is None:
            money_topup(buyer=buyer, amount=BUYER_CREDIT, reason="Demo credit (load_demo)", by=None)
    return buyer, owner


def _owners(prefix: str, demo_owner: User, n: int) -> list[User]:
    """demo-owner first, then one owner per remaining value (created in bulk, missing ones only)."""
    names = [f"{prefix}{i:04d}" for i in range(1, n)]
    existing = {u.username: u for u in User.objects.filter(username__in=names)}
    missing = [User(username=name, role=User.Role.OWNER, password=make_password(None))
               for name in names if name not in existing]
    for user in User.objects.bulk_create(missing, batch_size=2000):
        existing[user.username] = user
    return [demo_owner] + [existing[name] for name in names]


def create_experiment(experiment: Experiment, demo_owner: User, now=None) -> bool:
    """Create the dataset, its attribute, owners and values in one transaction; False if it already exists."""
    now = now or timezone.now()
    with transaction.atomic():
        if Dataset.objects.filter(title=experiment.title).exists():
            return False
        dataset = Dataset.objects.create(title=experiment.title, description=experiment.description)
        start, step, stop = experiment.grid
        attribute = Attribute.objects.create(
            dataset=dataset, name=experiment.attribute, kind=experiment.kind, labels=experiment.labels,
            grid_start=start, grid_step=step, grid_stop=stop, price_policy=PricePolicy.parse(None).as_json(),
            description=experiment.attribute_description)
        raws = [experiment.demo_owner_label]
        remaining = Counter(experiment.counts)
        remaining[experiment.demo_owner_label] -= 1
        for label in experiment.labels:
            raws += [label] * remaining[label]
        owners = _owners(experiment.owner_prefix, demo_owner, len(raws))
        if experiment.schedule:
            s_start, s_cap, duration = experiment.schedule
            at = now.replace(microsecond=0)
            policy = {"schedule": Schedule(start=s_start, cap=s_cap, start_at=at, end_at=at + duration)}
        else:
            policy = {"ceiling": experiment.ceiling}
        values_create_many(attribute=attribute, owners=owners, raws=raws, now=now, **policy)
    return True


@dataclass(frozen=True)
class HeldExperiment:
    """A dataset of owner-held values (docs/custody.md) whose chains the owners' devices draw and upload."""

    title: str
    description: str
    attribute: str
    labels: list[str]
    counts: dict[str, int]  # label -> number of values (on the owners' devices), in label order
    uploads: dict[Decimal | None, int]  # upload level -> number of values (None: nothing uploaded yet)
    owner_prefix: str
    demo_owner_label: str
    demo_owner_upload: Decimal  # demo-owner's upload level (one of ``uploads``' keys, counted there)
    ceiling: Decimal
    grid: tuple[Decimal, Decimal, Decimal] = (Decimal("0.1"), Decimal("0.1"), Decimal("2.0"))
    attribute_description: str = ""
    seed: int = 20261116  # which owner has which label and uploads how far; the chains come from the OS CSPRNG


HELD = HeldExperiment(
    title="Device-held experiment",
    description=("200 owners say how they got to work today, and each keeps the answer on their own device: the "
                 "device randomizes it and uploads only the randomized chain, up to an upload level it chooses. "
                 "Most devices uploaded up to 1.0, some only up to 0.5 (purchases above 0.5 wait for them), "
                 "a few nothing yet."),
    attribute="commute", labels=["walk", "bike", "car", "transit"],
    counts={"walk": 40, "bike": 50, "car": 70, "transit": 40},
    uploads={Decimal("1.0"): 160, Decimal("0.5"): 31, None: 9},
    owner_prefix="demo-o-", demo_owner_label="bike", demo_owner_upload=Decimal("0.5"), ceiling=Decimal("1.0"),
    attribute_description="How did you get to work today? On foot, by bike, by car or by public transport.")


def held_contents(held: HeldExperiment) -> tuple[list[str], list[Decimal | None]]:
    """What the owners' devices hold and how far each uploads, in owner order (demo-owner's first, then
    ``<prefix>0001``...): fixed by ``held.seed``, not privacy noise."""
    rng = np.random.default_rng(held.seed)
    labels, levels = Counter(held.counts), Counter(held.uploads)
    labels[held.demo_owner_label] -= 1
    levels[held.demo_owner_upload] -= 1
    raws = [held.demo_owner_label] + [held.labels[i] for i in rng.permutation(
        [k for k, label in enumerate(held.labels) for _ in range(labels[label])])]
    others = [level for level in held.uploads for _ in range(levels[level])]
    return raws, [held.demo_owner_upload] + [others[i] for i in rng.permutation(len(others))]


def _device_chain(value: int, level: Decimal, attribute: Attribute, m: int) -> tuple[list[Decimal], list[int]]:
    """What an owner's device uploads (``ldpmarket_client.owner.Owner.contribute``): the grid points from the grid
    start up to ``level`` and the chain the SDK's sampler draws through them from the OS CSPRNG."""
    from ldpmarket_client import owner as sdk  # the client package: imported only by this demo step
    from ldpmarket_client import sampler

    grid = sdk.Grid(sdk.to_micro(attribute.grid_start), sdk.to_micro(attribute.grid_step),
                    sdk.to_micro(attribute.grid_stop))
    epsilons = [Decimal(sdk.epsilon_text(p)) for p in grid.upload_points(None, sdk.to_micro(level))]
    return epsilons, sampler.chain(value, epsilons, m)


def create_held_experiment(held: HeldExperiment, demo_owner: User, now=None) -> bool:
    """Create the dataset of owner-held values, its owners and values, and upload each device's chain, in one
    transaction; False if it already exists."""
    with transaction.atomic():
        if Dataset.objects.filter(title=held.title).exists():
            return False
        dataset = Dataset.objects.create(title=held.title, description=held.description)
        start, step, stop = held.grid
        attribute = Attribute.objects.create(
            dataset=dataset, name=held.attribute, kind=Attribute.Kind.CATEGORICAL, labels=held.labels,
            grid_start=start, grid_step=step, grid_stop=stop, price_policy=PricePolicy.parse(None).as_json(),
            description=held.attribute_description)
        raws, uploads = held_contents(held)
        owners = _owners(held.owner_prefix, demo_owner, len(raws))
        values = values_create_many(attribute=attribute, owners=owners, raws=None, ceiling=held.ceiling, now=now,
                                    custody=Value.Custody.OWNER)
    # Each upload is a transaction of its own, as an owner's device makes it: inside the dataset's transaction,
    # one upload's ledger append would be followed by the next value's budget lock, against the global lock
    # order (accounts/locks.py).
    m = len(held.labels)
    for value, owner, raw, level in zip(values, owners, raws, uploads):
        if level is None:
            continue
        epsilons, outputs = _device_chain(held.labels.index(raw), level, attribute, m)
        value_upload_chain(value_id=value.id, owner=owner, epsilons=epsilons, outputs=outputs)
    return True


@dataclass(frozen=True)
class OneShotDemo:
    title: str
    description: str
    attribute: dict  # Attribute fields besides dataset and name
    name: str
    owner_prefix: str
    raws: tuple  # the owners' raw values (one owner each)
    attribute_description: str = ""  # the question, in plain words, for buyers and owners


def _oneshot_demos() -> list[OneShotDemo]:

    rng = np.random.default_rng(20250101)  # the demo's contents, fixed; no privacy noise is drawn here
    places = ["home area", "office district", "park", "clinic", "night club"]
    visits = rng.choice(len(places), size=200, p=[0.3, 0.3, 0.2, 0.1, 0.1])
    states = rng.choice(3, size=150, p=[0.5, 0.3, 0.2])
    items = ["film-1", "film-2", "film-3", "film-4", "film-5"]
    edges = []
    for _ in range(120):
        chosen = rng.random(len(items)) < 0.4
        weights = np.round(rng.uniform(-1, 1, len(items)), 2)
        edges.append({items[j]: float(weights[j]) for j in range(len(items)) if chosen[j]})
    genres = ["rock", "jazz", "classical", "pop"]
    dists = np.round(rng.dirichlet([2, 0.5, 0.8, 3], size=100), 3)
    dists[:, -1] = np.round(1 - dists[:, :-1].sum(axis=1), 3)
    products = [f"product-{j:04d}" for j in range(1, 1001)]
    zipf = 1.0 / np.arange(1, 1001) ** 1.1  # a few popular products, a long tail
    favourites = rng.choice(1000, size=3000, p=zipf / zipf.sum())
    return [
        OneShotDemo(
            title="Places visited (utility-optimized LDP)",
            description=("Where 200 owners spent last evening. The clinic and the night club are sensitive: they "
                         "are always protected at the sale's ε. The other places get less noise and may be passed "
                         "on exactly. Owners may mark their own answer as personally sensitive (home, workplace)."),
            attribute={"kind": Attribute.Kind.CATEGORICAL, "mechanism": Attribute.Mechanism.URR, "labels": places,
                       "sensitive": ["clinic", "night club"], "pum_tags": ["home", "workplace"]},
            name="place", owner_prefix="demo-u-", raws=tuple(places[i] for i in visits),
            attribute_description="Where did you spend last evening? One of five places; the clinic and the night "
                                  "club are treated as sensitive."),
        OneShotDemo(
            title="Opinions (three states)",
            description=("150 owners' relation to a brand: none, likes or dislikes. Each sale reports one of the "
                         "three, randomized."),
            attribute={"kind": Attribute.Kind.TERNARY, "mechanism": Attribute.Mechanism.RR3,
                       "labels": ["none", "likes", "dislikes"]},
            name="opinion", owner_prefix="demo-t-", raws=tuple(["none", "likes", "dislikes"][i] for i in states),
            attribute_description="What do you think of the brand? No opinion, you like it, or you dislike it."),
        OneShotDemo(
            title="Film ratings (bipartite graph)",
            description=("120 owners' ratings of five films, from -1 (disliked) to 1 (liked). Each sale reports, "
                         "randomized, whether an owner rated one film picked at random, and how."),
            attribute={"kind": Attribute.Kind.GRAPH, "mechanism": Attribute.Mechanism.LPP, "labels": items,
                       "num_items": len(items)},
            name="ratings", owner_prefix="demo-g-", raws=tuple(edges),
            attribute_description="How did you rate the films you watched? For each of five films: not watched, or "
                                  "a rating from -1 (disliked) to 1 (liked)."),
        OneShotDemo(
            title="Listening habits (distributions)",
            description=("100 owners' share of listening time per genre; each purchase is one private sample per "
                         "owner, shaped by the public prior."),
            attribute={"kind": Attribute.Kind.DISTRIBUTION, "mechanism": Attribute.Mechanism.PRIVATE_SAMPLE,
                       "labels": genres, "prior": [0.3, 0.1, 0.15, 0.45]},
            name="genres", owner_prefix="demo-d-", raws=tuple({g: float(x) for g, x in zip(genres, row)}
                                                              for row in dists),
            attribute_description="How do you split your listening time between rock, jazz, classical and pop?"),
        OneShotDemo(
            title="Favourite products (1,000 labels, optimal local hashing)",
            description=("3,000 owners' favourite among 1,000 products (a few popular, a long tail). Each sale "
                         "hashes the answer into one of a few buckets and randomizes the bucket, so reports stay "
                         "small however many products there are."),
            attribute={"kind": Attribute.Kind.CATEGORICAL, "mechanism": Attribute.Mechanism.OLH,
                       "labels": products},
            name="favourite", owner_prefix="demo-h-", raws=tuple(products[i] for i in favourites),
            attribute_description="Which of our 1,000 products is your favourite?"),
    ]


ONESHOT_CEILING = Decimal("5")


def create_oneshot_demo(demo: OneShotDemo) -> bool:
    """Create one one-shot demo dataset (its attribute, owners and values) in one transaction; False if present."""
    with transaction.atomic():
        if Dataset.objects.filter(title=demo.title).exists():
            return False
        dataset = Dataset.objects.create(title=demo.title, description=demo.description)
        attribute = Attribute.objects.create(dataset=dataset, name=demo.name, description=demo.attribute_description,
                                             price_policy=PricePolicy.parse(None).as_json(), **demo.attribute)
        names = [f"{demo.owner_prefix}{i:04d}" for i in range(1, len(demo.raws) + 1)]
        existing = {u.username: u for u in User.objects.filter(username__in=names)}
        missing = [User(username=name, role=User.Role.OWNER, password=make_password(None))
                   for name in names if name not in existing]
        for user in User.objects.bulk_create(missing, batch_size=2000):
            existing[user.username] = user
        values_create_many(attribute=attribute, owners=[existing[n] for n in names], raws=list(demo.raws),
                           ceiling=ONESHOT_CEILING)
    return True


def describe_existing() -> int:
    """Give the demo attributes loaded before they had descriptions their description, and the demo datasets still
    described in the papers' terms their plain words (``REWORDED``); idempotent."""
    described = 0
    for title, name, text in ([(e.title, e.attribute, e.attribute_description) for e in EXPERIMENTS]
                              + [(HELD.title, HELD.attribute, HELD.attribute_description)]
                              + [(d.title, d.name, d.attribute_description) for d in _oneshot_demos()]):
        described += Attribute.objects.filter(dataset__title=title, name=name, description="").update(description=text)
    now = {e.title: e.description for e in EXPERIMENTS} | {d.title: d.description for d in _oneshot_demos()}
    for title, old in REWORDED.items():
        described += Dataset.objects.filter(title=title, description=old).update(description=now[title])
    return described


def label_counts(attribute: Attribute) -> dict[str, int] | None:
    """Values per label, opened from the sealed mechanism inputs (None if they do not open with this key)."""
    rows = list(Value.objects.filter(attribute=attribute, input_sealed__isnull=False).order_by("id")
                .values_list("owner_id", "input_sealed", "value_key_id"))
    if not rows:
        return {}
    owner_ids, sealed, key_ids = zip(*rows)
    try:
        payload = sealing.open_inputs([bytes(s) for s in sealed], owner_ids, [attribute.id] * len(rows),
                                      domain.payload_bytes(attribute), key_ids)
    except sealing.SealBroken:
        return None
    inputs = domain.from_payload(attribute, payload).reshape(-1)
    labels = domain.labels_of(attribute)
    counts = Counter(int(i) for i in inputs)
    return {label: counts.get(i, 0) for i, label in enumerate(labels)}


def _eps(d: Decimal) -> str:
    """An epsilon as written by people: 0.1, 1.0, 2.5 (at least one decimal, no trailing zeros)."""
    text = f"{d:.6f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def held_summary(held: HeldExperiment) -> list[str]:
    """The summary lines of the owner-held dataset: its values, the labels on the devices (fixed by the seed; the
    service never receives them) and the upload levels the devices reached, read from the chains."""
    attribute = Attribute.objects.filter(dataset__title=held.title, name=held.attribute).first()
    if attribute is None:
        return [f"  {held.title}: missing"]
    values = list(attribute.values.select_related("budget", "owner").order_by("id"))
    held_values = [v for v in values if v.custody == Value.Custody.OWNER]
    owner_held = len(held_values)
    # the values the demo loaded (its owners'): the labels below are theirs; others were contributed since
    since = [v for v in values if v.owner.username != OWNER and not v.owner.username.startswith(held.owner_prefix)]
    since_held = sum(v.custody == Value.Custody.OWNER for v in since)
    chains = store.lengths_and_heads([(v.block_id, v.slot) for v in held_values if v.block_id is not None])
    levels = Counter(from_micro(head) if length else None
                     for length, head in (chains.get((v.block_id, v.slot), (0, 0)) for v in held_values))
    uploaded = ", ".join(f"{levels[level]} up to {_eps(level)}"
                         for level in sorted((k for k in levels if k is not None), reverse=True))
    if levels[None]:
        uploaded += f"{', ' if uploaded else ''}{levels[None]} not yet"
    on_devices = ", ".join(f"{k}: {v}" for k, v in held.counts.items())
    start, step, stop = attribute.grid_start, attribute.grid_step, attribute.grid_stop
    ceilings = sorted({v.budget.ceiling for v in values})
    head = f"  {held.title} / {attribute.name} ({attribute.kind}): {len(values)} values"
    if not since:
        head += f", {owner_held} held by their owners (on the devices, never sent: {on_devices})"
    else:  # the labels are those of the values the demo loaded: say what the others are, so the counts add up
        head += (f": {len(values) - len(since)} loaded by the demo, held by their owners (on the devices, never "
                 f"sent: {on_devices}), and {len(since)} contributed since ({since_held} held by their owners, "
                 f"{len(since) - since_held} by the service)")
    lines = [head,
             f"    epsilon grid {_eps(start)} to {_eps(stop)} step {_eps(step)}; fixed ceiling "
             f"{', '.join(_eps(c) for c in ceilings) or '-'}",
             f"    uploaded by the devices: {uploaded or 'nothing'}"]
    policy = PricePolicy.parse(attribute.price_policy)
    lines.append(f"    price per value: {format_money(policy.price(Decimal('0.5')))} at epsilon 0.5, "
                 f"{format_money(policy.price(Decimal('1')))} at 1.0 (owners get {policy.owner_share:.0%})")
    return lines


def summary(base_url: str = BASE_URL) -> list[str]:
    lines = ["ldpmarket demo data", "", "Datasets:"]
    for experiment in EXPERIMENTS:
        dataset = Dataset.objects.filter(title=experiment.title).first()
        if dataset is None:
            lines.append(f"  {experiment.title}: missing")
            continue
        for attribute in dataset.attributes.order_by("id"):
            values = attribute.values.select_related("budget")
            first = values.order_by("id").first()
            counts = label_counts(attribute)
            total = values.count()
            per_label = ("sealed under another LDP_VALUE_KEY" if counts is None
                         else ", ".join(f"{k}: {v}" for k, v in counts.items()))
            if counts is not None and sum(counts.values()) != total:  # values whose label the service lacks
                held_here = values.filter(custody=Value.Custody.OWNER).count()
                per_label += (f"; and {total - sum(counts.values())} without a label here: {held_here} held by "
                              f"their owners, {total - sum(counts.values()) - held_here} whose raw value was deleted")
            lines.append(f"  {dataset.title} / {attribute.name} ({attribute.kind}): {total} values "
                         f"({per_label})")
            lines.append(f"    epsilon grid {_eps(attribute.grid_start)} to {_eps(attribute.grid_stop)} "
                         f"step {_eps(attribute.grid_step)}")
            policy = PricePolicy.parse(attribute.price_policy)
            lines.append(f"    price per value: {format_money(policy.price(Decimal('0.5')))} at epsilon 0.5, "
                         f"{format_money(policy.price(Decimal('1')))} at 1.0 (owners get {policy.owner_share:.0%})")
            if first is not None:
                b = first.budget
                if b.scheduled:
                    lines.append(f"    schedule: {b.schedule_shape} from {_eps(b.schedule_start)} at "
                                 f"{b.schedule_start_at:%Y-%m-%d %H:%M} UTC to {_eps(b.schedule_cap)} at "
                                 f"{b.schedule_end_at:%Y-%m-%d %H:%M} UTC")
                else:
                    lines.append(f"    fixed ceiling {_eps(b.ceiling)}")
    lines += ["", "Owner-held values (docs/custody.md: each raw value stays on its owner's device, which uploads "
              "only the randomized chain; purchases above a value's upload level leave it out as awaiting_owner):"]
    lines += held_summary(HELD)
    lines += ["", "One-shot mechanisms (each release adds its exact epsilon to the value's loss; surveys with "
              "POST /api/v1/surveys/ on the binary experiment):"]
    for demo in _oneshot_demos():
        attribute = Attribute.objects.filter(dataset__title=demo.title, name=demo.name).first()
        if attribute is None:
            lines.append(f"  {demo.title}: missing")
            continue
        lines.append(f"  {demo.title} / {attribute.name} ({attribute.kind}, {attribute.mechanism}): "
                     f"{attribute.values.count()} values, fixed ceiling {_eps(ONESHOT_CEILING)}")
    buyer = User.objects.filter(username=BUYER).first()
    account = money_selectors.account_of(buyer, money_selectors.KIND_OF_ROLE["buyer"]) if buyer else None
    credit = account.balance if account else None
    owner_titles = list(Value.objects.filter(owner__username=OWNER).order_by("id")
                        .values_list("attribute__dataset__title", flat=True))
    credit_text = "no credit account" if credit is None else f"credit {format_money(credit)}"
    lines += [
        "",
        "Demo users:",
        f"  buyer  {BUYER} / {BUYER_PASSWORD}  (organisation {BUYER_ORGANISATION!r}, {credit_text})",
        f"  owner  {OWNER} / {OWNER_PASSWORD}  (owns {len(owner_titles)} value{'s' if len(owner_titles) != 1 else ''}"
        f"{': one in each of ' + ', '.join(owner_titles) if owner_titles else ''})",
        "",
        "URLs:",
        f"  {base_url}/   the landing page: what the service is, and links to everything below",
        f"  {base_url}/admin/    admin console (staff: create one with `manage.py createsuperuser`)",
        f"  {base_url}/health/   liveness",
        f"  {base_url}/api/v1/   buyer REST API (docs: {base_url}/api/docs/)",
        f"  {base_url}/api/v1/auth/token/   POST username and password for an API token (send it as "
        f"'Authorization: Token <token>'; it expires after {settings.LDP_TOKEN_TTL_HOURS} hours, "
        f"POST /api/v1/auth/logout/ revokes it)",
        f"  {base_url}/api/v1/owner/values/   owner API: your values with both guarantees, owner-held "
        f"contributions and chain uploads (docs/custody.md; the owner SDK: ldpmarket-client owner ...)",
        f"  {base_url}/portal/   owner portal (sign up at {base_url}/portal/signup/)",
        f"  {base_url}/buyer/   buyer portal (sign up at {base_url}/buyer/signup/; an operator approves new buyers: "
        f"manage.py approve_buyer, or the admin's Users page)",
    ]
    return lines


class Command(BaseCommand):
    help = ("Load the paper's two experiments (binary 600/400, categorical 100..500) with their owners, "
            "demo-owner and demo-buyer, a dataset of owner-held values whose chains the owners' devices drew, "
            "and small demos of the one-shot mechanisms. Idempotent.")

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default=BASE_URL,
                            help=f"where the service will answer, for the printed URLs (default {BASE_URL})")

    def handle(self, *args, **options):
        with jobs.coalesced():  # the embedded set-up's checkpoints on commit: one at the end, not one per write
            self._load(options)

    def _load(self, options):
        _, owner = demo_users()
        describe_existing()
        for experiment in EXPERIMENTS:
            created = create_experiment(experiment, owner)
            if options["verbosity"] > 1:
                self.stderr.write(f"{experiment.title}: {'created' if created else 'already present'}")
        for demo in _oneshot_demos():
            created = create_oneshot_demo(demo)
            if options["verbosity"] > 1:
                self.stderr.write(f"{demo.title}: {'created' if created else 'already present'}")
        # last, so the datasets loaded before it keep their ids (the README's examples use them)
        created = create_held_experiment(HELD, owner)
        if options["verbosity"] > 1:
            self.stderr.write(f"{HELD.title}: {'created' if created else 'already present'}")
        # A signed checkpoint over everything loaded, so each demo release already has its receipt
        # (docs/receipts.md); beat makes the later ones.
        while (checkpoint := checkpoint_make()) is not None and checkpoint.appended and blocks_awaiting_checkpoint():
            pass
        self.stdout.write("\n".join(summary(options["base_url"].rstrip("/"))))
