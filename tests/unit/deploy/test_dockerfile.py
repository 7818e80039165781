"""deploy/Dockerfile checked against the repository (no `docker build` here): every COPY
source exists in the build context (the repository root), the wheel it builds holds every
installed package, it runs as a non-root user, and its ENTRYPOINT/CMD name the `kvgate`
console script and a command line kvgate's own parser accepts; it compiles the extensions and
installs the extras the manifests need (tests/integration/test_image_install.py, marked slow,
installs the same way and starts every container command)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

from kvgate.cli import build_parser

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "deploy" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.strip().startswith("#") and not pending:
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if line.endswith("\\") or not pending:
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def test_copy_sources_exist_in_the_build_context() -> None:
    copies = [args for word, args in instructions() if word == "COPY"]
    assert copies
    for args in copies:
        parts = shlex.split(args)
        if any(p.startswith("--from=") for p in parts):
            continue  # from an earlier stage, not the context
        for source in [p for p in parts if not p.startswith("--")][:-1]:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"


def test_the_packages_the_wheel_holds_are_all_copied() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {
        shlex.split(args)[0]
        for word, args in instructions()
        if word == "COPY" and "--from" not in args
    }
    assert {p.rstrip("*") for p in packages} <= copied
    assert project["project"]["readme"] in {
        s for word, args in instructions() if word == "COPY" for s in shlex.split(args)
    }


def test_it_builds_in_one_stage_and_runs_as_non_root_in_another() -> None:
    steps = instructions()
    stages = [args for word, args in steps if word == "FROM"]
    assert len(stages) >= 2
    last_stage = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    users = [args for word, args in steps[last_stage:] if word == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


def test_entrypoint_is_the_kvgate_script_and_cmd_a_real_command_line() -> None:
    steps = dict(instructions())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    entrypoint = _exec_form(steps["ENTRYPOINT"])
    assert entrypoint == ["kvgate"]
    assert "kvgate" in project["project"]["scripts"]
    cmd = _exec_form(steps["CMD"])
    args = build_parser().parse_args(cmd)  # an unknown command or flag fails the test here
    assert args.command == "serve"
    assert args.host == "0.0.0.0"  # reachable from outside the container
    exposed = {int(p) for p in steps["EXPOSE"].split()}
    assert args.port in exposed


def _extras(spec_pattern: str) -> set[str]:
    """The extras of the one RUN line that names `spec_pattern`'s requirement."""
    runs = [args for word, args in instructions() if word == "RUN" and spec_pattern in args]
    [run] = runs
    match = re.search(re.escape(spec_pattern) + r"\[([a-z,]+)\]", run)
    assert match is not None, run
    return set(match.group(1).split(","))


def test_the_build_compiles_the_extensions_and_installs_what_the_manifests_run() -> None:
    copied = {s for word, args in instructions() if word == "COPY" for s in shlex.split(args)}
    assert "setup.py" in copied  # without it the Cython extensions are never built
    assert "KVGATE_REQUIRE_NATIVE=1" in [args for word, args in instructions() if word == "ENV"]
    built, installed = _extras('".'), _extras('"kvgate')
    assert built == installed
    # `kvgate epp` needs epp; tracing (OTEL_*) and local tokenizers are config-driven.
    assert {"epp", "otel", "tokens"} <= installed
    final = max(i for i, (word, _) in enumerate(instructions()) if word == "FROM")
    [install] = [a for w, a in instructions()[final:] if w == "RUN" and "pip install" in a]
    assert "--no-index" in install  # the wheels built in stage 1, nothing fetched or compiled
