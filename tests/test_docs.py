"""The documentation lives in the repository's ``docs/`` (issue 13 item 4).

Code, commands, errors, templates and the README cite ``docs/<file>.md`` (with a ``#anchor`` or a quoted
section title), never the specification files a user of the repository does not have.  This test fails
when a tracked file outside ``docs/`` cites one of them, or cites a docs file or section that does not exist.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: The specification's file names (written split so that this file does not cite them itself).
SPEC_FILES = ["gradual-release", "uldp", "rr3", "private-sampling", "surveys", "service", "quality",
              "custody", "storage", "overview"]
SPEC_CITATION = re.compile(r"(?<![\w/.-])(?:" + "|".join(map(re.escape, SPEC_FILES)) + r")\.md\b")
SPEC_WORD = re.compile(r"\b[Ss]pec(?:'s)?\s+(?:section\b|[\w-]+\." + "md)")
SHARED = "../" + "shared"
DOCS_CITATION = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+)|,?\s+\"([^\"]+)\")?")
MD_LINK = re.compile(r"\]\(([\w-]+\.md)(?:#([\w-]+))?\)")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # pragma: no cover - not a git checkout
        pytest.skip("not a git checkout")
    files = []
    for name in out.split():
        path = ROOT / name
        if path.is_file() and path.suffix not in {".png", ".svg", ".ico", ".sqlite3"}:
            files.append(path)
    return files


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(doc: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", doc.read_text(encoding="utf-8"), re.M)]


def citations() -> list[tuple[str, str, str | None, str | None]]:
    """``(where, docs file, anchor, quoted title)`` for every citation of a docs file in tracked files."""
    found = []
    for path in tracked_files():
        text = text_of(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for m in DOCS_CITATION.finditer(text):
            title = re.sub(r"[\s#]+", " ", m.group(3)) if m.group(3) else None  # a title wrapped over lines
            found.append((rel, m.group(1), m.group(2), title))
        if rel.startswith("docs/") and rel.endswith(".md"):  # the docs' links to each other
            for m in MD_LINK.finditer(text):
                found.append((rel, m.group(1), m.group(2), None))
    return found


def test_no_tracked_file_outside_docs_cites_the_specification():
    offenders = []
    for path in tracked_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("docs/") or rel == "tests/test_docs.py":
            continue
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if SPEC_CITATION.search(line) or SPEC_WORD.search(line) or SHARED in line:
                offenders.append(f"{rel}:{number}: {line.strip()[:120]}")
    assert not offenders, "cite docs/ instead:\n" + "\n".join(offenders)


def test_every_cited_docs_file_and_section_exists():
    cited = citations()
    assert len(cited) > 50  # the code does cite the docs
    missing = []
    for where, name, anchor, title in cited:
        doc = DOCS / name
        if not doc.is_file():
            missing.append(f"{where}: docs/{name} does not exist")
            continue
        heads = headings(doc)
        if anchor and anchor not in {slug(h) for h in heads}:
            missing.append(f"{where}: docs/{name}#{anchor}: no such section")
        if title and not any(h.lower().startswith(title.lower()) for h in heads):
            missing.append(f'{where}: docs/{name}, "{title}": no such section')
    assert not missing, "\n".join(missing)


def test_the_docs_index_lists_every_docs_file():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for doc in DOCS.glob("*.md"):
        if doc.name != "README.md":
            assert f"]({doc.name})" in index, doc.name


@pytest.mark.parametrize("name, section", [
    ("architecture.md", "The path of a purchase"), ("architecture.md", "The path of a chain extension"),
    ("budget-rules.md", "Chain loss: the maximum released epsilon"), ("budget-rules.md", "One-shot losses add up"),
    ("budget-rules.md", "Bridging and tightening"), ("budget-rules.md", "The ledger"),
    ("budget-rules.md", "Checkpoints"),
    ("mechanisms-reference.md", "RR3 and the graph protocol LPP"), ("operations.md", "Beat schedule"),
    ("operations.md", "Backups"), ("operations.md", "Commands"), ("security.md", "Roles"),
])
def test_the_documentation_has_its_sections(name, section):
    assert section in headings(DOCS / name)


def test_the_slugs_follow_github():
    assert slug("RR3 and the graph protocol LPP") == "rr3-and-the-graph-protocol-lpp"
    assert slug("k-ary randomized response (k-RR)") == "k-ary-randomized-response-k-rr"
    assert slug("Chain loss: the maximum released epsilon") == "chain-loss-the-maximum-released-epsilon"
