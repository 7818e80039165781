from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main

REFERENCE = Path(__file__).resolve().parents[4] / "deploy" / "kvgate.yaml"


def test_check_config_bad_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("upstream:\n  max_attempts: 0\nbackends:\n  - url: http://h:1\n")
    assert main(["check-config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("kvgate: ")
    assert "upstream.max_attempts" in err


def test_check_config_missing_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_check_config_without_backends_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("server:\n  port: 1\n")
    assert main(["check-config", str(path)]) == 2
    assert "no backends configured" in capsys.readouterr().err


def test_check_config_reference_file_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(REFERENCE)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    printed = json.loads(out)
    assert [b["id"] for b in printed["backends"]] == ["replica-1", None]
    assert printed["upstream"]["max_attempts"] == 2


def test_check_config_rejects_an_unreachable_port_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 15, defect 8: port 99999 passed check-config and crashed serve.
    path = tmp_path / "bad.yaml"
    path.write_text("backends:\n  - url: http://127.0.0.1:99999\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "backends.0.url" in err and "1-65535" in err
