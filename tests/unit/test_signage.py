"""Signage, not history: every module docstring states its contract in at most 15 lines.

The story of how a module got there lives in docs/decisions/; a module keeps a one-line pointer.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = ("gateway", "routing", "scoring", "health", "adapters", "sim", "bench", "kvgate")
MAX_LINES = 15


def _docstring_lines() -> dict[str, int]:
    """Each module's path (from the repository root) → its docstring's line count (0: none)."""
    counts: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            doc = ast.get_docstring(tree, clean=False) or ""
            counts[path.relative_to(ROOT).as_posix()] = len(doc.splitlines())
    return counts


def test_module_docstrings_are_at_most_15_lines() -> None:
    counts = _docstring_lines()
    assert len(counts) > 300, f"found only {len(counts)} modules under {ROOT}"
    offenders = sorted(
        ((n, path) for path, n in counts.items() if n > MAX_LINES), key=lambda t: (-t[0], t[1])
    )
    listing = "\n".join(f"  {n} lines: {path}" for n, path in offenders)
    assert not offenders, f"module docstrings over {MAX_LINES} lines:\n{listing}"
