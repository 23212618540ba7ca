"""The integer codes the budget audit reads columns as (``audit.sql.code``): one list per coded column.

Each list's index is the code; a value outside a list reads as -2 (``audit.sql.code``), which every check treats
as wrong.  The mechanism table (:data:`MECHANISMS` ... :data:`MECHANISM_GUARANTEE`) at the end derives from the
mechanism registry: which mechanisms exist and what each guarantees.
"""
from __future__ import annotations

import numpy as np

from accounts.ledger import hashchain
from accounts.models import LedgerEntry, MoneyAccount, MoneyEntry, PayoutRequest
from mechanisms import registry

KINDS = list(LedgerEntry.Kind.values)
K_CHAIN, K_ONESHOT, K_CEILING, K_SCHEDULE, K_PAUSE, K_RESUME, K_RAW, K_HELD, K_UPLOAD = (KINDS.index(k) for k in (
    "chain_release", "oneshot_release", "ceiling", "schedule", "pause", "resume", "raw_deleted", "owner_custody",
    "owner_upload"))
SHAPES = hashchain.SHAPES  # "", "linear", "steps"

ACCOUNT_KINDS = list(MoneyAccount.Kind.values)  # buyer_credit, owner_earnings, platform, owners_pending
A_BUYER, A_OWNER, A_PLATFORM, A_PENDING = (ACCOUNT_KINDS.index(k) for k in (
    "buyer_credit", "owner_earnings", "platform", "owners_pending"))
MONEY_KINDS = list(MoneyEntry.Kind.values)  # topup, purchase, earning, settlement, payout, fee, adjustment
M_TOPUP, M_PURCHASE, M_EARNING, M_SETTLEMENT, M_PAYOUT, M_FEE, M_ADJUST = (MONEY_KINDS.index(k) for k in (
    "topup", "purchase", "earning", "settlement", "payout", "fee", "adjustment"))
PAYOUT_STATUSES = list(PayoutRequest.Status.values)  # requested, settled, rejected
P_REJECTED = PAYOUT_STATUSES.index("rejected")
STATUSES = ["pending", "running", "completed", "failed"]
S_COMPLETED = STATUSES.index("completed")
GUARANTEES = hashchain.GUARANTEES  # "", "ldp", "uldp", "per_report_non_collusion"
G_NONE, G_LDP, G_ULDP, G_PER_REPORT = range(4)

# ------------------------------------------------------------------------------------------- the mechanisms
# From the mechanism registry (mechanisms.registry, docs/mechanisms.md#the-mechanism-registry): a mechanism's code
# here is its record's ``number``.

MECHANISMS = [r.code for r in registry.RECORDS]
MECH_GRADUAL = registry.GRADUAL_RR.number
SURVEYS = [r.number for r in registry.RECORDS if r.is_survey]
#: The guarantee each mechanism's releases carry (index by mechanism code; chains also allow ldp).
MECHANISM_GUARANTEE = np.array([GUARANTEES.index(r.guarantee) for r in registry.RECORDS])
