from __future__ import annotations

import io

import pytest

from kvgate.cli import main
from routing.config.schema import GatewayConfig


def test_hash_key_prints_the_sha256_of_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("secret\n"))
    assert main(["hash-key"]) == 0
    digest = capsys.readouterr().out.strip()
    assert digest == "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    # ...which the config takes as a key's sha256
    load = {"security": {"api_keys": [{"name": "a", "sha256": digest}]}}
    assert GatewayConfig.model_validate(load).security.api_keys[0].sha256 == digest


def test_hash_key_without_a_key_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["hash-key"]) == 2
    assert "no key" in capsys.readouterr().err
