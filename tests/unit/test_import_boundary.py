"""Import boundaries: routing, scoring and the simulator core stay free of web, RPC and
metrics libraries; no part of `sim` imports the gateway and no part of the gateway `sim`
(only the command line, `kvgate`, imports both); nothing installed imports the lab
(`bench/`) or, at import time, matplotlib or Ray (optional extras)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIBRARY = ("kvgate", "gateway", "routing", "scoring", "health", "adapters", "sim")  # the wheel's
# May import both the gateway and the simulator: the command line, the lab and the tests.
COMPOSITION = frozenset({"kvgate", "bench", "tests"})

FORBIDDEN = frozenset(
    {
        "starlette",
        "fastapi",
        "uvicorn",
        "httpx",
        "httpcore",
        "grpc",
        "prometheus_client",
        "aiohttp",
        "requests",
        "h11",
        "httptools",
        "uvloop",
        "anyio",
        "opentelemetry",
    }
)

IMPORT_ALL = """
import importlib, json, pkgutil, sys
for name in ("routing", "scoring", "scoring.builtin", "routing.config.profiles", "sim.engine",
             "sim.workloads", "sim.replay"):
    importlib.import_module(name)
walked = []
for pkg in ("routing", "scoring", "sim.engine", "sim.replay"):
    for info in pkgutil.walk_packages(sys.modules[pkg].__path__, pkg + "."):
        importlib.import_module(info.name)
        walked.append(info.name)
print(json.dumps({"walked": walked, "loaded": sorted(sys.modules)}))
"""

# Every module of the given packages (`__main__` modules would run), then what got loaded.
WALK = """
import importlib, json, pkgutil, sys
walked = []
for pkg in sys.argv[1:]:
    for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
        if not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
            walked.append(info.name)
print(json.dumps({"walked": walked, "loaded": sorted(sys.modules)}))
"""

IMPORT_ROUTING = """
import json, sys
before = set(sys.modules)
import routing
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _run(code: str, *args: str) -> object:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _top_level(names: object) -> set[str]:
    assert isinstance(names, list)
    return {name.split(".")[0] for name in names}


def _imported_packages(path: Path) -> set[str]:
    """The top-level packages a source file imports anywhere (in functions and
    `TYPE_CHECKING` blocks too); relative imports stay inside their own package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def _imports_by_package() -> dict[str, set[str]]:
    """Each top-level package of the repository -> what its files import."""
    packages: dict[str, set[str]] = {}
    for init in sorted(REPO.glob("*/__init__.py")):
        package = init.parent
        packages[package.name] = set().union(
            *(_imported_packages(path) for path in package.rglob("*.py"))
        )
    return packages


def test_routing_and_scoring_load_no_web_library() -> None:
    result = _run(IMPORT_ALL)
    assert isinstance(result, dict)
    # The walk really visited the plugin modules (else the check below proves nothing).
    walked = set(result["walked"])
    assert {"routing.scheduler", "scoring.pickers.round_robin", "sim.engine.model"} <= walked
    assert {"sim.replay.simulator", "sim.replay.cli", "sim.replay.sweep.ray_runner"} <= walked
    assert sorted(_top_level(result["loaded"]) & (FORBIDDEN | {"ray"})) == []
    assert "gateway" not in _top_level(result["loaded"])  # the simulator reuses no gateway code


def test_routing_loads_only_the_standard_library() -> None:
    new = _top_level(_run(IMPORT_ROUTING))
    assert "routing" in new
    # A compiled module (`routing.columns_native`) registers Cython's own runtime modules
    # (`_cython_3_x`, `cython_runtime`): part of the extension, not an installed package.
    third_party = sorted(
        n for n in new - set(sys.stdlib_module_names) - {"routing"} if "cython" not in n
    )
    assert third_party == []


def test_no_part_of_sim_imports_the_gateway() -> None:
    result = _run(WALK, "sim")
    assert isinstance(result, dict)
    assert {"sim.live.experiment", "sim.demo", "sim.emulator.server"} <= set(result["walked"])
    assert "gateway" not in _top_level(result["loaded"])


def test_no_part_of_the_gateway_loads_sim() -> None:
    result = _run(WALK, "gateway")
    assert isinstance(result, dict)
    assert {"gateway.app", "gateway.serve", "gateway.recorder"} <= set(result["walked"])
    assert "sim" not in _top_level(result["loaded"])


def test_no_gateway_file_imports_sim() -> None:
    files = sorted((REPO / "gateway").rglob("*.py"))
    assert len(files) > 50  # else the check proves nothing
    offenders = [str(p.relative_to(REPO)) for p in files if "sim" in _imported_packages(p)]
    assert offenders == []


def test_only_the_command_line_imports_both_the_gateway_and_sim() -> None:
    packages = _imports_by_package()
    assert {"gateway", "sim"} <= packages["kvgate"]  # else the check proves nothing
    both = sorted(
        name
        for name, imported in packages.items()
        if {"gateway", "sim"} <= imported | {name} and name not in COMPOSITION
    )
    assert both == []


def test_the_installed_packages_import_neither_the_lab_nor_matplotlib() -> None:
    result = _run(WALK, *LIBRARY)
    assert isinstance(result, dict)
    assert {"kvgate.cli.serve", "sim.live.experiment", "sim.replay.sweep.report"} <= set(
        result["walked"]
    )
    loaded = _top_level(result["loaded"])
    assert "bench" not in loaded
    assert "matplotlib" not in loaded  # plotting functions import it when they draw
    assert "ray" not in loaded  # `kvgate sim sweep --ray` imports it when it runs


def test_pod_discovery_loads_no_web_library_but_its_http_client() -> None:
    result = _run(WALK, "health.discovery")
    assert isinstance(result, dict)
    assert "health.discovery.pool_watch" in result["walked"]
    client = {"httpx", "httpcore", "h11", "anyio"}  # httpx and what it brings
    assert _top_level(result["loaded"]) & (FORBIDDEN - client) == set()
    assert not any(name.startswith("gateway") for name in result["loaded"])
