"""``manage.py load_demo``: the paper's two experiments (docs/mechanisms-reference.md#the-demo-experiments,
docs/operations.md), owner-held values (docs/custody.md) and the one-shot demos."""
from __future__ import annotations

import math
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import numpy as np
import pytest
import time_machine
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.utils import timezone

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry, User
from accounts.services import schedules_advance
from market.models import Attribute, ChainBlock, ChainPoint, Dataset, Value
from market.purchases import execution as purchases
from market.purchases import oneshot_specs
from market.values import sealing
from tests.factories import chain_heads, stored_chains

pytestmark = pytest.mark.django_db

BINARY = {"0": 400, "1": 600}
ONESHOT_DEMOS = {"Places visited (utility-optimized LDP)": 200, "Opinions (three states)": 150,
                 "Film ratings (bipartite graph)": 120, "Listening habits (distributions)": 100,
                 "Favourite products (1,000 labels, optimal local hashing)": 3000}
CATEGORICAL = {"1": 100, "2": 200, "3": 300, "4": 400, "5": 500}
HELD = "Device-held experiment"
HELD_LABELS = {"walk": 40, "bike": 50, "car": 70, "transit": 40}


def load() -> str:
    out = StringIO()
    call_command("load_demo", stdout=out)
    return out.getvalue()


def attribute(title: str) -> Attribute:
    return Attribute.objects.get(dataset__title=title)


def raw_counts(attr: Attribute) -> Counter:
    return Counter(sealing.raw_of(v) for v in attr.values.all())


def eps_ns(k: int, eps_alpha: float, eps_beta: float) -> float:
    """Privacy after k noisy samplings, docs/mechanisms-reference.md#rappor-with-gradual-release, Eq. (65)."""
    ea, eb = math.exp(eps_alpha), math.exp(eps_beta) ** k
    return math.log((ea * eb + 1) / (ea + eb))


def snapshot() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in
            (User, Dataset, Attribute, Value, ChainBlock, ChainPoint, BudgetAccount, LedgerEntry, MoneyAccount,
             MoneyEntry)}


def test_the_papers_counts():
    load()
    binary, categorical = attribute("Binary experiment"), attribute("Categorical experiment")
    assert (binary.kind, binary.labels) == ("binary", ["0", "1"])
    assert (categorical.kind, categorical.labels) == ("categorical", ["1", "2", "3", "4", "5"])
    assert binary.values.count() == 1000 and categorical.values.count() == 1500
    # the raw values as their owners entered them, and the sealed mechanism inputs the chains run on
    assert raw_counts(binary) == BINARY
    assert raw_counts(categorical) == CATEGORICAL
    from market.management.commands.load_demo import label_counts

    assert label_counts(binary) == BINARY
    assert label_counts(categorical) == CATEGORICAL


def test_every_value_has_its_own_owner_and_demo_owner_has_one_in_each():
    load()
    demo_owner = User.objects.get(username="demo-owner")
    for title, prefix, n in (("Binary experiment", "demo-b-", 1000), ("Categorical experiment", "demo-c-", 1500),
                             (HELD, "demo-o-", 200)):
        values = Value.objects.filter(attribute__dataset__title=title).select_related("owner")
        owners = [v.owner for v in values]
        assert len({o.id for o in owners}) == n
        assert all(o.role == User.Role.OWNER for o in owners)
        assert sum(o.id == demo_owner.id for o in owners) == 1
        numbered = [o for o in owners if o.id != demo_owner.id]
        assert all(o.username.startswith(prefix) and not o.has_usable_password() for o in numbered)


def test_demo_users_log_in_with_their_roles_and_the_buyer_has_credit():
    load()
    buyer = authenticate(username="demo-buyer", password="demo-buyer-password")
    owner = authenticate(username="demo-owner", password="demo-owner-password")
    assert buyer is not None and owner is not None
    assert (buyer.role, buyer.organisation) == (User.Role.BUYER, "Demo Analytics")
    assert owner.role == User.Role.OWNER
    assert authenticate(username="demo-buyer", password="wrong") is None
    account = MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT)
    assert account.balance == Decimal("1000")
    entries = list(account.entries.all())
    assert [(e.amount, e.balance_after) for e in entries] == [(Decimal("1000"), Decimal("1000"))]
    assert not buyer.values.exists()


def test_budgets_chains_and_ledger_for_every_value():
    before = timezone.now().replace(microsecond=0)
    load()
    binary, categorical = attribute("Binary experiment"), attribute("Categorical experiment")

    # binary: a fixed ceiling of 1.0 covers the paper's path eps_ns(1..10) with eps_alpha = 1, eps_beta = 0.5
    path = [eps_ns(k, 1.0, 0.5) for k in range(1, 11)]
    assert all(a < b for a, b in zip(path, path[1:])) and path[-1] < 1.0
    budgets = BudgetAccount.objects.filter(value__attribute=binary)
    assert budgets.count() == 1000
    assert set(budgets.values_list("ceiling", "chain_loss", "oneshot_loss", "schedule_shape")) == {
        (Decimal("1"), Decimal("0"), Decimal("0"), "")}
    assert float(budgets.first().ceiling) >= max(path)

    # categorical: linear from 0.1 now to 1.0 in 30 days
    budgets = BudgetAccount.objects.filter(value__attribute=categorical)
    assert budgets.count() == 1500
    schedules = set(budgets.values_list("ceiling", "schedule_shape", "schedule_start", "schedule_cap",
                                        "schedule_start_at", "schedule_end_at"))
    assert len(schedules) == 1
    ceiling, shape, start, cap, start_at, end_at = schedules.pop()
    assert (ceiling, shape, start, cap) == (Decimal("0.1"), "linear", Decimal("0.1"), Decimal("1"))
    assert start_at >= before and end_at - start_at == timedelta(days=30)

    # chains: from the grid start up to each ceiling, outputs inside the domain
    grid = np.arange(1, 11) * 100_000
    for attr, points, m in ((binary, grid, 2), (categorical, grid[:1], 5)):
        stored = stored_chains(attr)
        heads = chain_heads(attr.values.all())
        assert len(stored) == len(heads) == attr.values.count()
        for value_id, (eps, out) in stored.items():
            assert np.array_equal(eps, points) and out.shape == (points.size, 1)
            assert heads[value_id] == (Decimal(int(points[-1])) / 1_000_000, points.size)
            assert out.min() >= 0 and out.max() < m

    # one ledger entry per value recording its policy, nothing released
    kinds = Counter(LedgerEntry.objects.values_list("value__attribute__dataset__title", "kind"))
    assert kinds == {("Binary experiment", "ceiling"): 1000, ("Categorical experiment", "schedule"): 1500,
                     **{(title, "ceiling"): n for title, n in ONESHOT_DEMOS.items()},
                     # owner-held: each value's policy and custody, and one upload per device that uploaded
                     (HELD, "ceiling"): 200, (HELD, "owner_custody"): 200, (HELD, "owner_upload"): 191}


def test_idempotent():
    first = load()
    counts = snapshot()
    second = load()
    assert snapshot() == counts
    assert second == first
    assert counts["Value"] == 2700 + sum(ONESHOT_DEMOS.values()) and counts["Dataset"] == 3 + len(ONESHOT_DEMOS)
    for needle in ("Binary experiment", "Categorical experiment", "0: 400, 1: 600",
                   "Device-held experiment / commute (categorical): 200 values, 200 held by their owners",
                   "walk: 40, bike: 50, car: 70, transit: 40", "fixed ceiling 1.0",
                   "uploaded by the devices: 160 up to 1.0, 31 up to 0.5, 9 not yet",
                   "(owns 3 values: one in each of Binary experiment, Categorical experiment, Device-held experiment)",
                   "1: 100, 2: 200, 3: 300, 4: 400, 5: 500", "demo-buyer / demo-buyer-password",
                   "demo-owner / demo-owner-password", "http://127.0.0.1:8000/admin/", "/api/v1/", "/portal/",
                   "/api/v1/auth/token/   POST username and password", "/api/v1/owner/values/   owner API"):
        assert needle in first, needle


def test_existing_users_are_reused_and_left_as_they_are():
    """A previous partial run (users but no dataset) completes without duplicates or password resets."""
    User.objects.create_user("demo-owner", password="changed-by-the-owner", role=User.Role.OWNER)
    User.objects.create_user("demo-b-0007", role=User.Role.OWNER)
    load()
    assert authenticate(username="demo-owner", password="changed-by-the-owner") is not None
    assert User.objects.filter(username__startswith="demo-b-").count() == 999
    assert Value.objects.filter(owner__username="demo-b-0007").count() == 1


def test_the_schedule_grows_and_chains_follow(django_capture_on_commit_callbacks):
    load()
    categorical = attribute("Categorical experiment")
    with time_machine.travel(timezone.now() + timedelta(days=31), tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            raised = schedules_advance()
    assert raised == 1500
    heads = chain_heads(categorical.values.all())
    assert len(heads) == 1500 and {head for head, _ in heads.values()} == {Decimal("1")}
    assert BudgetAccount.objects.filter(value__attribute=categorical, ceiling=Decimal("1")).count() == 1500


def test_the_demo_buyer_can_buy_along_the_papers_path():
    """The binary experiment sells at eps_ns(1) and eps_ns(10) (bridged between grid points), within the credit."""
    from market.purchases.execution import purchase_claim, purchase_execute

    load()
    buyer = User.objects.get(username="demo-buyer")
    binary = attribute("Binary experiment")
    paid = Decimal(0)
    for k in (1, 10):
        e = Decimal(str(math.floor(eps_ns(k, 1.0, 0.5) * 1e6) / 1e6))
        purchase, created = purchase_claim(buyer=buyer, attribute=binary, epsilon=e, cohort=None,
                                           idempotency_key=f"demo-path-{k}")
        purchase = purchase_execute(purchase_id=purchase.id, rng=np.random.default_rng(k))
        assert created and purchase.status == "completed"
        assert (purchase.candidates, purchase.included) == (1000, 1000)
        paid += purchase.price
    assert paid > 0
    credit = MoneyAccount.objects.get(user=buyer, kind=MoneyAccount.Kind.BUYER_CREDIT).balance
    assert credit == Decimal("1000") - paid
    losses = set(BudgetAccount.objects.filter(value__attribute=binary).values_list("chain_loss", flat=True))
    assert len(losses) == 1 and Decimal("0.98") < losses.pop() < Decimal("1")


def test_the_one_shot_demos_sell_and_the_binary_experiment_takes_surveys():
    """Each one-shot demo attribute is configured, has no chains, and sells through the one-shot path; a survey
    of the binary experiment charges its exact epsilon; the audit passes afterwards."""
    from audit.budget_audit import audit_budgets
    from market.purchases import oneshot

    text = load()
    buyer = User.objects.get(username="demo-buyer")
    requests = {"Places visited (utility-optimized LDP)": {"epsilon": "1"},
                "Opinions (three states)": {"eps1": "1", "eps2": "1"},
                "Film ratings (bipartite graph)": {"eps1": "1", "eps2": "2"},
                "Listening habits (distributions)": {"epsilon": "2"},
                "Favourite products (1,000 labels, optimal local hashing)": {"epsilon": "2"}}
    for title, n in ONESHOT_DEMOS.items():
        assert title in text
        attr = Attribute.objects.get(dataset__title=title)
        assert attr.is_oneshot and attr.values.count() == n
        assert not attr.values.filter(block__isnull=False).exists()
        assert not ChainBlock.objects.filter(attribute=attr).exists()
        assert not ChainPoint.objects.filter(attribute=attr).exists()
        spec = oneshot_specs.parse_spec(attr, **requests[title])
        purchase, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attr, spec=spec, cohort=None,
                                            idempotency_key=f"demo-{attr.id}")
        purchase = purchases.purchase_execute(purchase_id=purchase.id, rng=np.random.default_rng(attr.id))
        assert (purchase.status, purchase.included) == ("completed", n)
    spec = oneshot_specs.parse_spec(attribute("Binary experiment"), epsilon="0.5", mechanism="warner")
    survey, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attribute("Binary experiment"), spec=spec, cohort=None,
                                      idempotency_key="demo-survey")
    survey = purchases.purchase_execute(purchase_id=survey.id, rng=np.random.default_rng(0))
    assert survey.included == 1000 and abs(survey.result["estimate"] - 0.6) < 4 * survey.result["standard_error"]
    assert set(BudgetAccount.objects.filter(value__attribute__dataset__title="Binary experiment")
               .values_list("oneshot_loss", flat=True)) == {Decimal("0.5")}
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_every_demo_attribute_says_in_plain_words_what_it_is():
    """Issue 13: the demo attributes had no description; each now has its question, without paper jargon, and a
    database loaded before is given them by the next ``load_demo``."""
    load()
    jargon = ("eps", "uRR", "RR3", "LPP", "RAPPOR", "paper", "⊥")
    for attr in Attribute.objects.all():
        assert attr.description.strip(), attr.name
        assert not any(word in attr.description for word in jargon), (attr.name, attr.description)
    Attribute.objects.filter(name="answer").update(description="")
    load()
    assert "yes/no" in Attribute.objects.get(name="answer").description


def test_the_readme_finds_the_survey_attribute_by_name_and_says_what_the_survey_uses_up():
    """Issue 13: the README's survey step used a fixed attribute id; it now looks the binary attribute up by its
    name in the catalog, and that name is the demo's binary attribute."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    step = readme[readme.index("**9. Surveys.**"):readme.index("## For auditors")]
    assert '"attribute": 1' not in step and '"attribute\\": $ANSWER' in step
    name = step.split('a["name"] == "')[1].split('"')[0]
    load()
    attr = Attribute.objects.get(name=name)
    assert attr.kind == Attribute.Kind.BINARY and attr.dataset.title == "Binary experiment"
    assert "What it uses up" in step and "1.0" in step


def test_the_olh_demo_sells_1000_labels_and_its_estimates_recover_the_popular_products():
    """Issue 14: the demo dataset of 1,000 labels is sold with OLH; the estimates of the ten most popular products
    are each within 4 standard errors of their true shares (fixed seed), and every report is a seed and a bucket."""
    from market.management.commands.load_demo import label_counts
    from market.purchases import estimates, oneshot

    load()
    attr = Attribute.objects.get(dataset__title="Favourite products (1,000 labels, optimal local hashing)")
    assert (attr.mechanism, len(attr.labels), attr.values.count()) == ("olh", 1000, 3000)
    truth = label_counts(attr)
    spec = oneshot_specs.parse_spec(attr, epsilon="2")
    buyer = User.objects.get(username="demo-buyer")
    purchase, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attr, spec=spec, cohort=None, idempotency_key="olh")
    purchase = purchases.purchase_execute(purchase_id=purchase.id, rng=np.random.default_rng(7))
    assert (purchase.status, purchase.included, purchase.charged_epsilon) == ("completed", 3000, Decimal("2"))
    rows = {f["label"]: f for f in estimates.purchase_estimate(purchase)["frequencies"]}
    assert len(rows) == 1000
    for label in sorted(truth, key=truth.get, reverse=True)[:10]:
        share = truth[label] / 3000
        assert abs(rows[label]["estimate"] - share) < 4 * rows[label]["standard_error"], (label, rows[label], share)


def test_the_device_held_experiment_is_owner_held_with_chains_drawn_by_the_sdk_up_to_each_upload_level():
    """Issue 16: 200 owner-held values contributed without their raw values; each device drew its chain with the
    SDK's sampler and uploaded it through ``value_upload_chain`` (most to 1.0, some to 0.5, a few not at all);
    the service stores no raw value and no input; purchases above 0.5 leave the 0.5 devices out as awaiting
    their owner; the budget audit passes."""
    from audit.budget_audit import audit_budgets
    from market.management.commands.load_demo import HELD as held
    from market.management.commands.load_demo import held_contents, label_counts
    from market.purchases.execution import purchase_claim, purchase_execute

    load()
    attr = attribute(HELD)
    assert (attr.kind, attr.labels, attr.is_oneshot, attr.supports_owner_custody) == (
        "categorical", list(HELD_LABELS), False, True)
    assert (attr.grid_start, attr.grid_step, attr.grid_stop) == (Decimal("0.1"), Decimal("0.1"), Decimal("2"))
    values = list(attr.values.select_related("owner", "budget").order_by("id"))
    assert len(values) == 200 and {v.custody for v in values} == {Value.Custody.OWNER}
    assert not attr.values.filter(raw_sealed__isnull=False).exists()
    assert not attr.values.filter(input_sealed__isnull=False).exists()
    assert label_counts(attr) == {}  # nothing to open: the labels stayed on the devices
    assert {v.budget.ceiling for v in values} == {Decimal("1")}
    assert {(v.budget.chain_loss, v.budget.oneshot_loss) for v in values} == {(Decimal(0), Decimal(0))}

    # each chain: the grid points from 0.1 up to its device's upload level, outputs label indices
    raws, levels = held_contents(held)
    assert Counter(raws) == HELD_LABELS and Counter(levels) == {Decimal("1.0"): 160, Decimal("0.5"): 31, None: 9}
    index = {"demo-owner": 0, **{f"demo-o-{i:04d}": i for i in range(1, 200)}}
    stored = stored_chains(attr)
    heads = chain_heads(values)
    uploads = dict(LedgerEntry.objects.filter(value__attribute=attr, kind="owner_upload")
                   .values_list("value_id", "epsilon"))
    kept_at_1 = 0
    for v in values:
        level = levels[index[v.owner.username]]
        if level is None:
            assert v.id not in stored or stored[v.id][0].size == 0
            assert v.id not in uploads
            continue
        eps, out = stored[v.id]
        points = np.arange(1, int(level * 10) + 1) * 100_000
        assert np.array_equal(eps, points) and out.shape == (points.size, 1), v.owner.username
        assert out.min() >= 0 and out.max() < 4
        assert heads[v.id] == (level, points.size) and uploads[v.id] == level
        if level == Decimal("1.0"):
            kept_at_1 += int(out[-1, 0]) == attr.labels.index(raws[index[v.owner.username]])
    # at epsilon 1 each output is a 1-k-RR of its label over 4: kept with e / (e + 3) = 0.475 (160 values)
    p = math.e / (math.e + 3)
    assert abs(kept_at_1 / 160 - p) < 4 * math.sqrt(p * (1 - p) / 160)

    # demo-owner's value: owner-held, uploaded to 0.5
    demo = next(v for v in values if v.owner.username == "demo-owner")
    assert demo.custody == Value.Custody.OWNER and heads[demo.id] == (Decimal("0.5"), 5)

    # sales follow the upload levels: at 0.5 every uploaded chain, above it only the devices at 1.0
    buyer = User.objects.get(username="demo-buyer")
    for e, included, awaiting in (("0.5", 191, 9), ("0.7", 160, 40)):
        purchase, _ = purchase_claim(buyer=buyer, attribute=attr, epsilon=Decimal(e), cohort=None,
                                     idempotency_key=f"held-{e}")
        purchase = purchase_execute(purchase_id=purchase.id, rng=np.random.default_rng(0))
        assert (purchase.status, purchase.included, purchase.excluded_awaiting_owner) == (
            "completed", included, awaiting), e
    # the service never grows an owner-held chain past its upload level
    assert {head for head, _ in chain_heads(attr.values.all()).values()} == {Decimal(0), Decimal("0.5"), Decimal("1")}
    assert chain_heads([demo])[demo.id][0] == Decimal("0.5")
    report = audit_budgets()
    assert report.ok, report.as_text()
