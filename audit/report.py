"""The budget audit's report: checks grouped in sections, as text (the command, the console) and as JSON.

A check records how many rows it examined, how many violate it and the first few offending rows in words
(:class:`Recorder`); the formatting helpers below write exact epsilons, money with its currency and times.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from accounts.epsilon import from_micro
from accounts.ledger import hashchain as ledger
from accounts.money.format import format_money
from accounts.money.units import units_to_decimal

from .codes import GUARANTEES, MECHANISMS, STATUSES

SECTIONS = ("Hash chain", "Checkpoints", "Budget replay", "Budgets and values", "Chains", "Keys", "Purchases",
            "Money")

@dataclass
class Check:
    section: str
    name: str
    checked: int
    failures: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failures == 0

    @property
    def status(self) -> str:
        return "PASS" if self.ok else "FAIL"


@dataclass
class AuditReport:
    checks: list[Check]
    stats: dict
    head_hash: str | None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def sections(self) -> list[tuple[str, str, list[Check]]]:
        out = []
        for name in SECTIONS:
            checks = [c for c in self.checks if c.section == name]
            if checks:
                out.append((name, "PASS" if all(c.ok for c in checks) else "FAIL", checks))
        return out

    def as_dict(self) -> dict:
        return {"ok": self.ok, "head_hash": self.head_hash, "seconds": round(self.seconds, 3), "stats": self.stats,
                "checks": [{"section": c.section, "name": c.name, "status": c.status, "checked": c.checked,
                            "failures": c.failures, "examples": c.examples} for c in self.checks]}

    def as_text(self) -> str:
        lines = ["Budget audit (docs/budget-rules.md#budgets-and-ceilings)",
                 "  " + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in self.stats.items()),
                 f"  ledger head: {self.head_hash or '(empty ledger)'}", ""]
        for name, status, checks in self.sections():
            lines.append(f"[{status}] {name}")
            for c in checks:
                if c.ok:
                    lines.append(f"    PASS  {c.name} ({c.checked} checked)")
                else:
                    lines.append(f"    FAIL  {c.name}: {c.failures} of {c.checked} violate it")
                    lines += [f"            - {x}" for x in c.examples]
            lines.append("")
        failed = self.failed
        lines.append(f"RESULT: {'PASS' if not failed else 'FAIL'} -- {len(self.checks) - len(failed)} of "
                     f"{len(self.checks)} checks pass ({self.seconds:.2f} s)")
        return "\n".join(lines)


class Recorder:
    def __init__(self, examples: int):
        self.examples = examples
        self.checks: list[Check] = []

    def check(self, section: str, name: str, bad: np.ndarray | None, checked: int, describe=None) -> None:
        """Record a check: ``bad`` masks (or indexes) the violating rows; ``describe(i)`` explains one."""
        if bad is None:
            idx = np.zeros(0, dtype=np.int64)
        else:
            bad = np.asarray(bad)
            idx = np.flatnonzero(bad) if bad.dtype == bool else bad.astype(np.int64)
        c = Check(section, name, int(checked), int(idx.size))
        if describe is not None:
            c.examples = [describe(int(i)) for i in idx[:self.examples]]
        self.checks.append(c)

    def fail(self, section: str, name: str, checked: int, messages: list[str]) -> None:
        c = Check(section, name, checked, len(messages), messages[:self.examples])
        self.checks.append(c)


def eps_text(v: int) -> str:
    return "null" if v < 0 else str(from_micro(int(v)))


def money_text(v: int) -> str:
    """An amount in ten-thousandths as people read it, with the currency (docs/money.md#how-amounts-are-shown)."""
    return format_money(units_to_decimal(int(v)))


def status_text(code: int) -> str:
    return STATUSES[code] if 0 <= code < len(STATUSES) else "?"


def when_text(us: int) -> str:
    if us < 0:
        return "null"
    return ledger._dt(int(us)).isoformat()



def mechanism_text(code: int) -> str:
    return MECHANISMS[code] if 0 <= code < len(MECHANISMS) else "?"


def guarantee_text(code: int) -> str:
    return (GUARANTEES[code] or "none") if 0 <= code < len(GUARANTEES) else "?"



def report_json(report) -> str:
    """A report (budget or privacy audit) as indented JSON."""
    return json.dumps(report.as_dict(), indent=2, default=str)
