"""The documentation site's sources: generated reference pages current, every nav entry a
page, the README short, and no lab-notebook leftovers (machine paths, issue numbers)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Paths of one machine or one checkout's surroundings, and references to an issue tracker
# the reader cannot see: the docs say `traces/...`, `python -m bench`, a decision record.
LEFTOVERS = re.compile(
    r"/work/|\.\./shared/|shared/traces|\b[Ii]ssue #?\d+|\bbench(mark)? lock\b"
    r"|\.venv/bin/(?!activate)"
)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "gen" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["cli.md", "config.md", "plugins.md"])
def test_the_generated_reference_pages_are_current(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    rendered = _generator().PAGES[name]().rstrip() + "\n"
    committed = (DOCS / "reference" / name).read_text(encoding="utf-8")
    assert committed == rendered, f"docs/reference/{name} is stale: python docs/gen/reference.py"


def test_every_nav_entry_is_a_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [p for item in nav for p in pages(item)]
        if isinstance(nav, dict):
            return [p for value in nav.values() for p in pages(value)]
        return []

    listed = pages(config["nav"])
    assert len(listed) > 20
    assert [p for p in listed if not (DOCS / p).is_file()] == []


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_no_machine_paths_or_issue_numbers_in_the_docs() -> None:
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if LEFTOVERS.search(line)
    ]
    assert found == []
