"""No import circles: no two modules of the tree import each other, directly or through
others. Every import statement counts (top level, inside functions, under `if
TYPE_CHECKING:`), read statically; `from pkg import name` imports `pkg.name` when that is a
module, else the package `pkg` (its `__init__`)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("gateway", "routing", "scoring", "health", "adapters", "sim", "bench", "kvgate")

Graph = dict[str, set[str]]


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(node: ast.AST, package: str, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: `.` is this module's package
            parts = package.split(".")[: package.count(".") + 2 - node.level]
            base = ".".join([*parts, base] if base else parts)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            yield submodule if submodule in known else base


def import_graph(root: Path, tops: Iterable[str]) -> Graph:
    """Module → the modules of the tree it imports."""
    files = [
        path
        for top in tops
        for path in sorted((root / top).rglob("*"))
        if path.suffix in (".py", ".pyi", ".pyx")  # stubs and Cython: compiled modules
    ]
    known = {_module(path, root) for path in files}
    graph: Graph = {}
    for path in files:
        if path.suffix != ".py":
            continue
        name = _module(path, root)
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        tree = ast.parse(path.read_bytes(), str(path))
        imported = (m for node in ast.walk(tree) for m in _imports(node, package, known))
        graph[name] = {m for m in imported if m in known and m != name}
    return graph


def _reachable(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    stack = list(graph.get(start, ()))
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(graph.get(module, ()))
    return seen


def circles(graph: Graph) -> list[list[str]]:
    """The circles (strongly connected components of two or more modules), sorted."""
    reach = {module: _reachable(graph, module) for module in graph}
    found = {
        frozenset(m for m in reach[module] if module in reach.get(m, ()))
        for module in graph
        if module in reach[module]
    }
    return sorted(sorted(circle) for circle in found)


def test_the_tree_has_no_import_circle() -> None:
    graph = import_graph(REPO, ROOTS)
    assert "gateway.http.uvicorn_protocol" in graph["gateway.http.server"]  # in a function
    found = circles(graph)
    assert found == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_circles_are_found_in_a_tiny_graph() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}, "f": {"g"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({**graph, "g": {"f"}}) == [["a", "b", "c"], ["f", "g"]]


def test_every_import_statement_counts(tmp_path: Path) -> None:
    sources = {
        "__init__.py": "from pkg.a import A\n",  # a re-export
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "b.py": "def f() -> None:\n    from . import c\n",  # a submodule: not the package
        "c.py": "from pkg import A\n",  # a name: the package
        "d.py": "import pkg.c\nfrom .c import x\nimport os\n",
    }
    (tmp_path / "pkg").mkdir()
    for name, source in sources.items():
        (tmp_path / "pkg" / name).write_text(source)
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.c": {"pkg"},
        "pkg.d": {"pkg.c"},
    }
    assert circles(graph) == [["pkg", "pkg.a", "pkg.b", "pkg.c"]]
