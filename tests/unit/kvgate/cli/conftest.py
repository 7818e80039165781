from __future__ import annotations

from collections.abc import Callable

import pytest

from kvgate.cli import main


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    # argparse breaks long lines at hyphens ("round-\nrobin"): no wrapping, no broken names.
    monkeypatch.setenv("COLUMNS", "1000")


@pytest.fixture
def help_text(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """`kvgate ARGV --help` as one line of single spaces (argparse wraps at the terminal)."""

    def run(*argv: str) -> str:
        with pytest.raises(SystemExit) as info:
            main([*argv, "--help"])
        assert info.value.code == 0
        return " ".join(capsys.readouterr().out.split())

    return run
