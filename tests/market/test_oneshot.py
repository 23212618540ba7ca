"""One-shot mechanisms and surveys through the services (docs/budget-rules.md#budgets-and-ceilings,
issue 7 items 2, 3, 5).

Values without chains; raw values validated per kind; PUM tags sealed; the exact charged epsilon (rounded up);
additive composition of one-shot releases, and their combination with chain losses against the ceiling;
inclusion rules; money; the ledger (with guarantees); idempotency; the IC deck.
"""
from __future__ import annotations

import json
import math
from decimal import Decimal as D

import numpy as np
import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.ledger import hashchain as ledger
from accounts.models import BudgetAccount, LedgerEntry, LedgerEvent, LedgerRelease, MoneyAccount
from accounts.money.services import earnings_settle
from accounts.services import BudgetError, budget_set_paused
from audit.budget_audit import audit_budgets
from ldpmarket import problems
from ldpmarket.problems import IdempotencyConflict, InsufficientCredit
from market.chains.extension import chains_extend
from market.models import Attribute, ChainBlock, ChainPoint, Purchase, PurchaseChunk, Value
from market.purchases import execution, oneshot, oneshot_specs, releases
from market.purchases.eligibility import held_epsilons
from market.purchases.execution import purchase_claim, purchase_execute
from market.purchases.pricing import PricePolicy
from market.selectors import open_chunk
from market.values import inputs as domain
from market.values import sealing
from market.values.inputs import InvalidValue
from market.values.services import value_delete_raw, value_set_pum_tag, values_create_many
from mechanisms import exactness_oneshot, registry, release_stats, rr3, surveys
from tests.factories import (
    BinaryAttributeFactory,
    DatasetFactory,
    DistributionAttributeFactory,
    GraphAttributeFactory,
    OwnerFactory,
    TernaryAttributeFactory,
    UrapAttributeFactory,
    UrrAttributeFactory,
    make_owners,
)
from tests.market.oneshot_helpers import POLICY, funded_buyer, run, values

pytestmark = pytest.mark.django_db

FACTORIES = {
    "urr": (UrrAttributeFactory, ["a", "c", "e"]),
    "urap": (UrapAttributeFactory, ["b", "d"]),
    "rr3": (TernaryAttributeFactory, ["none", "plus", 2]),
    "lpp": (GraphAttributeFactory, [{"0": 0.5, "3": -1}, [None, 1, None, None], '{"2": 0.25}', {}]),
    "private_sample": (DistributionAttributeFactory, [{"x": 0.5, "y": 0.5}, [0.1, 0.2, 0.7], '[1, 0, 0]']),
}


# ----------------------------------------------------------------------------------------------------- values

@pytest.mark.parametrize("mechanism", list(FACTORIES))
def test_oneshot_values_have_no_chain_and_keep_their_sealed_raw_value_and_input(mechanism):
    factory, raws = FACTORIES[mechanism]
    attribute = factory(price_policy=POLICY)
    created = values(attribute, raws, ceiling="3")
    assert not ChainBlock.objects.filter(attribute=attribute).exists()
    assert not ChainPoint.objects.filter(attribute=attribute).exists()
    assert not Value.objects.filter(attribute=attribute).exclude(block=None, slot=None).exists()
    assert BudgetAccount.objects.filter(value__attribute=attribute).count() == len(raws)
    assert LedgerEntry.objects.filter(value__attribute=attribute, kind="ceiling").count() == len(raws)
    rows = list(Value.objects.filter(attribute=attribute).order_by("id"))
    for v, raw in zip(rows, raws):
        assert v.raw_sealed is not None and v.input_sealed is not None
        text = sealing.raw_of(v)
        assert text == (raw if isinstance(raw, str) else domain.raw_text(attribute, raw))
    payload = sealing.open_inputs([bytes(v.input_sealed) for v in rows], [v.owner_id for v in rows],
                                  [attribute.id] * len(rows), domain.payload_bytes(attribute))
    inputs = domain.oneshot_inputs(attribute, payload)
    if mechanism == "lpp":
        w = inputs
        assert w[0, 0] == 0.5 and w[0, 3] == -1 and np.isnan(w[0, [1, 2]]).all()
        assert w[1, 1] == 1 and np.isnan(w[3]).all() and w[2, 2] == 0.25
    elif mechanism == "private_sample":
        np.testing.assert_allclose(inputs, [[0.5, 0.5, 0], [0.1, 0.2, 0.7], [1, 0, 0]])
    elif mechanism == "rr3":
        assert inputs.tolist() == [0, 1, 2]
    else:
        assert inputs.tolist() == [attribute.labels.index(r) for r in raws]
        assert domain.pum_tags_of(payload).tolist() == [-1] * len(raws)
    # raising ceilings never grows chains for them: extension has nothing to do
    BudgetAccount.objects.filter(value__attribute=attribute).update(ceiling=D("9"))
    assert chains_extend(attribute_id=attribute.id) == 0
    assert not ChainBlock.objects.filter(attribute=attribute).exists()
    assert not ChainPoint.objects.filter(attribute=attribute).exists()
    assert not Value.objects.filter(attribute=attribute).exclude(block=None, slot=None).exists()
    assert created[0].id == rows[0].id


@pytest.mark.parametrize("factory, raw, message", [
    (UrrAttributeFactory, "z", "not one of the choices"),
    (TernaryAttributeFactory, "maybe", "not one of the three states"),
    (TernaryAttributeFactory, 3, "not one of the three states"),
    (TernaryAttributeFactory, True, "not one of the three states"),
    (GraphAttributeFactory, {"0": 1.5}, r"edge weights must lie in \[-1, 1\]"),
    (GraphAttributeFactory, {"9": 0.5}, "not one of the items"),
    (GraphAttributeFactory, {"0": "heavy"}, "must be a number"),
    (GraphAttributeFactory, {"0": float("nan")}, "finite"),
    (GraphAttributeFactory, [0.5, 0.5], "one entry for each of the 4 items"),
    (GraphAttributeFactory, "{not json", "must be JSON"),
    (GraphAttributeFactory, 7, "must be an object"),
    (DistributionAttributeFactory, {"x": 0.5}, "must sum to 1"),
    (DistributionAttributeFactory, [0.5, 0.6, -0.1], "must not be negative"),
    (DistributionAttributeFactory, {"w": 1}, "not one of the labels"),
    (DistributionAttributeFactory, [1, 0], "one entry for each of the 3 labels"),
    (DistributionAttributeFactory, {"x": True}, "must be a number"),
])
def test_invalid_raw_values_are_refused_clearly_and_nothing_is_written(factory, raw, message):
    attribute = factory()
    counts = [M.objects.count() for M in (Value, BudgetAccount, LedgerEntry)]
    with pytest.raises(InvalidValue, match=message):
        values_create_many(attribute=attribute, owners=make_owners(1, f"bad{attribute.id}"), raws=[raw],
                           ceiling="1")
    assert [M.objects.count() for M in (Value, BudgetAccount, LedgerEntry)] == counts


def _attribute(**fields):
    base = dict(dataset=DatasetFactory(), name=f"a{Attribute.objects.count()}", kind="categorical",
                labels=["x", "y", "z"])
    return Attribute.objects.create(**{**base, **fields})


@pytest.mark.parametrize("fields", [
    dict(mechanism="urr"),                                        # no sensitive set
    dict(mechanism="urap", sensitive=[]),
    dict(mechanism="gradual_rr", sensitive=["x"]),                # sensitive set only for uRR/uRAP
    dict(mechanism="gradual_rr", pum_tags=["home"]),
    dict(mechanism="warner"),                                     # not an attribute mechanism
    dict(mechanism="rr3"),                                        # RR3 needs a ternary attribute
    dict(kind="ternary"),                                         # ... and a ternary attribute needs RR3
    dict(kind="graph", mechanism="lpp"),                          # num_items
    dict(kind="graph", mechanism="lpp", num_items=0),
    dict(kind="graph", mechanism="lpp", num_items=1001),
    dict(kind="categorical", num_items=3),
    dict(kind="distribution", mechanism="private_sample"),        # prior
    dict(kind="categorical", prior=[0.5, 0.5]),
    dict(kind="binary", mechanism="urr", sensitive=["x"]),
], ids=repr)
def test_the_database_refuses_inconsistent_oneshot_attributes(fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        _attribute(**fields)


@pytest.mark.parametrize("fields, message", [
    (dict(mechanism="urr", sensitive=["w"]), "not one of the labels"),
    (dict(mechanism="urr", sensitive=["x", "x"]), "must not repeat"),
    (dict(mechanism="urr", sensitive=["x"], pum_tags=["", "home"]), "non-empty texts"),
    (dict(mechanism="urr", sensitive=["x"], labels=["x"]), "between 2 and"),
    (dict(kind="ternary", mechanism="rr3", labels=["a", "b"]), "between 3 and 3"),
    (dict(kind="graph", mechanism="lpp", num_items=2, labels=["only one"]), "between 2 and 2"),
    (dict(kind="distribution", mechanism="private_sample", prior=[0.5, 0.6, -0.1]), "positive and sum to 1"),
    (dict(kind="distribution", mechanism="private_sample", prior=[0.5, 0.5]), "one probability per label"),
    (dict(kind="distribution", mechanism="private_sample", prior=["a", 1, 0]), "numbers"),
])
def test_misconfigured_attributes_take_no_values_and_are_explained(fields, message):
    from market.admin import AttributeForm

    attribute = _attribute(**fields)
    unbound = AttributeForm(instance=attribute)  # the admin's change page, submitted as it is shown
    data = {name: unbound[name].field.prepare_value(unbound[name].initial) for name in unbound.fields}
    form = AttributeForm(data={k: v for k, v in data.items() if v is not None}, instance=attribute)
    form.is_valid()
    assert message in " ".join(form.non_field_errors())
    with pytest.raises(InvalidValue, match=message):
        values_create_many(attribute=attribute, owners=make_owners(1, f"mis{attribute.id}"), raws=["x"],
                           ceiling="1")
    with pytest.raises(problems.ParameterError, match=message):
        oneshot_specs.parse_spec(attribute, epsilon="1", eps1="1", eps2="1")


# -------------------------------------------------------------------------------------------------------- PUM

def test_pum_tags_are_sealed_owner_only_and_visible_to_the_owner_alone():
    from market.values.owner_rows import pum_tag

    attribute = UrrAttributeFactory(price_policy=POLICY)
    v, w = values(attribute, ["c", "d"])
    before = bytes(Value.objects.get(id=v.id).input_sealed)
    value_set_pum_tag(value_id=v.id, tag="home", owner=v.owner)
    sealed = bytes(Value.objects.get(id=v.id).input_sealed)
    assert sealed != before and len(sealed) == len(before)
    assert pum_tag(v.owner, v.id) == "home" and pum_tag(w.owner, w.id) is None
    # the server stores ciphertext only: the tag's name is in no column of the value
    row = Value.objects.filter(id=v.id).values().get()
    assert b"home" not in b"".join(bytes(x) if isinstance(x, (bytes, memoryview)) else str(x).encode()
                                   for x in row.values())
    # the sealed tag is bound to its row: moved to another value it does not open
    Value.objects.filter(id=w.id).update(input_sealed=sealed)
    with pytest.raises(sealing.SealBroken):
        sealing.open_inputs([sealed], [w.owner_id], [attribute.id], domain.payload_bytes(attribute))
    with pytest.raises(BudgetError, match="No such value"):
        value_set_pum_tag(value_id=v.id, tag="work", owner=w.owner)
    with pytest.raises(BudgetError, match="not one of this attribute's tags"):
        value_set_pum_tag(value_id=v.id, tag="school")
    value_set_pum_tag(value_id=v.id, tag=None)
    assert pum_tag(v.owner, v.id) is None
    ternary = values(TernaryAttributeFactory(), ["plus"])[0]
    with pytest.raises(BudgetError, match="Only values of uRR and uRAP"):
        value_set_pum_tag(value_id=ternary.id, tag="home")
    value_delete_raw(value_id=v.id)
    with pytest.raises(BudgetError, match="deleted"):
        value_set_pum_tag(value_id=v.id, tag="home")
    assert not LedgerEntry.objects.filter(value=v, kind__in=["chain_release", "oneshot_release"]).exists()


@pytest.mark.parametrize("mechanism", ["urr", "urap"])
def test_a_tagged_value_is_released_as_its_bot_never_as_itself(mechanism):
    """PUM (docs/mechanisms-reference.md#utility-optimized-ldp-urr-urap-pum): a tagged non-sensitive value is replaced
    by the bot, so its own label is never output -- an event of probability exactly 0, whatever the seed; untagged
    non-sensitive values are (almost) kept."""
    factory = UrrAttributeFactory if mechanism == "urr" else UrapAttributeFactory
    attribute = factory(price_policy=POLICY)
    vs = values(attribute, ["c"] * 200 + ["d"] * 200, ceiling="30")
    for v in vs[:200]:
        value_set_pum_tag(value_id=v.id, tag="work")
    purchase = run(funded_buyer(), attribute, epsilon="20", rng=np.random.default_rng(5))
    assert purchase.included == 400 and purchase.guarantee == "uldp"
    ids, out = _outputs(purchase)
    tagged = np.isin(ids, [v.id for v in vs[:200]])
    c, d, bot_work = 2, 3, 6  # labels a..e, then bots home (5) and work (6)
    if mechanism == "urr":
        assert out.shape[1] == 1
        assert not (out[tagged, 0] == c).any() and (out[tagged, 0] == bot_work).mean() > 0.99
        assert (out[~tagged, 0] == d).mean() > 0.99
    else:
        assert out.shape[1] == 7
        assert not out[tagged, c].any() and out[tagged, bot_work].mean() > 0.99
        assert out[~tagged, d].mean() > 0.99 and not out[:, [c, d]].all(axis=1).any()


def _outputs(purchase):
    from market.selectors import all_outputs

    return all_outputs(purchase)


# --------------------------------------------------------------------------------------------------- charging

@pytest.mark.parametrize("eps1, eps2, exact", [("1", "1", "1.379886"), ("1", "2", "2.000000"),
                                               ("0.5", "0.25", None), ("3", "0.1", None), ("0.01", "5", None),
                                               ("15", "15", None), ("30", "29.5", None)])  # 30: the limit
def test_rr3_ddagger_and_lpp_charge_their_exact_level_rounded_up(eps1, eps2, exact):
    """Never eps1 + eps2; the level of the RR3‡ matrix itself, rounded up at 6 places
    (docs/mechanisms-reference.md#rr3-and-the-graph-protocol-lpp: (1, 1) is 1.37988549..., so 1.379886; (1, 2) is 2.0,
    not the paper's 1.5662)."""
    ternary, graph = TernaryAttributeFactory(), GraphAttributeFactory()
    a = oneshot_specs.parse_spec(ternary, family="rr3_ddagger", eps1=eps1, eps2=eps2)
    b = oneshot_specs.parse_spec(graph, eps1=eps1, eps2=eps2)
    assert a.charged == b.charged and a.purchase_epsilon == a.charged and a.epsilon is None
    level = rr3.lpp_epsilon(float(eps1), float(eps2))
    if float(eps1) < 30:  # the float matrix saturates beyond
        keep = lambda e: 1 / (1 + math.exp(-float(e)))  # noqa: E731
        assert abs(rr3.ldp_epsilon(rr3.rr3_ddagger(keep(eps1), keep(eps2))) - level) < 1e-9
    # what is sampled (the exact integer cells) realises at most the charge, exactly
    assert exactness_oneshot.level_at_most(exactness_oneshot.lpp_level(D(eps1), D(eps2)), a.charged)
    assert float(a.charged) >= level - 1e-12 and float(a.charged) - level < 1e-6 + 1e-12
    assert a.charged < D(eps1) + D(eps2)
    if exact:
        assert a.charged == D(exact)


def test_ewrr3_is_charged_exactly_epsilon():
    spec = oneshot_specs.parse_spec(TernaryAttributeFactory(), epsilon="0.7")
    assert spec.charged == D("0.7") and spec.parameters == {"family": "ewrr3"}
    assert abs(rr3.ldp_epsilon(registry.rr3_matrix(spec.charged, spec.parameters)) - 0.7) < 1e-12


def test_an_lpp_purchase_charges_the_rounded_up_level_everywhere():
    attribute = GraphAttributeFactory(price_policy=POLICY)
    values(attribute, [{"0": 0.5}, {"1": -1}, {}], ceiling="3")
    purchase = run(funded_buyer(), attribute, eps1="1", eps2="1", rng=np.random.default_rng(1))
    assert purchase.charged_epsilon == purchase.epsilon == D("1.379886") and purchase.included == 3
    assert set(LedgerEntry.objects.filter(purchase=purchase).values_list("epsilon", "guarantee")) == {
        (D("1.379886"), "ldp")}
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("oneshot_loss", "chain_loss")) == {
        (D("1.379886"), D("0"))}
    assert purchase.price == PricePolicy.parse(POLICY).price(D("1.379886")) * 3


def test_oneshot_releases_compose_additively():
    attribute = UrrAttributeFactory(price_policy=POLICY)
    values(attribute, ["a", "c", "e"] * 4, ceiling="1.2")
    buyer = funded_buyer()
    for k in range(2):
        p = run(buyer, attribute, epsilon="0.5", rng=np.random.default_rng(k))
        assert (p.included, p.excluded_ceiling, p.excluded_budget) == (12, 0, 0)
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("oneshot_loss", flat=True)) == {
        D("1.0")}
    refused = run(buyer, attribute, epsilon="0.5")
    # the ceiling 1.2 is not below 0.5: what is left of it (0.2) is
    assert (refused.included, refused.excluded_ceiling, refused.excluded_budget, refused.price) == (0, 0, 12, 0)
    last = run(buyer, attribute, epsilon="0.2", rng=np.random.default_rng(9))
    assert last.included == 12
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("oneshot_loss", flat=True)) == {
        D("1.2")}
    per_value = list(LedgerEntry.objects.filter(value__attribute=attribute, kind="oneshot_release")
                     .order_by("value_id", "id").values_list("value_id", "oneshot_loss_before", "oneshot_loss_after"))
    assert len(per_value) == 36
    assert {(b, a) for _, b, a in per_value} == {(D("0"), D("0.5")), (D("0.5"), D("1.0")), (D("1.0"), D("1.2"))}
    assert audit_budgets().ok


def test_chain_and_oneshot_losses_combine_against_the_ceiling():
    """A binary (chain) attribute also takes surveys: loss = chain_loss + oneshot_loss <= ceiling throughout."""
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes", "no"] * 10, ceiling="1")
    buyer = funded_buyer()
    chain, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon="0.6", cohort=None, idempotency_key="c1")
    assert purchase_execute(purchase_id=chain.id).included == 20
    with pytest.raises(problems.TooFewRespondents):  # 0.6 + 0.5 > 1: nobody can answer
        run(buyer, attribute, mechanism="warner", epsilon="0.5")
    survey = run(buyer, attribute, mechanism="warner", epsilon="0.4", rng=np.random.default_rng(0))
    assert survey.included == 20 and survey.charged_epsilon == D("0.4")
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("chain_loss", "oneshot_loss")) == {
        (D("0.6"), D("0.4"))}
    higher, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon="0.7", cohort=None, idempotency_key="c2")
    higher = purchase_execute(purchase_id=higher.id)
    # max(0.6, 0.7) + 0.4 > 1, but the ceiling 1 is not below 0.7: a remaining-budget refusal
    assert (higher.included, higher.excluded_ceiling, higher.excluded_budget) == (0, 0, 20)
    again, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon="0.6", cohort=None, idempotency_key="c3")
    assert purchase_execute(purchase_id=again.id).included == 20  # at the chain's loss: no new privacy spent
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_inclusion_rules_pause_withdrawal_and_deleted_raw_values():
    attribute = TernaryAttributeFactory(price_policy=POLICY)
    vs = values(attribute, ["none", "plus", "minus"] * 3, ceiling="2")
    budget_set_paused(value_id=vs[0].id, paused=True)
    Value.objects.filter(id=vs[1].id).update(withdrawn_at=timezone.now())
    value_delete_raw(value_id=vs[2].id)
    BudgetAccount.objects.filter(value=vs[3]).update(ceiling=D("0.5"))
    p = run(funded_buyer(), attribute, epsilon="1", rng=np.random.default_rng(2))
    assert (p.candidates, p.included, p.excluded_paused, p.excluded_withdrawn, p.excluded_no_raw,
            p.excluded_ceiling) == (9, 5, 1, 1, 1, 1)
    released = set(LedgerEntry.objects.filter(purchase=p).values_list("value_id", flat=True))
    assert released == {v.id for v in vs[4:]}
    assert p.guarantee == "ldp"


def test_money_and_ledger_of_a_oneshot_purchase():
    attribute = DistributionAttributeFactory(price_policy=POLICY)
    vs = values(attribute, [[0.2, 0.3, 0.5]] * 6, ceiling="2")
    buyer = funded_buyer("10")
    p = run(buyer, attribute, epsilon="1.5", rng=np.random.default_rng(3))
    policy = PricePolicy.parse(POLICY)
    unit = policy.price(D("1.5"))
    assert p.price == unit * 6 and p.charged_epsilon == D("1.5") and p.guarantee == "ldp"
    assert MoneyAccount.objects.get(user=buyer, kind="buyer_credit").balance == D("10") - p.price
    share = (unit * policy.owner_share).quantize(D("0.0001"), rounding="ROUND_FLOOR")
    # the owners' shares wait in the attribute's pending account, each recorded on its value's ledger entry ...
    pending = MoneyAccount.objects.get(kind="owners_pending", shard=attribute.id)
    assert pending.balance == 6 * share
    assert [e.earning for e in LedgerEntry.objects.filter(purchase=p)] == [share] * 6
    assert not MoneyAccount.objects.filter(kind="owner_earnings", balance__gt=0).exists()
    assert MoneyAccount.objects.get(kind="platform").balance == p.price - 6 * share
    # ... until they are settled (the task enqueued on the purchase's commit): each owner is credited their share
    settlement = earnings_settle(shard=attribute.id)
    assert (settlement.amount, settlement.owners) == (6 * share, 6)
    for v in vs:
        assert MoneyAccount.objects.get(user=v.owner, kind="owner_earnings").balance == share
    assert MoneyAccount.objects.get(id=pending.id).balance == 0
    assert not held_epsilons(buyer.id, attribute, np.array([v.id for v in vs])).any()  # one-shot: no upgrade credit
    entries = LedgerEntry.objects.filter(purchase=p)
    assert entries.count() == 6 and {e.kind for e in entries} == {"oneshot_release"}
    for e in entries:
        assert (e.epsilon, e.oneshot_loss_before, e.oneshot_loss_after, e.chain_loss_after, e.ceiling) == (
            D("1.5"), D("0"), D("1.5"), D("0"), D("2"))
    assert PurchaseChunk.objects.filter(purchase=p).count() == 1
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_a_buyer_short_of_credit_gets_nothing_and_is_charged_nothing():
    attribute = UrrAttributeFactory(price_policy=POLICY)
    values(attribute, ["a"] * 50, ceiling="2")
    buyer = funded_buyer("0.01")
    spec = oneshot_specs.parse_spec(attribute, epsilon="1")
    purchase, _ = oneshot.oneshot_claim(buyer=buyer, attribute=attribute, spec=spec, cohort=None, idempotency_key="k")
    with pytest.raises(InsufficientCredit):
        execution.purchase_execute(purchase_id=purchase.id)
    assert not LedgerEntry.objects.filter(kind="oneshot_release").exists()
    assert set(BudgetAccount.objects.values_list("oneshot_loss", flat=True)) == {D("0")}
    assert not PurchaseChunk.objects.exists() and Purchase.objects.get(id=purchase.id).status == "pending"


def test_claims_are_idempotent_and_a_completed_purchase_is_returned_as_it_is():
    attribute = GraphAttributeFactory(price_policy=POLICY)
    values(attribute, [{"0": 1}] * 3, ceiling="5")
    buyer = funded_buyer()
    spec = oneshot_specs.parse_spec(attribute, eps1="1", eps2="1")
    first, created = oneshot.oneshot_claim(buyer=buyer, attribute=attribute, spec=spec, cohort=None,
                                           idempotency_key="same")
    again, created_again = oneshot.oneshot_claim(buyer=buyer, attribute=attribute, spec=spec, cohort=None,
                                                 idempotency_key="same")
    assert created and not created_again and first.id == again.id
    with pytest.raises(IdempotencyConflict):
        oneshot.oneshot_claim(buyer=buyer, attribute=attribute,
                              spec=oneshot_specs.parse_spec(attribute, eps1="1", eps2="2"),
                              cohort=None, idempotency_key="same")
    done = execution.purchase_execute(purchase_id=first.id, rng=np.random.default_rng(0))
    entries = LedgerEntry.objects.count()
    assert execution.purchase_execute(purchase_id=first.id).completed_at == done.completed_at
    assert LedgerEntry.objects.count() == entries
    assert set(BudgetAccount.objects.values_list("oneshot_loss", flat=True)) == {D("1.379886")}
    with pytest.raises(IdempotencyConflict):  # a chain purchase's claim with the same key
        purchase_claim(buyer=buyer, attribute=BinaryAttributeFactory(), epsilon="1", cohort=None,
                       idempotency_key="same")


# --------------------------------------------------------------------------------------------------- surveys

@pytest.mark.parametrize("mechanism, extra", [("warner", {}), ("simmons", {"pi_b": "0.3"}),
                                              ("christofides", {"p2": "0.1"})])
def test_ldp_surveys_charge_epsilon_and_store_only_the_aggregate(mechanism, extra):
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes"] * 30 + ["no"] * 70, ceiling="2")
    p = run(funded_buyer(), attribute, mechanism=mechanism, epsilon="0.8", rng=np.random.default_rng(4), **extra)
    assert (p.mechanism, p.guarantee, p.charged_epsilon, p.included) == (mechanism, "ldp", D("0.8"), 100)
    assert not PurchaseChunk.objects.filter(purchase=p).exists()
    r = p.result
    assert r["n"] == 100 and r["guarantee"] == "ldp" and r["epsilon"] == "0.800000"
    assert math.isclose(r["standard_error"], math.sqrt(r["variance"]))
    assert not any(isinstance(x, list) for x in r.values())
    assert set(LedgerEntry.objects.filter(purchase=p).values_list("kind", "epsilon", "guarantee")) == {
        ("oneshot_release", D("0.8"), "ldp")}


def test_improved_christofides_charges_its_deck_and_records_the_distinct_guarantee():
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes"] * 37 + ["no"] * 63, ceiling="2")
    p = run(funded_buyer(), attribute, mechanism="improved_christofides", epsilon="1", p2="0.1",
            rng=np.random.default_rng(6))
    counts = surveys.ic_deck_counts(100, 1.0, 0.1)
    assert p.parameters == {"p2": "0.100000", "deck": counts.tolist()}
    level = math.log(counts[2] / counts[0])
    assert p.charged_epsilon == oneshot_specs.ceil6(D(repr(level))) == D("0.955512") and p.charged_epsilon <= D("1")
    assert p.guarantee == "per_report_non_collusion" and p.epsilon == D("1")
    assert p.result["guarantee_label"] == "per-report eps, non-collusion assumption"
    assert set(LedgerEntry.objects.filter(purchase=p).values_list("epsilon", "guarantee")) == {
        (D("0.955512"), "per_report_non_collusion")}
    assert not PurchaseChunk.objects.filter(purchase=p).exists()
    assert set(BudgetAccount.objects.values_list("oneshot_loss", flat=True)) == {D("0.955512")}
    report = audit_budgets()
    assert report.ok, report.as_text()


def test_ic_deck_level_is_checked_exactly():
    for n in (10, 57, 100, 1000, 12345):
        for eps in ("0.1", "0.5", "1", "2.5"):
            try:
                counts = oneshot_specs.ic_deck(n, D(eps), 0.05)
            except problems.TooFewRespondents:
                continue
            assert counts.sum() == n and counts[2] > counts[0] >= 1
            assert surveys.deck_level(counts) <= D(eps)
    with pytest.raises(problems.TooFewRespondents, match="needs more respondents"):
        oneshot_specs.ic_deck(3, D("0.1"), 0.1)


@pytest.mark.parametrize("request_, field", [
    ({"mechanism": "warner"}, "epsilon"),
    ({"mechanism": "simmons", "epsilon": "1"}, "pi_b"),
    ({"mechanism": "simmons", "epsilon": "1", "pi_b": "1"}, "pi_b"),
    ({"mechanism": "christofides", "epsilon": "1"}, "p2"),
    ({"mechanism": "improved_christofides", "epsilon": "1", "p2": "1"}, "p2"),
    ({"mechanism": "warner", "epsilon": "1", "p2": "0.1"}, "p2"),
    ({"mechanism": "warner", "epsilon": "0"}, "epsilon"),
    ({"mechanism": "warner", "epsilon": "nan"}, "epsilon"),
    ({"mechanism": "warner", "epsilon": "1e308"}, "epsilon"),
    ({"mechanism": "telepathy", "epsilon": "1"}, "mechanism"),
])
def test_survey_parameters_are_checked(request_, field):
    with pytest.raises(problems.ParameterError) as exc:
        oneshot_specs.parse_spec(BinaryAttributeFactory(), **request_)
    assert exc.value.field == field and str(exc.value)


def test_surveys_need_a_binary_attribute_and_oneshot_parameters_fit_their_mechanism():
    with pytest.raises(problems.ParameterError, match="choose a binary attribute"):
        oneshot_specs.parse_spec(UrrAttributeFactory(), mechanism="warner", epsilon="1")
    cases = [(UrrAttributeFactory(), {"epsilon": "1", "theta": "0.5"}, "theta"),
             (UrapAttributeFactory(), {"epsilon": "1", "theta": "1"}, "theta"),
             (TernaryAttributeFactory(), {"family": "rr3_ddagger", "epsilon": "1"}, "epsilon"),
             (TernaryAttributeFactory(), {"family": "rr3_ddagger", "eps1": "1"}, "eps2"),
             (TernaryAttributeFactory(), {"family": "rr3_club", "epsilon": "1"}, "family"),
             (GraphAttributeFactory(), {"epsilon": "1"}, "epsilon"),
             (GraphAttributeFactory(), {"eps1": "700", "eps2": "1"}, "eps1"),
             (BinaryAttributeFactory(), {"epsilon": "1", "eps1": "1"}, "eps1"),
             (DistributionAttributeFactory(), {}, "epsilon")]
    for attribute, request_, field in cases:
        with pytest.raises(problems.ParameterError) as exc:
            oneshot_specs.parse_spec(attribute, **request_)
        assert exc.value.field == field, (attribute.mechanism, request_, exc.value)
    assert oneshot_specs.parse_spec(BinaryAttributeFactory(), epsilon="1") is None  # a chain purchase


@pytest.mark.parametrize("factory, request_, field", [
    (UrrAttributeFactory, {"epsilon": "44.4"}, "epsilon"),
    (UrapAttributeFactory, {"epsilon": "88.1"}, "epsilon"),
    (TernaryAttributeFactory, {"epsilon": "45"}, "epsilon"),
    (TernaryAttributeFactory, {"family": "rr3_ddagger", "eps1": "44", "eps2": "1"}, "eps1"),
    (GraphAttributeFactory, {"eps1": "1", "eps2": "50"}, "eps2"),
    (DistributionAttributeFactory, {"epsilon": "60"}, "epsilon"),
    (BinaryAttributeFactory, {"mechanism": "warner", "epsilon": "45"}, "epsilon"),
    (BinaryAttributeFactory, {"mechanism": "simmons", "epsilon": "45", "pi_b": "0.5"}, "epsilon"),
    (BinaryAttributeFactory, {"mechanism": "christofides", "epsilon": "30.000001", "p2": "0.99"}, "epsilon"),
])
def test_an_epsilon_the_sampler_cannot_honour_is_refused_naming_the_limit(factory, request_, field):
    """Above the service's limit, 30 (below every one-shot sampler's own limit, docs/mechanisms.md), the request
    is a 400 naming it, where before the sampler silently released a different (noisier or deterministic)
    mechanism; at 30 it is accepted."""
    with pytest.raises(problems.ParameterError, match="at most 30") as exc:
        oneshot_specs.parse_spec(factory(), **request_)
    assert exc.value.field == field and "docs/mechanisms.md" in str(exc.value)
    below = {k: ("1" if k != field and k in ("eps1", "eps2") else v) for k, v in request_.items()}
    below[field] = "30"
    assert oneshot_specs.parse_spec(factory(), **below) is not None


def test_guarantee_labels_are_part_of_the_hashed_ledger_row():
    """Blocks without guarantees hash exactly as before the field existed (old ledgers and anchors still verify);
    a guarantee changes the bytes hashed."""
    rows = ledger.Rows.empty(2)
    rec = rows.records
    rec["value"], rec["kind"], rec["ceiling"] = [1, 2], 2, 1_000_000
    rec["chain_before"] = rec["chain_after"] = rec["oneshot_before"] = rec["oneshot_after"] = 0
    when = timezone.now()
    old = np.empty(2, dtype=ledger.ENTRY_V1)
    for name in ledger.ENTRY_V1.names:
        old[name] = rec[name]
    import hashlib

    h = hashlib.sha256(b"0" * 64)
    h.update(np.array([2, ledger.micros(when)], dtype="<i8").tobytes())
    h.update(old.tobytes())
    assert ledger.block_hash("0" * 64, when, rec) == h.hexdigest()
    rec["guarantee"][0] = ledger.GUARANTEES.index("per_report_non_collusion")
    assert ledger.block_hash("0" * 64, when, rec) != h.hexdigest()
    rec2 = rec.copy()
    rec2["guarantee"][0] = ledger.GUARANTEES.index("ldp")
    assert ledger.block_hash("0" * 64, when, rec2) != ledger.block_hash("0" * 64, when, rec)


def test_the_database_keeps_guarantees_on_releases_and_purchases_consistent():
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    v = values(attribute, ["yes"], ceiling="1")[0]
    buyer = funded_buyer()
    with pytest.raises(IntegrityError), transaction.atomic():
        Purchase.objects.create(buyer=buyer, attribute=attribute, epsilon=D("1"), idempotency_key="x",
                                mechanism="improved_christofides", guarantee="ldp")
    with pytest.raises(IntegrityError), transaction.atomic():
        Purchase.objects.create(buyer=buyer, attribute=attribute, epsilon=D("1"), idempotency_key="y",
                                mechanism="gradual_rr", guarantee="ldp", charged_epsilon=D("1"))
    with pytest.raises(IntegrityError), transaction.atomic():
        Purchase.objects.create(buyer=buyer, attribute=attribute, epsilon=D("1"), idempotency_key="z",
                                mechanism="warner", guarantee="ldp", status="completed")  # no charged epsilon
    block = LedgerEntry.objects.filter(value=v).first().block
    # budget events (and releases written before the compact ledger), one row each: at a free position
    base = dict(block=block, shard=block.shard, position=block.entry_count, value=v, created_at=block.created_at,
                chain_loss_before=0,
                chain_loss_after=0, oneshot_loss_before=0, ceiling=D("1"))
    with pytest.raises(IntegrityError), transaction.atomic():
        LedgerEvent.objects.create(kind="ceiling", oneshot_loss_after=0, guarantee="ldp", **base)
    with pytest.raises(IntegrityError), transaction.atomic():
        LedgerEvent.objects.create(kind="oneshot_release", epsilon=D("0.5"), oneshot_loss_after=D("0.5"),
                                   guarantee="", **base)
    # compact releases: a one-shot release names its guarantee, a chain release is epsilon-LDP at most
    purchase = Purchase.objects.create(buyer=buyer, attribute=attribute, epsilon=D("0.5"), idempotency_key="r")
    release = dict(block=block, position=block.entry_count, shard=attribute.id, purchase=purchase,
                   epsilon=D("0.5"), created_at=block.created_at, count=1, first_value=v.id, last_value=v.id,
                   value_ids=[v.id], owner_ids=[v.owner_id], chain_before=[0], oneshot_before=[0],
                   ceiling=[1_000_000])
    oneshot = dict(kind="oneshot_release", chain_after=[0], oneshot_after=[500_000], **release)
    chain = dict(kind="chain_release", chain_after=[500_000], oneshot_after=[0], **release)
    for bad in (dict(oneshot, guarantee=""), dict(oneshot, guarantee="strong"), dict(chain, guarantee="uldp"),
                dict(chain, guarantee="per_report_non_collusion")):
        with pytest.raises(IntegrityError), transaction.atomic():
            LedgerRelease.objects.create(**bad)
    for good in (dict(oneshot, guarantee="uldp"), dict(chain, guarantee="", position=block.entry_count + 1)):
        with transaction.atomic():
            LedgerRelease.objects.create(**good)
    assert connection.vendor in ("postgresql", "sqlite")
    assert (json.dumps(oneshot_specs.GUARANTEE_LABELS[oneshot_specs.G.PER_REPORT])
            == '"per-report eps, non-collusion assumption"')
    assert OwnerFactory().role == "owner"


def test_losses_that_add_up_to_the_ceiling_exactly_are_accepted_on_every_backend():
    """0.1 + 0.2 is 0.30000000000000004 in doubles (SQLite's storage): the CHECKs round sums to 6 places, so a
    loss of exactly the ceiling is accepted on SQLite as on PostgreSQL, and 0.000001 more is still refused."""
    attribute = BinaryAttributeFactory(price_policy=POLICY)
    values(attribute, ["yes", "no"] * 3, ceiling="0.3")
    buyer = funded_buyer()
    chain, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon="0.1", cohort=None, idempotency_key="c")
    assert purchase_execute(purchase_id=chain.id).included == 6
    survey = run(buyer, attribute, mechanism="warner", epsilon="0.2", rng=np.random.default_rng(0))
    assert survey.included == 6
    assert set(BudgetAccount.objects.filter(value__attribute=attribute).values_list("chain_loss", "oneshot_loss")) == {
        (D("0.1"), D("0.2"))}
    with pytest.raises(IntegrityError), transaction.atomic():
        BudgetAccount.objects.filter(value__attribute=attribute).update(oneshot_loss=D("0.200001"))
    report = audit_budgets()
    assert report.ok, report.as_text()


@pytest.mark.parametrize("mechanism, theta", [("urr", None), ("urap", None), ("urap", "0.7")])
def test_the_linear_terms_behind_estimates_and_quotes_match_the_mechanisms(mechanism, theta):
    """``(m_hat - a)/b`` per coordinate is ``mechanisms.uldp``'s estimator, and the quoted per-coordinate variances
    add up to its exact expected l2 loss (Props. 15/18)."""
    from mechanisms import uldp

    factory = UrrAttributeFactory if mechanism == "urr" else UrapAttributeFactory
    attribute = factory()
    spec = oneshot_specs.parse_spec(attribute, epsilon="0.9", **({"theta": theta} if theta else {}))
    a, b = registry.uldp_linear_terms(attribute.shape, spec.mechanism, spec.charged, spec.parameters)
    S = attribute.shape.extended_sensitive
    rng = np.random.default_rng(3)
    x = rng.integers(0, 7, 500)
    th = float(theta) if theta else None
    if mechanism == "urr":
        y = uldp.urr_perturb(x, 7, S, 0.9, rng)
        m_hat = np.bincount(y, minlength=7) / y.size
        np.testing.assert_allclose((m_hat - a) / b, uldp.urr_estimate(y, 7, S, 0.9), atol=1e-12)
    else:
        bits = uldp.urap_perturb(x, 7, S, 0.9, rng, th)
        np.testing.assert_allclose((bits.mean(axis=0) - a) / b, uldp.urap_estimate(bits, S, 0.9, th), atol=1e-12)
    p = np.array([0.2] * 5 + [0, 0])
    m = a + b * p
    np.testing.assert_allclose((m * (1 - m) / (100 * b * b)).sum(),
                               uldp.expected_l2(p, S, 0.9, 100, mechanism, th), rtol=1e-9)


def test_lpp_quotes_predict_per_item_errors_with_a_worst_case_above_every_population():
    """The typical standard errors are ``lpp_item_covariance`` at a population split evenly over the three
    states; the worst case bounds the exact covariance of every population on a grid of the simplex (and of
    any population with fractional weights: it drops the finite-population term, a covariance)."""
    from market.purchases import oneshot_stats

    attribute = GraphAttributeFactory()  # num_items items
    spec = oneshot_specs.parse_spec(attribute, eps1="1.5", eps2="0.8")
    n, items = 5000, attribute.num_items
    p = oneshot_stats.predicted(attribute, spec, n)
    typical = np.sqrt(np.diag(rr3.lpp_item_covariance(np.full(3, 1 / 3), n, items, 1.5, 0.8)))
    assert p.target == "item_degree_weight" and p.standard_error == pytest.approx(typical[0], rel=1e-12)
    rows = {row["label"]: row for row in p.per_category}
    assert rows["weight of an item"]["standard_error"] == pytest.approx(typical[1], rel=1e-12)
    grid = np.sqrt(np.array([np.diag(rr3.lpp_item_covariance(pi, n, items, 1.5, 0.8))
                             for pi in release_stats.SIMPLEX3]))
    worst = [rows[label]["worst_case_standard_error"] for label in ("degree of an item", "weight of an item")]
    assert (grid <= np.array(worst) * (1 + 1e-12)).all()
    assert worst[0] < 1.1 * grid[:, 0].max() and worst[1] < 1.1 * grid[:, 1].max()  # an upper bound, not a loose one
    assert p.worst_case_standard_error == worst[0]


@pytest.mark.parametrize("mechanism, request_", [("lpp", {"eps1": "1", "eps2": "1"}), ("urap", {"epsilon": "1"}),
                                                 ("private_sample", {"epsilon": "1"})])
def test_wide_inputs_are_opened_and_drawn_in_bounded_batches_and_stored_in_order(mechanism, request_, monkeypatch):
    """Each draw batch holds at most ``DRAW_BATCH_BYTES`` of inputs or outputs; the stored outputs are the
    batches' outputs in value order (nothing lost, repeated or shuffled by the batching)."""
    factory, raws = FACTORIES[mechanism]
    attribute = factory(price_policy=POLICY)
    vs = values(attribute, raws * 4, ceiling="3")
    per_value = max(domain.payload_bytes(attribute), 8 * attribute.width)
    monkeypatch.setattr(oneshot_specs, "DRAW_BATCH_BYTES", 3 * per_value)  # three values per batch
    drawn, real = [], oneshot_specs.draw

    def spy(attribute_, spec, payload, rng=None):
        out = real(attribute_, spec, payload, rng)
        drawn.append(np.asarray(out))
        return out

    monkeypatch.setattr(releases, "draw", spy)
    purchase = run(funded_buyer(), attribute, rng=np.random.default_rng(3), **request_)
    assert purchase.included == len(vs)
    assert [d.shape[0] for d in drawn] == [3] * (len(vs) // 3) + ([len(vs) % 3] if len(vs) % 3 else [])
    chunks = PurchaseChunk.objects.filter(purchase=purchase).order_by("seq")
    opened = [open_chunk(purchase.id, c.seq, c.value_ids, c.outputs, attribute.width, c.value_key_id) for c in chunks]
    ids = np.concatenate([o[0] for o in opened])
    out = np.concatenate([o[1] for o in opened])
    assert ids.tolist() == sorted(v.id for v in vs)
    np.testing.assert_array_equal(out, np.concatenate(drawn))
