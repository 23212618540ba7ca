"""The layers of docs/architecture.md#layers hold: the import-linter contracts pass and name every module, no
module reaches itself through imports, and an import inside a function says why it is there."""
from __future__ import annotations

import ast
import configparser
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".importlinter"
PACKAGES = ("mechanisms", "ldpmarket", "accounts", "market", "audit", "portal", "buyer_portal")
#: Apps whose every module must sit in a layer of the layers contract (``ldpmarket`` and ``mechanisms`` have
#: contracts of their own).
LAYERED = ("accounts", "market", "audit", "portal", "buyer_portal")
#: Modules outside the layers: Django's app configs and package markers.
UNLAYERED_NAMES = ("apps", "__init__")
#: The only modules that ask which database they are on (docs/architecture.md#storage): the storage plumbing and
#: the audit's own dialect SQL (migrations are not scanned).
DIALECT_MODULES = ("ldpmarket/storage.py", "audit/sql.py")
#: Asking which database: a connection's ``vendor``, or reaching into Django's PostgreSQL backend.
DIALECT_QUESTION = re.compile(r"\.vendor\b|backends\.postgresql")


def _source_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if "migrations" not in p.parts]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _dialect_questions(paths, root: Path = ROOT) -> list[str]:
    return [f"{path.relative_to(root)}:{i}: {line.strip()}" for path in paths
            for i, line in enumerate(path.read_text().splitlines(), 1) if DIALECT_QUESTION.search(line)]


def test_one_storage_module():
    """Only ``ldpmarket.storage`` (and the audit's ``audit.sql``) ask which database they are on: every other
    module calls their dialect-neutral operations, so no app holds a PostgreSQL/SQLite branch of its own."""
    others = [p for p in _source_files() if p.relative_to(ROOT).as_posix() not in DIALECT_MODULES]
    found = _dialect_questions(others)
    assert not found, "dialect branches outside ldpmarket/storage.py and audit/sql.py:\n" + "\n".join(found)
    # not vacuous: the scan finds the storage module's own question
    assert any("connection.vendor" in f for f in _dialect_questions([ROOT / "ldpmarket" / "storage.py"]))


def test_the_import_linter_contracts_hold():
    """Every contract of .importlinter holds (``make test`` also runs ``lint-imports`` first)."""
    run = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--config", str(CONFIG), "--no-cache"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_every_module_of_the_apps_is_in_a_layer():
    """A module the layers contract does not name would be checked by nothing: each is named, or a package
    that holds it is."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    layers = parser["importlinter:contract:layers"]["layers"]
    named = {m.strip() for line in layers.splitlines() for m in line.replace("|", ":").split(":") if m.strip()}
    missing = []
    for path in _source_files():
        module = _module(path)
        if module.split(".")[0] not in LAYERED or module.rsplit(".", 1)[-1] in UNLAYERED_NAMES:
            continue
        parts = module.split(".")
        if not any(".".join(parts[:i]) in named for i in range(1, len(parts) + 1)):
            missing.append(module)
    assert not missing, f"modules in no layer of .importlinter: {missing}"


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_no_module_imports_itself_through_others(graph):
    """For every direct import a -> b, no chain of imports leads from b back to a (imports inside functions
    count too): the module graph has no cycle."""
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if importer.startswith(imported + ".") or imported.startswith(importer + "."):
                continue  # a package and its own submodules
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                cycles.append(" -> ".join((importer, *back)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_storage_module_is_plumbing(graph):
    """``ldpmarket.storage`` imports, of the project, ``ldpmarket.pgbinary`` only (and nothing that imports it
    back): any app may call it."""
    assert graph.find_modules_directly_imported_by("ldpmarket.storage") == {"ldpmarket.pgbinary"}


def _bare_function_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Imports inside a function with no comment on their line or on the lines just above their group."""
    lines = path.read_text().splitlines()
    bare = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            if not isinstance(sub, (ast.Import, ast.ImportFrom)):
                continue
            i = sub.lineno - 1
            if "#" in lines[i]:
                continue
            j = i - 1  # walk up over the imports of the same group (and blank lines) to the comment above
            while j >= 0 and (lines[j].strip().startswith(("from ", "import ")) or not lines[j].strip()
                              or lines[j].rstrip().endswith((",", "(")) or lines[j].strip().endswith(")")):
                if "#" in lines[j]:
                    break
                j -= 1
            if j < 0 or "#" not in lines[j]:
                bare.append(f"{path.relative_to(root)}:{sub.lineno}: {lines[i].strip()}")
    return bare


def test_an_import_inside_a_function_says_why():
    """Imports belong at the top of a module; one that must wait (Django's app registry, DRF's settings, a heavy
    optional library) carries a comment saying why."""
    bare = [b for path in _source_files() for b in _bare_function_imports(path)]
    assert not bare, "imports inside functions without a comment:\n" + "\n".join(sorted(set(bare)))


def test_the_function_import_check_finds_a_bare_import(tmp_path):
    """The check above is not vacuous: a bare import inside a function is reported, a commented one is not."""
    (tmp_path / "m.py").write_text("def f():\n    import json\n    return json\n\n\n"
                                   "def g():\n    # late: heavy\n    import csv\n    return csv\n")
    assert _bare_function_imports(tmp_path / "m.py", tmp_path) == ["m.py:2: import json"]


@pytest.mark.parametrize("module, injected, broken", [
    ("market/chains/grow.py", "import audit.hashchain", "market imports neither audit nor portal"),
    ("market/api/views.py", "import portal.views", "market imports neither audit nor portal"),
    ("market/admin.py", "import accounts.admin", "interfaces (independent of each other)"),
    ("audit/api.py", "import market.api.owner", "interfaces (independent of each other)"),
    ("buyer_portal/views.py", "import portal.views", "interfaces (independent of each other)"),
    ("market/selectors.py", "import buyer_portal.views", "market imports neither audit nor portal"),
])
def test_the_contracts_refuse_what_the_docs_forbid(tmp_path, module, injected, broken):
    """Mutation check of the contracts (issue 28): a copy of the code with one forbidden import added breaks the
    contract that forbids it.  Before the independent interfaces and the market contract, each of these kept all
    five contracts."""
    import shutil

    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "static",
                                                                                         "templates"))
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{injected}  # injected by the test\n")
    run = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(tmp_path),
                                                                           "PATH": "/usr/bin:/bin"})
    assert run.returncode != 0, run.stdout[-3000:]
    out = " ".join(run.stdout.split())
    assert f"{broken}" in out and "BROKEN" in out, out[-3000:]
