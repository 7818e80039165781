"""The config file with the command line's flags applied; `--backend URL,...`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvgate.cli import build_parser
from kvgate.cli.effective import effective_config, parse_backend_arg
from routing.config.schema import BackendEntry, ConfigError, GatewayConfig, load_config

REFERENCE = Path(__file__).resolve().parents[4] / "deploy" / "kvgate.yaml"

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
    return effective_config(build_parser().parse_args(["serve", *argv]))


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


def test_admin_port_flag_sets_the_config() -> None:
    assert _serve().server.admin_port is None
    assert _serve("--admin-port", "9100").server.admin_port == 9100


def test_epp_takes_the_pool_to_watch() -> None:
    argv = ["epp", "--pool", "llama", "--namespace", "ml", "--kube-api", "http://127.0.0.1:1"]
    d = effective_config(build_parser().parse_args(argv)).discovery
    assert (d.pool, d.namespace, d.kube_api) == ("llama", "ml", "http://127.0.0.1:1")


# -- --backend URL,... ----------------------------------------------------------------------


def test_parse_backend_arg_url_only() -> None:
    entry = parse_backend_arg("http://10.0.0.5:8000/")
    assert entry == BackendEntry(url="http://10.0.0.5:8000")
    assert (entry.id, entry.engine, entry.models) == (None, "vllm", [])


def test_parse_backend_arg_with_every_option() -> None:
    entry = parse_backend_arg("http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5")
    assert entry.url == "http://10.0.0.5:8000"
    assert entry.engine == "sglang"
    assert entry.models == ["llama", "qwen"]
    assert entry.id == "gpu-5"


def test_parse_backend_arg_kv_events() -> None:
    entry = parse_backend_arg("http://h:1,kv_events=tcp://h:5557,kv_replay=tcp://h:5558")
    assert entry.kv_events is not None
    assert entry.kv_events.endpoint == "tcp://h:5557"
    assert entry.kv_events.replay == "tcp://h:5558"
    with pytest.raises(ConfigError, match="kv_events"):
        parse_backend_arg("http://h:1,kv_replay=tcp://h:5558")  # replay without the publisher


@pytest.mark.parametrize(("value", "models"), [("", []), ("a||b|", ["a", "b"]), ("m", ["m"])])
def test_parse_backend_arg_models_list(value: str, models: list[str]) -> None:
    assert parse_backend_arg(f"http://h:1,models={value}").models == models


@pytest.mark.parametrize("opt", ["foo=bar", "engine", "=vllm", "URL=http://x"])
def test_parse_backend_arg_rejects_unknown_options(opt: str) -> None:
    with pytest.raises(
        ConfigError,
        match=re.escape("expected key=value with key engine|models|id|kv_events|kv_replay"),
    ):
        parse_backend_arg(f"http://h:1,{opt}")


def test_parse_backend_arg_bad_engine_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_backend_arg("http://h:1,engine=tgi")
    message = str(info.value)
    assert message.startswith("--backend 'http://h:1,engine=tgi'")
    assert "  engine:" in message


def test_parse_backend_arg_bad_url_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"(?m)^  url: .*http:// or https://"):
        parse_backend_arg("localhost:8000")


def test_a_bad_backend_flag_url_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"(?m)^  url: .*must be a number in 1-65535"):
        parse_backend_arg("http://127.0.0.1:99999")


def test_parse_backend_arg_data_parallel() -> None:
    entry = parse_backend_arg("http://h:1,engine=sglang,dp_size=4,dp_rank_field=data_parallel_rank")
    assert (entry.dp_size, entry.dp_rank_field) == (4, "data_parallel_rank")
    assert parse_backend_arg("http://h:1").dp_size is None
    with pytest.raises(ConfigError, match="dp_size"):
        parse_backend_arg("http://h:1,dp_size=0")
