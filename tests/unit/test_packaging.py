"""What `pip install kvgate` installs: the library, not the lab, and no plotting stack."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[2]
LIBRARY = ("kvgate", "gateway", "routing", "scoring", "health", "adapters", "sim")


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def installed_packages() -> set[str]:
    """The packages setuptools puts in the wheel, with the project's own `find` settings."""
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    return set(find_packages(str(REPO), include=find["include"], exclude=find.get("exclude", ())))


def test_the_wheel_holds_the_library_packages() -> None:
    packages = installed_packages()
    assert set(LIBRARY) <= packages
    assert {"sim.engine", "sim.replay", "sim.live", "sim.workloads", "sim.emulator"} <= packages
    assert "kvgate.cli" in packages


def test_the_wheel_claims_exactly_the_library_top_level_names() -> None:
    # Generic names (decision 0029): nothing beyond these seven may reach site-packages.
    assert {p.split(".")[0] for p in installed_packages()} == set(LIBRARY)


def test_the_lab_and_the_tests_are_not_installed() -> None:
    packages = installed_packages()
    assert (REPO / "bench" / "__init__.py").is_file()  # else the check proves nothing
    assert sorted(p for p in packages if p.split(".")[0] in ("bench", "tests")) == []


def test_matplotlib_comes_only_with_the_plots_extra() -> None:
    project = _pyproject()["project"]
    assert not [d for d in project["dependencies"] if d.startswith("matplotlib")]
    assert [d.split(">")[0] for d in project["optional-dependencies"]["plots"]] == ["matplotlib"]


def test_the_lab_is_type_checked_with_the_library() -> None:
    assert set(_pyproject()["tool"]["mypy"]["packages"]) == {*LIBRARY, "bench"}


def test_the_sdist_carries_the_cython_sources() -> None:
    # `python -m build` builds the wheel from the sdist: a .pyx left out fails that build.
    manifest = (REPO / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    found = (p.relative_to(REPO).parts for p in REPO.glob("*/**/*.pyx"))
    # The project's own sources: not a virtual environment's or a build's in the checkout.
    sources = sorted({parts[0] for parts in found if parts[0] in LIBRARY})
    assert sources and all(f"recursive-include {top} *.pyx" in manifest for top in sources)
    # A .pxd one module shares with another (`cimport`) is a source of that build, too.
    shared = (p.relative_to(REPO).parts for p in REPO.glob("*/**/*.pxd"))
    tops = sorted({parts[0] for parts in shared if parts[0] in LIBRARY})
    assert all(f"recursive-include {top} *.pxd" in manifest for top in tops)
