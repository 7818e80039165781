"""The dispatcher: `kvgate --help`, `--version`, a command required, one module per command."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Callable

import pytest

from kvgate.cli import COMMANDS, build_parser, main


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out
    assert "check-config" in out
    assert "KVGATE_* environment" in out  # where the variables are named


def test_help_lists_hash_key(help_text: Callable[..., str]) -> None:
    assert "hash-key" in help_text()


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    version, compiled = capsys.readouterr().out.splitlines()
    assert version == f"kvgate {importlib.metadata.version('kvgate')}"
    assert compiled.startswith(("compiled: ", "pure Python (no C compiler or header at install): "))


def test_every_command_has_its_subparser_in_help_order() -> None:
    parser = build_parser({})
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(COMMANDS)
    assert list(COMMANDS) == [
        "serve",
        "epp",
        "emulate",
        "demo",
        "check-config",
        "hash-key",
        "sim",
        "tune",
    ]
