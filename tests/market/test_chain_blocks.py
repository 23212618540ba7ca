"""Chains in blocks (market.chains.store, docs/architecture.md#chains-in-blocks): what a block stores, that the
neighbours of e decide a purchase exactly as the whole chain does, that a dump reveals no unreleased output and
no input, and that no chain forks under concurrency, even without the attribute's chain lock."""
from __future__ import annotations

import subprocess
import threading
import uuid
from decimal import Decimal

import numpy as np
import pytest
from django.apps import apps
from django.db import connection, transaction
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from accounts.models import BudgetAccount, MoneyAccount, MoneyEntry, User
from audit.budget_audit import audit_budgets
from ldpmarket.problems import ChainConflict
from market.chains import sets
from market.chains import store as chainstore
from market.chains.extension import chains_extend
from market.models import Attribute, ChainBlock, ChainPoint, Dataset, Purchase, Value
from market.purchases.execution import purchase_claim, purchase_execute
from market.purchases.pricing import DEFAULT_POLICY
from market.values import inputs as domain
from market.values import sealing
from market.values.services import values_create_many
from tests.factories import CategoricalAttributeFactory, contribute, stored_chains
from tests.market.test_purchase_concurrency import run_concurrently

D = Decimal


def set_ceilings(values, ceiling):
    BudgetAccount.objects.filter(value__in=values).update(ceiling=D(ceiling))


# ---------------------------------------------------------------------------------------------------------------
# What a block holds
# ---------------------------------------------------------------------------------------------------------------

def test_values_fill_blocks_in_arrival_order_and_keep_their_slot(db, settings):
    settings.LDP_CHAIN_BLOCK = 4
    attribute = CategoricalAttributeFactory()
    first = contribute(attribute, ["red"] * 3, ceiling="0.3", prefix="first")
    second = contribute(attribute, ["blue"] * 6, ceiling="0.5", prefix="second")
    placed = list(Value.objects.filter(attribute=attribute).order_by("id").values_list("block__index", "slot"))
    assert placed == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)]
    assert list(ChainBlock.objects.filter(attribute=attribute).order_by("index").values_list("size", "capacity")) \
        == [(4, 4), (4, 4), (1, 4)]
    # one sealed row per (block, epsilon); the second contribution's slot in block 0 joined its existing rows
    rows = dict(((b, e), p) for b, e, p in ChainPoint.objects.filter(attribute=attribute).values_list(
        "block__index", "epsilon", "present"))
    assert sorted(rows) == [(0, 100_000), (0, 200_000), (0, 300_000), (0, 400_000), (0, 500_000),
                            (1, 100_000), (1, 200_000), (1, 300_000), (1, 400_000), (1, 500_000),
                            (2, 100_000), (2, 200_000), (2, 300_000), (2, 400_000), (2, 500_000)]
    assert chainstore.unbitmap(rows[(0, 300_000)], 4).tolist() == [True] * 4
    assert chainstore.unbitmap(rows[(0, 400_000)], 4).tolist() == [False, False, False, True]
    stored = stored_chains(attribute)
    assert [stored[v.id][0].tolist() for v in first] == [[100_000, 200_000, 300_000]] * 3
    assert all(stored[v.id][0].tolist() == [100_000, 200_000, 300_000, 400_000, 500_000] for v in second)


def test_a_point_row_opens_only_as_the_row_it_was_sealed_for(db):
    attribute = CategoricalAttributeFactory()
    contribute(attribute, ["red", "blue"], ceiling="0.2")
    p = ChainPoint.objects.filter(attribute=attribute).order_by("epsilon").first()
    args = dict(attribute_id=attribute.id, block_id=p.block_id, epsilon=p.epsilon, present=bytes(p.present), width=1)
    assert sealing.open_points(p.sealed, **args).shape == (2048, 1)
    for change in ({"epsilon": p.epsilon + 1}, {"block_id": p.block_id + 1}, {"attribute_id": attribute.id + 1},
                   {"present": bytes(len(bytes(p.present)))}):
        with pytest.raises(sealing.SealBroken):
            sealing.open_points(p.sealed, **{**args, **change})


@hsettings(max_examples=60, deadline=None)
@given(eps=st.lists(st.integers(1, 40), min_size=1, max_size=8, unique=True), e=st.integers(0, 45),
       seed=st.integers(0, 2**32 - 1))
def test_the_neighbours_of_e_decide_a_release_as_the_whole_chain_does(eps, e, seed):
    """``chainstore.neighbours`` keeps at most the points just below and above e: ``sets.at`` then makes the
    same calls with the same outputs as on the whole chain (same random source)."""
    eps = np.array(sorted(eps), dtype=np.int64) * 100_000
    e = int(e) * 100_000 + 50_000 * (seed % 2)
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 4, size=(eps.size, 1))
    whole = sets.ChainSet(eps=eps, out=out, offsets=np.array([0, eps.size]))
    inputs = np.array([[2]])
    lo, hi = eps[eps <= e], eps[eps > e]
    keep = [lo[-1]] if lo.size and lo[-1] == e else list(lo[-1:]) + list(hi[:1])
    idx = np.searchsorted(eps, keep)
    mini = sets.ChainSet(eps=eps[idx], out=out[idx], offsets=np.array([0, len(keep)]))
    a, _ = sets.at(whole, e, 4, inputs, np.random.default_rng(seed + 1))
    b, _ = sets.at(mini, e, 4, inputs, np.random.default_rng(seed + 1))
    assert a.outputs.tolist() == b.outputs.tolist()
    assert (a.stored.tolist(), a.inserted.tolist()) == (b.stored.tolist(), b.inserted.tolist())


def test_neighbours_read_from_blocks_are_the_chains_nearest_points(db, settings):
    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory()
    values = contribute(attribute, ["red", "green", "blue"] * 7, ceiling="0.5")
    set_ceilings(values[::2], "0.9")
    chains_extend(attribute_id=attribute.id)
    stored = stored_chains(attribute)
    vals = list(Value.objects.filter(attribute=attribute).order_by("id"))
    b = np.array([v.block_id for v in vals])
    k = np.array([v.slot for v in vals])
    for e in (50_000, 300_000, 350_000, 700_000, 950_000):
        got = chainstore.neighbours(attribute, chainstore.read(b), b, k, e)
        for i, v in enumerate(vals):
            eps, out = stored[v.id]
            lo, hi = eps <= e, eps > e
            want = [eps[lo][-1]] if lo.any() and eps[lo][-1] == e else list(eps[lo][-1:]) + list(eps[hi][:1])
            seg = slice(got.offsets[i], got.offsets[i + 1])
            assert got.eps[seg].tolist() == want
            assert got.out[seg].tolist() == out[np.searchsorted(eps, want)].tolist()


def _blocks_state(attribute) -> dict:
    """Every block's rows, opened, and its heads: ``{block index: ([(epsilon, bitmap, outputs)], heads)}``."""
    ids = list(ChainBlock.objects.filter(attribute=attribute).order_by("index").values_list("id", flat=True))
    out = {}
    for index, (bid, block) in enumerate(sorted(chainstore.read(ids).items())):
        opened = chainstore.open_rows(attribute, block, range(block.eps.size))
        out[index] = ([(int(block.eps[r]), chainstore.bitmap(block.present[r]), opened[r].tolist())
                       for r in range(block.eps.size)], block.heads.tolist())
    return out


def test_store_writes_the_same_rows_from_a_grid_of_points_as_from_the_same_points_one_by_one(db, settings,
                                                                                                monkeypatch):
    """A block's new points as k slots x the same epsilons (extension's batches: ``store`` writes them as they
    are, with no search per point) or in another order (the general path): the same rows, bitmaps, outputs and
    heads, an existing row merged the same way, and a point stored again refused the same way."""
    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory()
    contribute(attribute, ["red", "green", "blue"] * 7, ceiling="0.1")  # blocks of 8, 8 and 5 values
    ids = list(ChainBlock.objects.filter(attribute=attribute).order_by("index").values_list("id", flat=True))
    gen = np.random.default_rng(5)
    eps = np.array([200_000, 300_000, 400_000])
    # block 0: all its slots (consecutive), block 1: slots 1, 3 and 6, block 2: slot 0 at 0.2, slot 2 at 0.2 and 0.3
    cells = [(ids[0], s, e) for s in range(8) for e in eps] + [(ids[1], s, e) for s in (1, 3, 6) for e in eps[:2]] \
        + [(ids[2], 0, 200_000), (ids[2], 2, 200_000), (ids[2], 2, 300_000)]
    block_ids, slots, points = (np.array(c, dtype=np.int64) for c in zip(*cells))
    outputs = gen.integers(0, 3, size=(len(cells), attribute.width))
    grids = []
    real = chainstore._as_grid
    monkeypatch.setattr(chainstore, "_as_grid", lambda *a: grids.append(real(*a)) or grids[-1])

    def stored(order, existing=None):
        with transaction.atomic():
            if existing is not None:  # a row at 0.3 in block 1 already, for slot 0 (as a purchase would leave it)
                chainstore.store(attribute, chainstore.read(ids), *existing)
            written = chainstore.store(attribute, chainstore.read(ids), block_ids[order], slots[order],
                                       points[order], outputs[order], savepoint=False)
            state = _blocks_state(attribute)
            transaction.set_rollback(True)
        return written, state

    as_grid, grids_seen = stored(np.arange(len(cells))), list(grids)
    assert [g is not None for g in grids_seen] == [True, True, False]
    assert isinstance(grids_seen[0][0], slice) and grids_seen[1][0].tolist() == [1, 3, 6]
    grids.clear()
    shuffled = gen.permutation(len(cells))
    assert stored(shuffled) == as_grid and all(g is None for g in grids)
    assert as_grid[0] == 3 + 2 + 2
    heads = as_grid[1][1][1]
    assert heads == [100_000, 300_000, 100_000, 300_000, 100_000, 100_000, 300_000, 100_000]

    existing = (np.array([ids[1]]), np.array([0]), np.array([300_000]), np.array([[2]]))
    grids.clear()
    merged = stored(np.arange(len(cells)), existing)
    assert grids[2] is not None  # (after the existing row's store) block 1 still a grid: its row at 0.3 is opened
    # and given the new slots
    assert stored(shuffled, existing) == merged
    rows = {e: bits for e, bits, _ in merged[1][1][0]}
    assert chainstore.unbitmap(rows[300_000], 8).tolist() == [True, True, False, True, False, False, True, False]
    assert merged[0] == as_grid[0]

    again = (np.array([ids[1]]), np.array([3]), np.array([300_000]), np.array([[1]]))
    for order in (np.arange(len(cells)), shuffled):
        with pytest.raises(ChainConflict, match="already has a point"):
            stored(order, again)


def test_points_at_opens_each_row_once_whatever_the_number_of_values(db, settings, monkeypatch):
    """``points_at`` hands ``open_many`` one row per value; each distinct row is read and opened once."""
    settings.LDP_CHAIN_BLOCK = 8
    attribute = CategoricalAttributeFactory()
    values = contribute(attribute, ["red", "green", "blue"] * 6, ceiling="0.3")
    rows = list(Value.objects.filter(id__in=[v.id for v in values]).order_by("id").values_list("block_id", "slot"))
    block_ids, slots = (np.array(c, dtype=np.int64) for c in zip(*rows))
    blocks = chainstore.read(block_ids)
    opened = []
    real = sealing.open_points
    monkeypatch.setattr(sealing, "open_points", lambda *a, **k: opened.append(k["epsilon"]) or real(*a, **k))
    got = chainstore.points_at(attribute, blocks, block_ids, slots, np.full(len(rows), 300_000))
    assert sorted(opened) == [300_000] * len(blocks)
    stored = stored_chains(attribute)
    assert got.tolist() == [stored[v.id][1][-1].tolist() for v in values]


# ---------------------------------------------------------------------------------------------------------------
# Sealed at rest: a dump reveals no unreleased output and no input
# ---------------------------------------------------------------------------------------------------------------

def _dump_text() -> bytes:
    """Every column of every row of every table, as one blob (hex for binary columns, as pg_dump writes them)."""
    parts = []
    with connection.cursor() as cur:
        for model in apps.get_models():
            table = model._meta.db_table
            cur.execute(f"SELECT * FROM {table}")
            for row in cur.fetchall():
                for x in row:
                    parts.append(bytes(x).hex() if isinstance(x, (bytes, memoryview)) else str(x))
    return " ".join(parts).encode()


def _windows(seq: np.ndarray, size: int = 12):
    """Hex of every ``size``-output window of an int16 output sequence, as stored plaintext would hold it; only
    windows with all three symbols (a run of equal outputs also occurs in unrelated columns: zero heads, say)."""
    seq = np.asarray(seq)
    raw = np.ascontiguousarray(seq, dtype="<i2").tobytes()
    return {raw[2 * i:2 * (i + size)].hex() for i in range(seq.size - size + 1) if np.unique(seq[i:i + size]).size == 3}


@pytest.fixture
def sold_and_pregenerated(db):
    """Values with chains pre-generated up to epsilon 3 (30 points), one purchase at 0.5."""
    attribute = CategoricalAttributeFactory(price_policy=DEFAULT_POLICY)
    rng = np.random.default_rng(3)
    raws = list(rng.choice(["red", "green", "blue"], size=40))
    values = contribute(attribute, raws, ceiling="3", rng=rng)
    buyer = User.objects.create(username="dump-buyer", role="buyer")
    account = MoneyAccount.objects.create(user=buyer, kind="buyer_credit", balance=D("100"))
    MoneyEntry.objects.create(account=account, amount=D("100"), balance_after=D("100"), memo="top-up")
    p, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon="0.5", cohort=None, idempotency_key="dump")
    purchase_execute(purchase_id=p.id, rng=rng)
    return attribute, values


def test_a_dump_holds_no_chain_output_sold_or_not_and_no_mechanism_input(sold_and_pregenerated):
    attribute, values = sold_and_pregenerated
    dump = _dump_text()
    stored = stored_chains(attribute)
    assert all(eps.size == 30 for eps, _ in stored.values())
    windows = {w for _, out in stored.values() for w in _windows(out[:, 0])}
    assert len(windows) > 20  # enough to see a leak: the check itself is tested below
    leaked = [w for w in windows if w.encode() in dump]
    assert not leaked, f"{len(leaked)} windows of chain outputs are in the dump"
    # the block rows' plaintext (every slot at one epsilon) is not there either, the row sold at 0.5 included
    # (the buyer's copy of it, the purchase's chunks, is sealed as well)
    state = chainstore.read([values[0].block_id])
    block = state[values[0].block_id]
    rows = chainstore.open_rows(attribute, block, range(block.eps.size))
    assert block.row(500_000) in rows and len(rows) == 30
    for r, out in rows.items():
        assert not [w for w in _windows(out[:len(values), 0]) if w.encode() in dump], block.eps[r]
    # nor the inputs, in value order
    payload = sealing.open_inputs([bytes(v.input_sealed) for v in Value.objects.filter(attribute=attribute)
                                   .order_by("id")], [v.owner_id for v in values], [attribute.id] * len(values),
                                  domain.payload_bytes(attribute))
    truth = domain.from_payload(attribute, payload)[:, 0]
    assert _windows(truth) and not [w for w in _windows(truth) if w.encode() in dump]
    assert not [truth[i:i + 12].astype(np.uint8).tobytes().hex() for i in range(truth.size - 12)
                if truth[i:i + 12].astype(np.uint8).tobytes().hex().encode() in dump]


def test_the_check_above_would_see_plaintext_outputs(sold_and_pregenerated):
    """The dump check is not vacuous: a plaintext copy of one value's unreleased outputs is found."""
    attribute, values = sold_and_pregenerated
    stored = stored_chains(attribute)
    eps, out = next((e, o) for e, o in stored.values() if _windows(o[:, 0]))
    Dataset.objects.create(title="leak", description=np.ascontiguousarray(out[:, 0], dtype="<i2").tobytes().hex())
    dump = _dump_text()
    assert any(w.encode() in dump for w in _windows(out[:, 0]))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_pg_dump_holds_no_unreleased_chain_output(settings):
    attribute = CategoricalAttributeFactory()
    rng = np.random.default_rng(4)
    contribute(attribute, list(rng.choice(["red", "green", "blue"], size=30)), ceiling="3", rng=rng)
    db = connection.settings_dict
    dump = subprocess.run(["pg_dump", "--data-only", "-h", db.get("HOST") or "127.0.0.1", "-p",
                           str(db.get("PORT") or 5432), "-U", db.get("USER") or "postgres", db["NAME"]],
                          capture_output=True, check=True, timeout=120).stdout
    assert b"COPY public.market_chainpoint" in dump
    windows = [w for eps, out in stored_chains(attribute).values() for w in _windows(out[:, 0])]
    state = chainstore.read(list(ChainBlock.objects.filter(attribute=attribute).values_list("id", flat=True)))
    for block in state.values():
        windows += [w for out in chainstore.open_rows(attribute, block, range(block.eps.size)).values()
                    for w in _windows(out[:30, 0])]
    assert windows and not [w for w in windows if w.encode() in dump]


# ---------------------------------------------------------------------------------------------------------------
# Fork-proof under concurrency (PostgreSQL)
# ---------------------------------------------------------------------------------------------------------------

def _market(n: int = 120):
    dataset = Dataset.objects.create(title=f"forks {uuid.uuid4().hex[:6]}")
    attribute = Attribute.objects.create(dataset=dataset, name="q", kind="categorical", labels=["a", "b", "c"],
                                         price_policy=DEFAULT_POLICY)
    owners = [User.objects.create(username=f"fork-owner-{uuid.uuid4().hex[:8]}", role="owner") for _ in range(n)]
    values = values_create_many(attribute=attribute, owners=owners, raws=["abc"[i % 3] for i in range(n)],
                                ceiling="0.3")
    buyers = []
    for k in range(2):
        b = User.objects.create(username=f"fork-buyer-{uuid.uuid4().hex[:8]}", role="buyer")
        account = MoneyAccount.objects.create(user=b, kind="buyer_credit", balance=D("1000"))
        MoneyEntry.objects.create(account=account, amount=D("1000"), balance_after=D("1000"), memo="top-up")
        buyers.append(b)
    return attribute, values, buyers


def _buy(buyer, attribute, epsilon):
    p, _ = purchase_claim(buyer=buyer, attribute=attribute, epsilon=epsilon, cohort=None,
                          idempotency_key=uuid.uuid4().hex)
    return purchase_execute(purchase_id=p.id)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_extension_workers_and_purchases_at_once_never_fork_a_chain(settings):
    settings.LDP_CHAIN_BLOCK = 32
    attribute, values, buyers = _market()
    set_ceilings(values, "2")
    jobs = [lambda: chains_extend(attribute_id=attribute.id, batch_size=64),
            lambda: chains_extend(attribute_id=attribute.id, batch_size=64),
            lambda: [_buy(buyers[0], attribute, e) for e in ("0.55", "1.25", "0.35")],
            lambda: [_buy(buyers[1], attribute, e) for e in ("1.95", "0.15", "1.25")]]
    assert run_concurrently(jobs) == []
    chains_extend(attribute_id=attribute.id)
    chains = [c for c in audit_budgets().checks if c.section == "Chains"]  # (ceilings were raised behind the ledger)
    assert len(chains) == 9 and all(c.ok for c in chains), chains  # every sold output is its stored point: no fork
    assert Purchase.objects.filter(attribute=attribute, status="completed").count() == 6
    for eps, _ in stored_chains(attribute).values():
        # (a purchase above a head relaxes straight to its epsilon: the grid points it skipped are not stored)
        assert np.all(np.diff(eps) > 0) and eps[-1] == 2_000_000


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_the_chain_lock_the_unique_key_refuses_the_second_writer(settings, monkeypatch):
    """Two extensions read the same heads at once, with the attribute's chain lock removed: both grow the same
    slots to the same grid points, and ``UNIQUE (block, epsilon)`` refuses the second one's rows."""
    attribute, values, _ = _market(40)
    set_ceilings(values, "0.6")
    monkeypatch.setattr(chainstore, "lock", lambda attribute_id: None)
    read, barrier = chainstore.read, threading.Barrier(2)

    def read_then_wait(block_ids):
        got = read(block_ids)
        barrier.wait(30)  # both writers hold the same state before either writes
        return got

    monkeypatch.setattr(chainstore, "read", read_then_wait)
    errors = run_concurrently([lambda: chains_extend(attribute_id=attribute.id),
                            lambda: chains_extend(attribute_id=attribute.id)])
    assert len(errors) == 1 and isinstance(errors[0], chainstore.ChainConflict), errors
    monkeypatch.setattr(chainstore, "read", read)
    assert chains_extend(attribute_id=attribute.id) == 0  # the first writer grew every chain
    assert all(e.tolist() == [100_000 * k for k in range(1, 7)] for e, _ in stored_chains(attribute).values())
    assert all(c.ok for c in audit_budgets().checks if c.section == "Chains")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_the_chain_lock_a_point_updated_since_it_was_read_refuses_the_writer():
    """Two writers add different slots to the same existing row from the same read: the second update finds
    the row's revision moved on and is refused (no lost slot)."""
    attribute, values, _ = _market(4)
    v0, v1 = (Value.objects.get(id=v.id) for v in values[:2])
    # make the two slots lack a point at 0.25, then let two writers add one each from the same read
    with transaction.atomic():
        state = chainstore.read([v0.block_id])
        chainstore.store(attribute, state, [v0.block_id], [v0.slot], [250_000], [[1]])
    state_a, state_b = chainstore.read([v0.block_id]), chainstore.read([v0.block_id])
    with transaction.atomic():
        chainstore.store(attribute, state_a, [v1.block_id], [v1.slot], [250_000], [[2]])
    with pytest.raises(chainstore.ChainConflict), transaction.atomic():
        chainstore.store(attribute, state_b, [values[2].block_id], [values[2].slot], [250_000], [[0]])
    stored = stored_chains(attribute)
    assert 250_000 in stored[v0.id][0].tolist() and 250_000 in stored[v1.id][0].tolist()
    assert 250_000 not in stored[values[2].id][0].tolist()
