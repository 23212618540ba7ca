"""The hash-chain check of the tests: the audit's own (``audit.hashchain``, run by ``audit_budgets``), the one check
of the ledger's hash chain in the project (``accounts.ledger`` writes the chain; the audit re-proves it)."""
from __future__ import annotations

from audit.budget_audit import audit_budgets

SECTION = "Hash chain"


def hash_chain_problems() -> list[str]:
    """Each failed check of the audit's hash-chain section with its examples; empty when the chain is intact."""
    report = audit_budgets()
    return [f"{c.name}: {example}" for c in report.failed if c.section == SECTION for example in c.examples or [""]]
