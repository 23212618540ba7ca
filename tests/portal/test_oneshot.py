"""The owner portal for the one-shot mechanisms and surveys (issue 7; docs/architecture.md#apps-and-models).

Contributing values of the new kinds (three states, weighted edges, distributions) with their validation,
tagging uRR/uRAP values as personally sensitive (PUM: sealed, owner-only, POST + CSRF), one-shot releases and
survey participations listed like chain releases with their mechanism and guarantee (improved Christofides:
per-report epsilon under non-collusion, aggregate only), and the loss split into its chain and one-shot parts.
"""
from __future__ import annotations

import html as htmllib
import json
import re
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client

from accounts.models import BudgetAccount, LedgerEntry, MoneyAccount, MoneyEntry
from accounts.money.services import earnings_settle
from market.models import ChainBlock, ChainPoint, Purchase, Value
from market.purchases.pricing import DEFAULT_POLICY
from market.values.owner_rows import open_raw, pum_tag
from portal.forms import FIELDS_UP_TO, ContributeForm
from tests.factories import BinaryAttributeFactory, make_owners
from tests.portal.conftest import contribute_one, oneshot_attribute, oneshot_purchase, purchase
from tests.portal.test_accessibility import assert_accessible, parse

pytestmark = pytest.mark.django_db
D = Decimal
IC_WORDS = "if respondents cannot see each other's cards or answers; only the aggregate was sold"


def text(response) -> str:
    """The page's visible text: tags stripped, entities decoded, whitespace collapsed."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())


def form(attribute, raw: dict | str | None = None, **extra) -> ContributeForm:
    data = {"policy": "fixed", "ceiling": "2", **extra}
    if isinstance(raw, dict):
        data.update(raw)
    elif raw is not None:
        data["raw"] = raw
    return ContributeForm(data, attribute=attribute)


def raw_errors(f: ContributeForm) -> str:
    assert not f.is_valid()
    return " ".join(f.errors.get("raw", []))


# ============================================================================================ contributing

def test_a_ternary_value_is_one_of_three_labelled_states(owner_client, owner):
    attribute = oneshot_attribute("ternary")
    f = form(attribute, "sometimes")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"] == "sometimes"
    assert "Please choose one of the three states" in raw_errors(form(attribute, "weekly"))
    assert "Please choose one of the three states" in raw_errors(form(attribute, ""))

    html = owner_client.get(f"/portal/contribute/{attribute.id}/").content.decode()
    page = parse(html)
    radios = [c for c in page.controls if c.get("name") == "raw"]
    assert [c["value"] for c in radios] == ["never", "sometimes", "daily"] and all(c["type"] == "radio" for c in radios)
    for state in ("never", "sometimes", "daily"):
        assert re.search(rf"<label[^>]*>\s*<input[^>]*value=\"{state}\"[^>]*>\s*{state}</label>", html)
    response = owner_client.post(f"/portal/contribute/{attribute.id}/", {"raw": "daily", "policy": "fixed",
                                                                         "ceiling": "1.5"})
    value = Value.objects.get(owner=owner, attribute=attribute)
    assert response.status_code == 302 and response["Location"] == f"/portal/values/{value.id}/"
    assert open_raw(value) == "daily"
    # a one-shot value has no chain: no slot in a chain block, and its attribute has no chain block nor point
    assert (value.block_id, value.slot) == (None, None)
    assert not ChainBlock.objects.filter(attribute=attribute).exists()
    assert not ChainPoint.objects.filter(attribute=attribute).exists()


def test_a_graph_value_takes_a_weight_per_item_and_leaves_empty_items_without_an_edge(owner):
    attribute = oneshot_attribute("graph")
    f = form(attribute, {"raw_0": "0.5", "raw_1": "", "raw_2": "−1"})
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"] == {"Alpha": 0.5, "Gamma": -1.0}
    assert form(attribute, {"raw_0": "0", "raw_2": "1"}).is_valid()  # 0 is an edge of neutral weight

    assert "between −1 and 1: check the weight for “Beta”" in raw_errors(form(attribute, {"raw_1": "1.5"}))
    assert "“Alpha” and “Gamma”" in raw_errors(form(attribute, {"raw_0": "-2", "raw_2": "7"}))
    assert "The weight for “Beta” is not a number" in raw_errors(form(attribute, {"raw_1": "lots"}))
    assert "at least one item" in raw_errors(form(attribute, {}))


def test_a_graph_without_item_names_numbers_its_items(owner_client, owner):
    attribute = oneshot_attribute("graph", labels=[], num_items=3)
    f = form(attribute, {"raw_1": "0.25"})
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"] == {"1": 0.25}
    html = owner_client.get(f"/portal/contribute/{attribute.id}/").content.decode()
    assert '<label for="id_raw_1">Item 1</label>' in html
    assert "3 items, numbered 0 to 2" in text(owner_client.get("/portal/contribute/"))
    response = owner_client.post(f"/portal/contribute/{attribute.id}/", {"raw_1": "0.25", "policy": "fixed",
                                                                         "ceiling": "1"})
    assert "item 1: +0.25" in text(owner_client.get(response["Location"]))


def test_a_graph_with_many_items_takes_lines_of_item_and_weight(owner):
    items = [f"item {i}" for i in range(FIELDS_UP_TO + 10)]
    attribute = oneshot_attribute("graph", labels=items, num_items=len(items))
    f = form(attribute, "item 3 0.5\n\n# a comment\nITEM 12: -0,25\nitem 39, 1")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"] == {"item 3": 0.5, "item 12": -0.25, "item 39": 1.0}
    errors = raw_errors(form(attribute, "item 3 0.5\nitem 3 0.1\nsomething 0.2\nitem 4"))
    assert "line 2: “item 3” is given twice" in errors
    assert "line 3: “something” is not one of the items" in errors
    assert "line 4: “item 4” needs a weight after it" in errors
    assert "line 1: write the name, a space and the weight" in raw_errors(form(attribute, "item 3 = lots"))
    assert "check the weight for “item 1”" in raw_errors(form(attribute, "item 1 -3"))

    html = ContributeForm(attribute=attribute)["raw"].as_field_group()
    assert "<textarea" in html and "Items you leave out have no edge" in html


@pytest.mark.parametrize("weight", ["+0.5", "0_5", "\u0660.\u0665", "5e-1", "0x1"])
def test_a_weight_is_a_plain_decimal(owner, weight):
    """Numbers Python reads are no weight here (docs/errors.md#numbers-in-requests); "−1" and "-0,25" are."""
    attribute = oneshot_attribute("graph")
    assert "The weight for “Alpha” is not a number" in raw_errors(form(attribute, {"raw_0": weight}))
    items = [f"item {i}" for i in range(FIELDS_UP_TO + 10)]
    many = oneshot_attribute("graph", labels=items, num_items=len(items))
    errors = raw_errors(form(many, f"item 3 {weight}"))
    assert "line 1:" in errors and not form(many, f"item 3 {weight}").is_valid()


def test_a_line_whose_number_does_not_parse_is_explained_not_a_500(owner):
    """``item 3 1,`` matched the line's pattern, then ``Decimal("1,")`` raised out of the form."""
    items = [f"item {i}" for i in range(FIELDS_UP_TO + 10)]
    attribute = oneshot_attribute("graph", labels=items, num_items=len(items))
    assert "line 1: “1,” is not a number" in raw_errors(form(attribute, "item 3 1,"))
    assert form(attribute, "item 3 \u22120,5").is_valid()


def test_a_distribution_must_be_non_negative_and_add_up_to_one(owner):
    attribute = oneshot_attribute("distribution")
    f = form(attribute, {"raw_0": "0.25", "raw_1": "0.75", "raw_2": ""})
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"] == {"walk": 0.25, "bike": 0.75, "car": 0.0}  # empty counts as 0
    f = form(attribute, {"raw_0": "0.333", "raw_1": "0.333", "raw_2": "0.333"})  # within the tolerance: rescaled
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"] == pytest.approx({"walk": 1 / 3, "bike": 1 / 3, "car": 1 / 3})
    assert sum(f.cleaned_data["raw"].values()) == pytest.approx(1, abs=1e-12)

    assert "add up to 0.9; they must add up to 1." in raw_errors(form(attribute, {"raw_0": "0.5", "raw_1": "0.4"}))
    assert "look like percentages" in raw_errors(form(attribute, {"raw_0": "20", "raw_1": "30", "raw_2": "50"}))
    assert "cannot be negative: check “bike”" in raw_errors(form(attribute, {"raw_0": "1.5", "raw_1": "-0.5"}))
    assert "Please enter your probabilities" in raw_errors(form(attribute, {}))
    help_text = ContributeForm(attribute=attribute).fields["raw"].help_text
    assert "must add up to 1" in help_text and "not counts or percentages" in help_text


def test_a_distribution_with_many_labels_takes_lines(owner):
    labels = [f"bucket {i}" for i in range(FIELDS_UP_TO + 1)]
    prior = [1 / len(labels)] * len(labels)
    attribute = oneshot_attribute("distribution", labels=labels, prior=prior)
    f = form(attribute, "bucket 0 0.5\nbucket 30 0.5")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["raw"]["bucket 0"] == 0.5 and f.cleaned_data["raw"]["bucket 7"] == 0.0
    assert "they must add up to 1" in raw_errors(form(attribute, "bucket 0 0.5"))


@pytest.mark.parametrize("kind, body, shown", [
    ("graph", {"raw_0": "0.5", "raw_2": "-1"}, "Alpha: +0.5 · Gamma: −1"),
    ("distribution", {"raw_0": "0.2", "raw_1": "0.8"}, "walk: 0.2 · bike: 0.8"),
    ("urr", {"raw": "office"}, "office"),
])
def test_contributing_a_value_of_each_new_kind_stores_it_and_shows_it_to_its_owner(owner_client, owner, kind, body,
                                                                                   shown):
    attribute = oneshot_attribute(kind)
    response = owner_client.post(f"/portal/contribute/{attribute.id}/", {**body, "policy": "fixed", "ceiling": "2"})
    assert response.status_code == 302, response.context["form"].errors
    value = Value.objects.get(owner=owner, attribute=attribute)
    raw = open_raw(value)
    if kind == "graph":
        assert json.loads(raw) == {"Alpha": 0.5, "Gamma": -1.0}
    page = text(owner_client.get(response["Location"]))
    assert shown in page and "(only you can see this)" in page
    assert "one-shot: every sale adds its ε" in page and "Chain head" not in page
    assert shown in text(owner_client.get("/portal/"))


def test_the_contribute_page_explains_the_mechanism_and_what_each_release_costs(owner_client):
    page = text(owner_client.get(f"/portal/contribute/{oneshot_attribute('urr').id}/"))
    # plain words first; the technical name only as a detail (issue 31)
    assert ("How your value will be sold: Randomized answer that always protects sensitive answers Technical name uRR"
            in page)
    assert "Every sale is a fresh randomization of your value and adds its ε" in page
    assert "Sensitive answers, always protected: clinic. Any other answer may be passed on exactly." in page
    assert "tag it on the value page" in page
    chain = text(owner_client.get(f"/portal/contribute/{BinaryAttributeFactory(price_policy=DEFAULT_POLICY).id}/"))
    assert "only the highest ε counts" in chain and "only the aggregate estimate is sold" in chain
    assert "(non-collusion)" in chain
    choose = text(owner_client.get("/portal/contribute/"))
    assert ("Sold by: Randomized answer that always protects sensitive answers — one-shot, every sale adds its ε "
            "Technical name uRR" in choose)


def test_a_refused_contribution_explains_the_error_next_to_the_field(owner_client, owner):
    attribute = oneshot_attribute("distribution")
    response = owner_client.post(f"/portal/contribute/{attribute.id}/",
                                 {"raw_0": "0.5", "raw_1": "0.1", "policy": "fixed", "ceiling": "2"})
    assert response.status_code == 200 and not Value.objects.filter(owner=owner).exists()
    html = response.content.decode()
    assert 'role="alert"' in html and 'href="#id_raw_0"' in html
    assert "Your probabilities add up to 0.6; they must add up to 1." in text(response)
    page = assert_accessible(response, "distribution errors")
    inputs = [c for c in page.controls if c.get("name", "").startswith("raw_")]
    assert len(inputs) == 3 and all(c.get("aria-invalid") == "true" for c in inputs)
    assert all("id_raw_error" in c["aria-describedby"].split() for c in inputs)
    assert 'id="id_raw_error"' in html and 'id="id_raw_helptext"' in html
    # the numbers typed are kept
    assert {c["name"]: c.get("value") for c in inputs} == {"raw_0": "0.5", "raw_1": "0.1", "raw_2": None}


# ================================================================================================ PUM tags

@pytest.fixture
def urr():
    return oneshot_attribute("urr")


@pytest.fixture
def tagged_value(owner, urr):
    return contribute_one(owner, urr, "home", ceiling="3")


def value_columns(value_id: int) -> str:
    """Every column of the value's row as stored, as text (bytes decoded leniently)."""
    table = Value._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [value_id])
        row = cursor.fetchone()
    return " ".join(bytes(c).decode("latin-1") if isinstance(c, (bytes, memoryview)) else str(c) for c in row)


def test_an_owner_tags_a_value_as_personally_sensitive_and_the_tag_is_stored_sealed(owner_client, tagged_value):
    url = f"/portal/values/{tagged_value.id}/sensitivity-tag/"
    before = bytes(Value.objects.get(id=tagged_value.id).input_sealed)
    page = text(owner_client.get(f"/portal/values/{tagged_value.id}/"))
    assert "Personally sensitive? Tag your answer" in page and "Sensitivity tag none" in page
    assert "stored sealed" in page and "⊥" in page

    response = owner_client.post(url, {"tag": "workplace"})
    assert response.status_code == 302 and response["Location"] == f"/portal/values/{tagged_value.id}/"
    value = Value.objects.get(id=tagged_value.id)
    assert pum_tag(value.owner, value.id) == "workplace"
    stored = bytes(value.input_sealed)
    assert stored != before
    assert b"workplace" not in stored and b"workplace" not in bytes(value.raw_sealed)
    assert "workplace" not in value_columns(value.id)  # nowhere in the row in clear
    page = text(owner_client.get(response["Location"]))
    assert "tagged as personally sensitive (“workplace”)" in page
    assert "Sensitivity tag tagged “workplace” : released as the protected symbol ⊥workplace" in page
    assert open_raw(value) == "home"  # the raw value itself is untouched

    response = owner_client.post(url, {"tag": ""})
    assert response.status_code == 302
    assert pum_tag(tagged_value.owner, tagged_value.id) is None
    assert "The tag is removed" in text(owner_client.get(response["Location"]))


def test_a_tag_that_is_not_offered_is_refused_with_the_reason(owner_client, tagged_value):
    url = f"/portal/values/{tagged_value.id}/sensitivity-tag/"
    response = owner_client.post(url, {"tag": "gym"})
    assert response.status_code == 200
    assert "Please choose one of the tags in the list, or no tag." in text(response)
    assert pum_tag(tagged_value.owner, tagged_value.id) is None
    assert_accessible(response, "tag errors")
    # choosing nothing never removes a tag by omission
    owner_client.post(url, {"tag": "residence"})
    response = owner_client.post(url, {})
    assert response.status_code == 200 and "Please choose one of the tags, or no tag." in text(response)
    assert pum_tag(tagged_value.owner, tagged_value.id) == "residence"
    assert 'href="#pum_tag_0"' in response.content.decode()  # the error summary links to the first choice


def test_tags_are_owner_only_csrf_protected_and_only_for_urr_and_urap(owner_client, owner, other_owner, urr,
                                                                       tagged_value, buyer):
    theirs = contribute_one(other_owner, urr, "park")
    url = f"/portal/values/{theirs.id}/sensitivity-tag/"
    assert owner_client.get(url).status_code == 404
    assert owner_client.post(url, {"tag": "residence"}).status_code == 404
    assert pum_tag(other_owner, theirs.id) is None
    assert owner_client.get("/portal/values/999999/sensitivity-tag/").status_code == 404

    chain_value = contribute_one(owner, BinaryAttributeFactory(price_policy=DEFAULT_POLICY), "yes")
    assert owner_client.get(f"/portal/values/{chain_value.id}/sensitivity-tag/").status_code == 404
    assert "Tag your answer" not in text(owner_client.get(f"/portal/values/{chain_value.id}/"))

    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(owner)
    mine = f"/portal/values/{tagged_value.id}/sensitivity-tag/"
    assert csrf_client.post(mine, {"tag": "residence"}).status_code == 403
    assert pum_tag(tagged_value.owner, tagged_value.id) is None

    anonymous = Client().post(mine, {"tag": "residence"})
    assert anonymous.status_code == 302 and "/portal/login/" in anonymous["Location"]
    buyer_client = Client()
    buyer_client.force_login(buyer)
    assert buyer_client.post(mine, {"tag": "residence"}).status_code == 403
    assert pum_tag(tagged_value.owner, tagged_value.id) is None


def test_a_deleted_raw_value_cannot_be_tagged(owner_client, tagged_value):
    owner_client.post(f"/portal/values/{tagged_value.id}/sensitivity-tag/", {"tag": "residence"})
    response = owner_client.post(f"/portal/values/{tagged_value.id}/delete-raw/")
    assert "It can no longer be sold: every one-shot release needs it." in text(owner_client.get(response["Location"]))
    assert owner_client.get(f"/portal/values/{tagged_value.id}/sensitivity-tag/").status_code == 404
    assert "Tag your answer" not in text(owner_client.get(f"/portal/values/{tagged_value.id}/"))


def test_a_tagged_value_is_released_as_its_protected_symbol_and_the_tag_reaches_no_buyer(owner_client, owner, urr,
                                                                                         tagged_value, buyer):
    owner_client.post(f"/portal/values/{tagged_value.id}/sensitivity-tag/", {"tag": "residence"})
    p = oneshot_purchase(buyer, urr, epsilon="1")
    assert p.included == 1 and p.guarantee == "uldp"
    page = text(owner_client.get(f"/portal/values/{tagged_value.id}/"))
    assert "Randomized answer that always protects sensitive answers (uRR)" in page
    assert "sensitive or tagged answers protected at ε 1" in page
    # the portal never shows the tag to anyone but the owner: not in the buyer-facing purchase record
    assert "residence" not in json.dumps(Purchase.objects.filter(id=p.id).values().first(), default=str)


# ================================================================================================ releases

@pytest.fixture
def survey_population(owner, buyer):
    """A binary attribute with the owner's value and 29 others, a chain purchase and an IC survey over it, the
    owners' earnings of each settled after it (as the task enqueued on each purchase's commit does)."""
    attribute = BinaryAttributeFactory(name="smoker", labels=["no", "yes"], price_policy=DEFAULT_POLICY)
    mine = contribute_one(owner, attribute, "yes", ceiling="3")
    from market.values.services import values_create_many

    values_create_many(attribute=attribute, owners=make_owners(29, "respondent"), raws=["no", "yes"] * 14 + ["no"],
                       ceiling="3")
    purchase(buyer, attribute, "0.5")
    earnings_settle(shard=attribute.id)
    survey = oneshot_purchase(buyer, attribute, mechanism="improved_christofides", epsilon="1", p2="0.1")
    assert survey.status == "completed" and survey.guarantee == "per_report_non_collusion"
    earnings_settle(shard=attribute.id)
    return attribute, mine, survey


def test_an_improved_christofides_participation_shows_its_distinct_guarantee(owner_client, survey_population):
    _, mine, survey = survey_population
    charged = f"{survey.charged_epsilon.normalize():f}"
    assert D(charged) <= 1
    words = f"each answer protected at ε {charged} {IC_WORDS}"
    for url in ("/portal/releases/", f"/portal/values/{mine.id}/", "/portal/"):
        response = owner_client.get(url)
        page = text(response)
        assert words in page, url
        assert "Yes/no survey, improved Christofides method survey: aggregate only" in page, url
        assert 'data-guarantee="per_report_non_collusion"' in response.content.decode(), url
        assert "Institute of Careful Statistics" in page
    entry = LedgerEntry.objects.get(value=mine, kind=LedgerEntry.Kind.ONESHOT_RELEASE)
    assert entry.guarantee == LedgerEntry.Guarantee.PER_REPORT and entry.epsilon == survey.charged_epsilon
    # the owner's share of the survey: the ledger's per-value earning, and what its settlement (the last, after
    # the chain purchase's) credited them
    chain_paid, survey_paid = MoneyEntry.objects.filter(
        account__user=mine.owner, account__kind=MoneyAccount.Kind.OWNER_EARNINGS).order_by("id")
    assert survey_paid.kind == MoneyEntry.Kind.EARNING and survey_paid.settlement_id is not None
    earned = survey_paid.amount
    assert earned > 0 and entry.earning == earned
    row = re.search(r'<tr class="release-row one-shot".*?</tr>', owner_client.get("/portal/releases/").content.decode(),
                    re.S).group()
    assert f"{earned:.4f}" in row and f">{charged} <small>(one-shot)" in row


def test_chain_and_one_shot_losses_are_shown_separately_against_the_ceiling(owner_client, survey_population):
    _, mine, survey = survey_population
    b = BudgetAccount.objects.get(value=mine)
    assert b.chain_loss == D("0.5") and b.oneshot_loss == survey.charged_epsilon
    response = owner_client.get(f"/portal/values/{mine.id}/")
    html, page = response.content.decode(), text(response)
    oneshot = f"{b.oneshot_loss.normalize():f}"
    assert re.search(rf'<meter id="chain-loss-{mine.id}" class="part chain" min="0" max="3" value="0.5"', html)
    assert re.search(rf'<meter id="oneshot-loss-{mine.id}" class="part oneshot" min="0" max="3" value="{oneshot}"',
                     html)
    assert "ε 0.5 (16%): only the highest ε sold from the chain counts" in page
    assert f"ε {oneshot} ({int(b.oneshot_loss * 100 / 3)}%): the sum of every one-shot release and survey" in page
    assert '<rect class="seg chain" width="16" height="1"/>' in html  # an SVG bar: no inline style (CSP)
    assert '<path class="chain-loss"' in html  # the chart draws the chain part under the total
    assert (f"privacy spent ε {(b.chain_loss + b.oneshot_loss).normalize():f} (chain ε 0.5, one-shot ε {oneshot})"
            in html)
    history = text(owner_client.get(f"/portal/values/{mine.id}/"))
    assert f"One-shot release at ε {oneshot}" in history and "Chain release at ε 0.5" in history
    assert_accessible(response, "value page with both losses")


def test_a_chain_only_value_keeps_the_single_loss_bar(owner_client, value, buyer, attribute):
    purchase(buyer, attribute, "0.5")
    html = owner_client.get(f"/portal/values/{value.id}/").content.decode()
    assert "chain-loss-" not in html and "oneshot-loss-" not in html and 'class="chain-loss"' not in html
    assert "Chain of randomized answers (gradual release)" in html


@pytest.mark.parametrize("kind, raw, request_body, mechanism_words, guarantee", [
    ("urr", "office", {"epsilon": "0.8"}, "Randomized answer that always protects sensitive answers (uRR)",
     "sensitive or tagged answers protected at ε 0.8, other answers may be passed on exactly"),
    ("urap", "clinic", {"epsilon": "0.6"}, "Randomized pattern of bits that always protects sensitive answers (uRAP)",
     "sensitive or tagged answers protected at ε 0.6"),
    ("ternary", "daily", {"eps1": "1", "eps2": "1"},
     "Randomized choice among three answers (RR3), with two levels set by the buyer: ε 1 and ε 1",
     "your value protected at ε 1.379886; one-shot"),
    ("ternary", "never", {"epsilon": "0.4"},
     "Randomized choice among three answers (RR3), the two other answers equally likely",
     "your value protected at ε 0.4"),
    ("graph", {"Alpha": 0.5}, {"eps1": "1", "eps2": "2"},
     "Randomized report about one of your links (LPP), with two levels set by the buyer: ε 1 and ε 2",
     "your value protected at ε 2; one-shot, adds ε 2"),
    ("distribution", {"walk": 1.0}, {"epsilon": "0.7"}, "Private sample of your distribution",
     "your value protected at ε 0.7"),
])
def test_every_one_shot_release_is_listed_with_mechanism_charged_epsilon_and_guarantee(
        owner_client, owner, buyer, kind, raw, request_body, mechanism_words, guarantee):
    attribute = oneshot_attribute(kind)
    value = contribute_one(owner, attribute, raw, ceiling="5")
    p = oneshot_purchase(buyer, attribute, **request_body)
    assert p.included == 1
    b = BudgetAccount.objects.get(value=value)
    assert b.oneshot_loss == p.charged_epsilon and b.chain_loss == 0
    charged = f"{p.charged_epsilon.normalize():f}"
    for url in ("/portal/releases/", f"/portal/values/{value.id}/"):
        page = text(owner_client.get(url))
        assert mechanism_words in page and guarantee in page, url
        assert f"{charged} (one-shot)" in page and "Institute of Careful Statistics" in page
    html = owner_client.get(f"/portal/values/{value.id}/").content.decode()
    assert re.search(rf'<meter id="loss-{value.id}" min="0" max="5" value="{charged}"', html)
    # a one-shot value has no chain: no chain and one-shot bars, no chain line in the chart nor in its legend
    assert "chain-loss-" not in html and "oneshot-loss-" not in html and "loss-split" not in html
    assert 'class="chain-loss"' not in html and "Chain part" not in html
    # a second sale adds its epsilon again (one-shot)
    oneshot_purchase(buyer, attribute, seed=1, **request_body)
    assert BudgetAccount.objects.get(value=value).oneshot_loss == 2 * p.charged_epsilon
    assert f"ε {(2 * p.charged_epsilon).normalize():f} of ε 5 spent" in text(owner_client.get("/portal/"))


def test_the_export_names_each_releases_mechanism_and_guarantee_and_the_owners_tag(owner_client, owner, urr,
                                                                                   tagged_value, survey_population):
    owner_client.post(f"/portal/values/{tagged_value.id}/sensitivity-tag/", {"tag": "residence"})
    data = json.loads(owner_client.get("/portal/export/").content)
    by_attribute = {v["attribute"]: v for v in data["values"]}
    place = by_attribute["place"]
    assert place["mechanism"] == "urr" and place["pum_tag"] == "residence" and place["chain"] is None
    smoker = by_attribute["smoker"]
    assert "pum_tag" not in smoker and smoker["chain"]["head"]
    survey = next(r for r in smoker["releases"] if r["one_shot"])
    assert survey["mechanism"] == "improved_christofides" and survey["guarantee"] == "per_report_non_collusion"
    assert IC_WORDS in survey["guarantee_label"]
    chain = next(r for r in smoker["releases"] if not r["one_shot"])
    assert chain["mechanism"] == "gradual_rr" and chain["guarantee"] == ""


# ============================================================================================ accessibility

def test_every_new_page_and_form_has_labelled_controls(owner_client, owner, tagged_value, survey_population):
    attributes = [oneshot_attribute(k) for k in ("urap", "ternary", "graph", "distribution")]
    attributes.append(oneshot_attribute("graph", name="many", labels=[f"i{j}" for j in range(40)], num_items=40))
    gets = [f"/portal/contribute/{a.id}/" for a in attributes]
    gets += ["/portal/", "/portal/releases/", "/portal/contribute/", f"/portal/values/{tagged_value.id}/",
             f"/portal/values/{tagged_value.id}/sensitivity-tag/", f"/portal/values/{tagged_value.id}/delete-raw/"]
    controls = 0
    for url in gets:
        controls += len(assert_accessible(owner_client.get(url), url).controls)
    for a in attributes:
        url = f"/portal/contribute/{a.id}/"
        response = owner_client.post(url, {"raw": "x", "raw_0": "x", "raw_1": "-5", "policy": "fixed", "ceiling": ""})
        page = assert_accessible(response, url)
        assert 'role="alert"' in response.content.decode() and response.context["form"].errors
        controls += len(page.controls)
    assert controls > 60


def test_the_dashboard_needs_the_same_queries_for_one_one_shot_value_or_many(owner_client, owner, buyer):
    from django.test.utils import CaptureQueriesContext

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert owner_client.get("/portal/").status_code == 200
        return len(ctx.captured_queries)

    first = oneshot_attribute("urr", name="first")
    contribute_one(owner, first, "home")
    oneshot_purchase(buyer, first, epsilon="0.5")
    one = queries()
    for i, kind in enumerate(["urr", "ternary", "distribution"]):
        attribute = oneshot_attribute(kind, name=f"more {i}")
        contribute_one(owner, attribute, {"ternary": "never", "distribution": {"walk": 1}}.get(kind, "park"))
        oneshot_purchase(buyer, attribute, epsilon="0.5")
    assert queries() == one
