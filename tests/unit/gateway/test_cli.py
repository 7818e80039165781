from __future__ import annotations

import importlib.metadata
import io
import json
from pathlib import Path

import pytest

from gateway.cli import ListenError, _effective_config, build_parser, check_admin_port, main
from routing.config.profiles import BUILTIN_PROFILES, RoutingSection
from routing.config.schema import ConfigError, GatewayConfig, load_config
from routing.traces.load import FORMATS
from sim.demo import DEMO_POLICIES
from sim.emulator.lora import LoraSettings
from sim.engine.profiles import PROFILES
from sim.replay import cli as replay_cli
from sim.replay import sweep

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
    return _effective_config(build_parser().parse_args(["serve", *argv]))


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


def test_redis_flag_shares_state_through_that_server(config_file: Path) -> None:
    assert _serve("--config", str(config_file)).state.backend == "memory"
    cfg = _serve("--config", str(config_file), "--redis", "redis://10.0.0.9:6380/1")
    assert (cfg.state.backend, cfg.state.url) == ("redis", "redis://10.0.0.9:6380/1")
    assert cfg.state.namespace == "kvgate"


def test_bad_redis_flag_is_a_config_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"state\.url: Value error, must start with redis://"):
        _serve("--backend", "http://127.0.0.1:8001", "--redis", "http://10.0.0.9:6379")


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
    assert "KVGATE_* environment" in out  # where the variables are named


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


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """`kvgate ARGV --help` as one line of single spaces (argparse wraps at the terminal)."""
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    # argparse breaks long lines at hyphens ("round-\nrobin"): no wrapping, no broken names.
    monkeypatch.setenv("COLUMNS", "1000")


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"kvgate {importlib.metadata.version('kvgate')}\n"


def test_serve_policy_help_lists_every_builtin_profile_and_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _help(capsys, "serve")
    policy_help = out.split("options:", 1)[1].split("--policy NAME", 1)[1].split("--host", 1)[0]
    for name in BUILTIN_PROFILES:
        assert name in policy_help
    assert f"else {RoutingSection().policy})" in policy_help


def test_serve_help_quotes_the_backend_example_with_a_pipe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _help(capsys, "serve")
    assert "'http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5'" in out


def test_emulate_help_lists_every_engine_profile_below(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, "emulate")
    assert "(default demo; see below)" in out
    below = out.split("engine profiles (--profile):", 1)[1]
    for profile in PROFILES.values():
        assert f"{profile.name} {' '.join(profile.description.split())}" in below


def test_help_defaults_are_the_commands_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert f"as vLLM's flag (default {LoraSettings().max_loras})" in _help(capsys, "emulate")
    assert f"(default: {','.join(DEMO_POLICIES)})" in _help(capsys, "demo")
    sim_help = _help(capsys, "sim")
    assert f"(default {replay_cli.DEFAULT_PROFILE})" in sim_help
    assert f"(default: {','.join(replay_cli.DEFAULT_POLICIES)})" in sim_help
    assert f"trace format: {', '.join(FORMATS)}" in sim_help
    sweep_help = _help(capsys, "sim", "sweep")
    assert f"(default {sweep.DEFAULT_POLICIES})" in sweep_help
    assert f"(default {sweep.DEFAULT_OBJECTIVE})" in sweep_help


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "65535", "--replicas", "2"], "replica ports 65535-65536 out of 0-65535"),
        (["--port", "-1"], "out of 0-65535"),
        (["--tokenizer", "/nonexistent/tokenizer.json"], "no such file"),
        (["--profile", "nope"], "unknown engine profile 'nope'; known: "),
        (["--replicas", "0"], "--replicas must be >= 1"),
        (["--lora", "a", "a"], "duplicate LoRA adapter names"),
        (["--lora", "a", "--max-loras", "0"], "max_loras must be >= 1"),
        (["--model", "m", "--lora", "m"], "'m' is the served model's own name"),
        (["--kv-events-replay-port", "7000"], "--kv-events-replay-port needs --kv-events-port"),
        (["--kv-events-port", "65534", "--replicas", "2"], "ports 65534-65537 out of 0-65535"),
        (["--kv-events-port", "-1"], "--kv-events-port: ports -1"),
        (["--kv-events-port", "0", "--kv-events-replay-port", "7000"], "both 0"),
        (
            ["--port", "7000", "--replicas", "2", "--kv-events-port", "7001"],
            "ranges overlap",
        ),
    ],
)
def test_emulate_bad_arguments_exit_2_before_listening(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["emulate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvgate: ") and message in err
    assert err.count("\n") == 1


def test_epp_help_shows_the_reference_ports(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, "epp")
    for flag, port in (("--grpc-port", 9002), ("--health-port", 9003), ("--metrics-port", 9090)):
        assert flag in out and f"(default {port})" in out
    assert "x-gateway-destination-endpoint" in out


def test_epp_takes_the_pool_to_watch() -> None:
    argv = ["epp", "--pool", "llama", "--namespace", "ml", "--kube-api", "http://127.0.0.1:1"]
    d = _effective_config(build_parser().parse_args(argv)).discovery
    assert (d.pool, d.namespace, d.kube_api) == ("llama", "ml", "http://127.0.0.1:1")


def test_check_config_rejects_an_unreachable_port_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 15, defect 8: port 99999 passed check-config and crashed serve.
    path = tmp_path / "bad.yaml"
    path.write_text("backends:\n  - url: http://127.0.0.1:99999\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "backends.0.url" in err and "1-65535" in err


def test_serve_rejects_a_bad_backend_flag_before_starting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--backend", "http://127.0.0.1:99999"]) == 2
    assert "url: Value error, port in '127.0.0.1:99999'" in capsys.readouterr().err


# -- security: hash-key and --admin-port ----------------------------------------------------


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


def test_admin_port_flag_sets_the_config() -> None:
    assert _serve().server.admin_port is None
    assert _serve("--admin-port", "9100").server.admin_port == 9100


def test_admin_port_equal_to_the_api_port_is_refused() -> None:
    with pytest.raises(ListenError, match=r"admin_port 8123 is server\.port"):
        check_admin_port(_serve("--port", "8123", "--admin-port", "8123"))


def test_help_lists_hash_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert "hash-key" in _help(capsys)
    assert "--admin-port" in _help(capsys, "serve")


def test_workers_come_from_the_flag_or_kvgate_workers_and_default_to_one() -> None:
    def parse(env: dict[str, str], *argv: str) -> int:
        return int(build_parser(env).parse_args(["serve", *argv]).workers)

    assert parse({}) == 1
    assert parse({"KVGATE_WORKERS": "4"}) == 4
    assert parse({"KVGATE_WORKERS": "4"}, "--workers", "2") == 2


@pytest.mark.parametrize("n", ["0", "-1", "257"])
def test_a_worker_count_out_of_range_fails_the_start_with_status_2(
    n: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--backend", "http://127.0.0.1:1", "--workers", n], environ={}) == 2
    assert f"--workers: {n} is not between 1 and 256" in capsys.readouterr().err


def test_workers_refuse_a_trace_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--backend", "http://127.0.0.1:1", "--port", "0", "--workers", "2"]
    assert main([*argv, "--record", str(tmp_path / "t.jsonl")], environ={}) == 2
    assert "cannot be used with --workers" in capsys.readouterr().err
