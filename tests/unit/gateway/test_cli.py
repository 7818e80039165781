from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import _effective_config, _parser, main
from gateway.config import ConfigError, GatewayConfig, load_config

REFERENCE = Path(__file__).resolve().parents[3] / "deploy" / "kvgate.yaml"

FILE_CONFIG = """\
server:
  host: 0.0.0.0
  port: 9000
  max_body_bytes: 1024
backends:
  - url: http://10.0.0.1:8000
    id: from-file
routing:
  policy: round-robin
"""


def _serve(*argv: str) -> GatewayConfig:
    return _effective_config(_parser().parse_args(["serve", *argv]))


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "kvgate.yaml"
    path.write_text(FILE_CONFIG)
    return path


def test_file_alone(config_file: Path) -> None:
    cfg = _serve("--config", str(config_file))
    assert (cfg.server.host, cfg.server.port, cfg.server.max_body_bytes) == ("0.0.0.0", 9000, 1024)
    assert [b.id for b in cfg.backends] == ["from-file"]
    assert cfg.routing.policy == "round-robin"


def test_backend_flags_are_appended_to_the_files_backends(config_file: Path) -> None:
    cfg = _serve(
        "--config",
        str(config_file),
        "--backend",
        "http://10.0.0.2:8000/,engine=sglang,models=a|b,id=gpu-2",
        "--backend",
        "http://10.0.0.3:8000",
    )
    assert [b.url for b in cfg.backends] == [
        "http://10.0.0.1:8000",
        "http://10.0.0.2:8000",
        "http://10.0.0.3:8000",
    ]
    assert [b.id for b in cfg.backends] == ["from-file", "gpu-2", None]
    assert (cfg.backends[1].engine, cfg.backends[1].models) == ("sglang", ["a", "b"])


def test_host_port_and_policy_override_the_file(config_file: Path) -> None:
    cfg = _serve(
        "--config", str(config_file), "--host", "::1", "--port", "0", "--policy", "session"
    )
    assert (cfg.server.host, cfg.server.port) == ("::1", 0)
    assert cfg.routing.policy == "session"
    assert cfg.server.max_body_bytes == 1024  # the rest of the section is kept


def test_flags_without_a_file_start_from_the_defaults() -> None:
    cfg = _serve("--backend", "http://127.0.0.1:8001", "--port", "8080")
    assert [b.url for b in cfg.backends] == ["http://127.0.0.1:8001"]
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 8080)
    assert cfg.routing.policy == "prefix-aware"
    assert cfg.upstream == GatewayConfig().upstream


def test_overrides_keep_user_profiles_valid() -> None:
    # The reference file has a user profile with a picker; re-validating the merged config
    # must not trip over fields the file never set (e.g. a picker's default weight).
    cfg = _serve("--config", str(REFERENCE), "--policy", "sticky-sessions", "--port", "1")
    assert cfg.routing.policy == "sticky-sessions"
    assert cfg.routing.profiles == load_config(REFERENCE).routing.profiles
    assert cfg.backends == load_config(REFERENCE).backends


def test_unknown_policy_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"'nope' is not a profile \(available: .*session"):
        _serve("--backend", "http://127.0.0.1:8001", "--policy", "nope")


def test_bad_backend_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="url"):
        _serve("--backend", "127.0.0.1:8001")


def test_out_of_range_port_flag_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"command line: .*\n  server\.port:"):
        _serve("--port", "70000")


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


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out
    assert "check-config" in out


def test_serve_help_documents_the_backend_syntax(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--backend" in out
    assert "engine=vllm|sglang|trtllm|openai" in out


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err
