"""The stored chains against the budgets and the purchases (docs/budget-rules.md#the-audit,
docs/architecture.md#chains-in-blocks).

Chains are sealed at rest; the audit opens them in this process only to check them, and reports counts and
ids, never an output.  Checked:

* every gradual-release value has a slot in one of its attribute's blocks, within the block's size, and no
  other value has it; one-shot values have none;
* every point row opens: its AES-GCM tag verifies against its attribute, block, epsilon and bitmap, so a row
  changed, moved to another block or epsilon, or with a changed bitmap, is caught;
* each slot's head is its highest stored epsilon, and covers what was sold: ``head >= chain_loss``;
* owner-held values: custody as the ledger records it, and each chain's head at the last recorded upload level;
* every completed chain purchase's released outputs (sealed too: a chunk moved or changed does not open) are
  the stored points of its values at its epsilon (a chain that forked, or a point rewritten after it was sold,
  is caught).
"""
from __future__ import annotations

import numpy as np

from accounts.epsilon import to_micro
from market.chains import store
from market.models import Attribute, ChainBlock, Purchase, PurchaseChunk
from market.selectors import open_chunk
from market.values import sealing

from .report import Recorder, eps_text
from .tables import lookup, read_slots

S = "Chains"
#: Blocks read and opened at a time (memory stays flat in the number of values).
BLOCKS_PER_READ = 256


def check_chains(rec: Recorder, budgets) -> dict[str, np.ndarray]:
    """The checks of the module docstring, reading the chain blocks a batch at a time; returns every value's chain
    head (``{"value", "head"}``, value-id order; 0 for none) for ``check_custody``."""
    slots = read_slots()
    attributes = {a.id: a for a in Attribute.objects.all()}
    chain_attr = np.isin(slots["attribute"], [a.id for a in attributes.values() if not a.is_oneshot])
    rec.check(S, "every gradual-release value has a slot in a chain block, and no one-shot value has one",
              chain_attr != (slots["block"] >= 0), slots["id"].size,
              lambda i: f"value {slots['id'][i]}: block {slots['block'][i]}, attribute {slots['attribute'][i]}")
    placed = np.flatnonzero(slots["block"] >= 0)
    key = slots["block"][placed] * (1 << 32) + slots["slot"][placed]
    distinct, counts = np.unique(key, return_counts=True)
    shared = np.isin(key, distinct[counts > 1])
    rec.check(S, "no two values share a slot", shared, placed.size,
              lambda i: f"value {slots['id'][placed[i]]} shares slot {slots['slot'][placed[i]]} of block "
                        f"{slots['block'][placed[i]]}")
    blocks = list(ChainBlock.objects.order_by("id").values_list("id", "attribute_id", "size"))
    head = np.zeros(slots["id"].size, dtype=np.int64)
    top = np.zeros(slots["id"].size, dtype=np.int64)
    outside = np.zeros(slots["id"].size, dtype=bool)
    broken: list[str] = []
    opened_rows = 0
    for k in range(0, len(blocks), BLOCKS_PER_READ):
        part = blocks[k:k + BLOCKS_PER_READ]
        state = store.read([b[0] for b in part])
        for bid, attribute_id, size in part:
            block = state[bid]
            mine = placed[slots["block"][placed] == bid]
            outside[mine] = (slots["slot"][mine] >= size) | (slots["attribute"][mine] != attribute_id)
            s = np.minimum(slots["slot"][mine], block.capacity - 1)
            head[mine] = block.heads[s]
            if block.eps.size:
                highest = np.where(block.present[:, s].any(axis=0),
                                   block.eps[block.eps.size - 1 - np.argmax(block.present[::-1, s], axis=0)], 0)
                top[mine] = highest
            opened_rows += block.eps.size
            try:  # the block's rows in one query; row by row only to name the ones that do not open
                store.open_rows(attributes[attribute_id], block, range(block.eps.size))
            except sealing.SealBroken:
                for r in range(block.eps.size):
                    try:
                        store.open_rows(attributes[attribute_id], block, [r])
                    except sealing.SealBroken as exc:
                        broken.append(str(exc))
    rec.check(S, "every value's slot is within its block's size and attribute", outside, slots["id"].size,
              lambda i: f"value {slots['id'][i]}: slot {slots['slot'][i]} of block {slots['block'][i]}")
    rec.fail(S, "every chain point opens (AES-GCM, bound to its attribute, block, epsilon and bitmap)",
             opened_rows, broken)
    rec.check(S, "each chain's head is its highest stored point", (head != top) & (slots["block"] >= 0),
              placed.size, lambda i: f"value {slots['id'][i]}: head {eps_text(head[i])}, highest point "
                                     f"{eps_text(top[i])}")
    pos, found = lookup(slots["id"], budgets["value"])
    chain_loss = np.zeros(slots["id"].size, dtype=np.int64)
    chain_loss[pos[found]] = budgets["chain"][found]
    rec.check(S, "each chain covers what was sold of it: head >= chain loss",
              (slots["block"] >= 0) & (head < chain_loss), placed.size,
              lambda i: f"value {slots['id'][i]}: head {eps_text(head[i])}, chain loss {eps_text(chain_loss[i])}")
    _check_released(rec, slots, attributes)
    return {"value": slots["id"], "head": head}


def check_custody(rec: Recorder, values, final, heads) -> None:
    """Owner-held values (docs/custody.md): the ledger records the custody of exactly the values held by their
    owner, and each one's chain head is the last upload level its ledger records (0 and none before the first
    upload); a value held by the service has no upload entry."""
    pos, found = lookup(final.value, values["id"])
    held_ledger = np.zeros(values["id"].size, dtype=bool)
    held_ledger[found] = final.owner_held[pos[found]]
    upload = np.full(values["id"].size, -1, dtype=np.int64)
    upload[found] = final.upload[pos[found]]
    owner_held = values["owner_held"] == 1
    rec.check(S, "a value is held by its owner exactly when the ledger records that custody",
              owner_held != held_ledger, values["id"].size,
              lambda i: f"value {values['id'][i]}: custody {'owner' if owner_held[i] else 'service'}, the ledger "
                        f"{'records' if held_ledger[i] else 'does not record'} owner custody")
    hpos, hfound = lookup(heads["value"], values["id"])
    head = np.where(hfound, heads["head"][np.minimum(hpos, max(heads["value"].size - 1, 0))], 0) \
        if heads["value"].size else np.zeros(values["id"].size, dtype=np.int64)
    expected = np.where(upload >= 0, upload, 0)
    wrong = np.where(owner_held, head != expected, upload >= 0)
    rec.check(S, "each owner-held chain's head is the last upload level in the ledger; service-held values have no "
                 "upload", wrong, values["id"].size,
              lambda i: f"value {values['id'][i]}: head {eps_text(head[i])}, last recorded upload "
                        f"{eps_text(upload[i]) if upload[i] >= 0 else 'none'}")


def _check_released(rec: Recorder, slots, attributes) -> None:
    """Every completed chain purchase's outputs equal its values' stored points at its epsilon."""
    purchases = list(Purchase.objects.filter(status=Purchase.Status.COMPLETED, mechanism="gradual_rr")
                     .order_by("id").values_list("id", "attribute_id", "epsilon"))
    wrong: list[str] = []
    checked = 0
    for pid, attribute_id, epsilon in purchases:
        attribute = attributes[attribute_id]
        chunks = list(PurchaseChunk.objects.filter(purchase_id=pid).order_by("seq").values_list(
            "seq", "value_ids", "outputs", "value_key_id"))
        if not chunks:
            continue
        try:
            opened = [open_chunk(pid, seq, ids, out, attribute.width, key_id) for seq, ids, out, key_id in chunks]
        except sealing.SealBroken as exc:
            wrong.append(f"purchase {pid}: {exc}")
            continue
        ids = np.concatenate([o[0] for o in opened])
        sold = np.concatenate([o[1] for o in opened])
        pos, found = lookup(slots["id"], ids)
        checked += ids.size
        if not found.all():
            wrong.append(f"purchase {pid}: {int((~found).sum())} released value(s) no longer exist")
            continue
        b, s = slots["block"][pos], slots["slot"][pos]
        e = to_micro(epsilon)
        try:
            present, stored = store.grid_of_points(attribute, store.read(b), b, s, np.array([e]))
        except sealing.SealBroken as exc:
            wrong.append(f"purchase {pid}: {exc}")
            continue
        differ = ~present[:, 0] | (stored[:, 0] != sold).any(axis=1)
        if differ.any():
            wrong.append(f"purchase {pid} at epsilon {eps_text(e)}: {int(differ.sum())} released output(s) differ "
                         f"from the stored chains (first: value {ids[np.argmax(differ)]})")
    rec.fail(S, "every chain purchase's released outputs are its values' stored points at its epsilon", checked,
             wrong)
