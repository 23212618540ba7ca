"""The command line of the generated vector files (``tests/data/*.json``): write a fresh generation, or with
``--check`` compare it with the checked-in file and write nothing."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def write_or_check(path: Path, text: str, *, doc: str, describe: Callable[[str], str], argv=None) -> int:
    """``--check``: 0 when ``path`` holds ``text`` exactly, 1 otherwise; else write it and say what it holds
    (``describe(text)``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the checked-in file, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        same = path.exists() and path.read_text() == text
        print("up to date" if same else f"{path} differs from a fresh generation")
        return 0 if same else 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}: {describe(text)}, {len(text.encode())} bytes")
    return 0
