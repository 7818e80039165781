from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from routing.config.example_keys import EXAMPLE_KEYS
from routing.config.profiles import PluginSpec, ProfileSpec, RoutingSection
from routing.config.schema import (
    BackendEntry,
    ConfigError,
    GatewayConfig,
    HealthSection,
    ServerSection,
    UpstreamSection,
    load_config,
    parse_config,
)
from routing.config.yaml_loader import load_yaml

REFERENCE = Path(__file__).resolve().parents[4] / "deploy" / "kvgate.yaml"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation refers to (through list, dict, Optional, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _reachable_models(root: type[BaseModel]) -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            for field in model.model_fields.values():
                todo.extend(_models_in(field.annotation))
    return seen


def _collect_keys(annotation: Any, data: Any, keys: dict[type[BaseModel], set[str]]) -> None:
    """Record, per model, the keys the YAML data gives wherever that model is used."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if isinstance(data, dict):
            keys.setdefault(annotation, set()).update(data)
            for name, field in annotation.model_fields.items():
                if name in data:
                    _collect_keys(field.annotation, data[name], keys)
        return
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and isinstance(data, list):
        for item in data:
            _collect_keys(args[0], item, keys)
    elif origin is dict and isinstance(data, dict):
        for value in data.values():
            _collect_keys(args[1], value, keys)
    elif origin in (Union, types.UnionType):
        for arg in args:
            _collect_keys(arg, data, keys)


def _config_error(raw: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return str(info.value)


# -- defaults and the reference file ------------------------------------------------------


def test_no_file_gives_the_defaults() -> None:
    cfg = load_config(None)
    assert cfg == GatewayConfig()
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 8000)
    assert cfg.server.max_body_bytes == 16 * 1024 * 1024
    assert cfg.upstream.max_attempts == 2
    assert cfg.health.fail_threshold == 3
    assert cfg.backends == []
    assert cfg.routing.policy == "prefix-aware"


def test_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n")
    assert load_config(path) == GatewayConfig()


def test_reference_file_loads_with_default_values() -> None:
    cfg = load_config(REFERENCE)
    # The reference documents the defaults of the plain sections...
    assert cfg.server == ServerSection()
    assert cfg.upstream == UpstreamSection()
    assert cfg.health == HealthSection()
    assert cfg.routing.policy == RoutingSection().policy
    assert cfg.routing.session_header == RoutingSection().session_header
    # ...and shows a backend list and a user profile.
    assert [b.url for b in cfg.backends] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert cfg.backends[0].id == "replica-1"
    assert "sticky-sessions" in cfg.routing.profiles


def test_reference_walk_covers_every_section_model() -> None:
    # Guards the completeness test below against a walk that silently finds nothing.
    assert _reachable_models(GatewayConfig) >= {
        GatewayConfig,
        ServerSection,
        UpstreamSection,
        HealthSection,
        BackendEntry,
        RoutingSection,
        ProfileSpec,
        PluginSpec,
    }


def _commented_keys(text: str) -> set[str]:
    """Keys of the commented-out examples (`#   sha256: ...`): the fields of a list the file
    leaves empty, such as security.api_keys, whose example entry must hold no working key."""
    return set(re.findall(r"^\s*#\s+(?:- )?([a-z_0-9]+):", text, flags=re.MULTILINE))


def test_reference_file_names_every_config_field() -> None:
    text = REFERENCE.read_text()
    keys: dict[type[BaseModel], set[str]] = {}
    _collect_keys(GatewayConfig, yaml.safe_load(text), keys)
    commented = _commented_keys(text)
    missing = sorted(
        f"{model.__name__}.{name}"
        for model in _reachable_models(GatewayConfig)
        for name in model.model_fields
        # a model with no entry in the file may be documented by a commented example
        if name not in keys.get(model, commented)
    )
    assert missing == [], f"deploy/kvgate.yaml does not document: {missing}"


def test_reference_file_ships_no_working_key() -> None:
    cfg = load_config(REFERENCE)
    assert cfg.security.api_keys == []
    assert cfg.security.admin_key_sha256 is None
    text = REFERENCE.read_text()
    assert not re.search(r"\b[0-9a-fA-F]{64}\b", text), "a key hash in deploy/kvgate.yaml"
    for example in EXAMPLE_KEYS.values():
        assert example not in text


@pytest.mark.parametrize("sha256", sorted(EXAMPLE_KEYS))
def test_a_documented_example_key_is_refused_naming_the_field(sha256: str) -> None:
    admin = _config_error({"security": {"admin_key_sha256": sha256.upper()}})
    assert "security.admin_key_sha256" in admin
    assert f"documented example key {EXAMPLE_KEYS[sha256]!r}" in admin
    assert sha256[:16] in admin
    entry = {"name": "team-a", "sha256": sha256}
    keys = _config_error({"security": {"api_keys": [entry]}})
    assert "security.api_keys.0.sha256" in keys
    assert "documented example key" in keys


# -- errors name field paths --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path", "why"),
    [
        ({"backends": [{"url": "ftp://x"}]}, "backends.0.url", "http:// or https://"),
        ({"backends": [{"url": "http://a"}, {}]}, "backends.1.url", "Field required"),
        ({"backends": [{"url": "http://a", "engine": "tgi"}]}, "backends.0.engine", "vllm"),
        ({"upstream": {"max_attempts": 0}}, "upstream.max_attempts", "greater than or equal"),
        ({"upstream": {"max_attempts": 11}}, "upstream.max_attempts", "less than or equal"),
        ({"server": {"prot": 80}}, "server.prot", "Extra inputs are not permitted"),
        ({"server": {"port": 70000}}, "server.port", "less than or equal"),
        ({"health": {"fail_threshold": "many"}}, "health.fail_threshold", "valid integer"),
        ({"bogus": 1}, "bogus", "Extra inputs are not permitted"),
        (
            {"security": {"api_keys": [{"name": "a", "sha256": "plaintext-key"}]}},
            "security.api_keys.0.sha256",
            "should match pattern",
        ),
        ({"security": {"admin_key_sha256": "x"}}, "security.admin_key_sha256", "pattern"),
        ({"security": {"backend_header": "host"}}, "security.backend_header", "opaque"),
        ({"security": {"upstream_authorization": "x"}}, "security.upstream_authorization", "strip"),
        ({"server": {"admin_port": 70000}}, "server.admin_port", "less than or equal"),
        ({"admission": {"max_queue": -1}}, "admission.max_queue", "greater than or equal"),
        ({"state": {"backend": "etcd"}}, "state.backend", "'memory' or 'redis'"),
        ({"state": {"url": "http://x:6379"}}, "state.url", "must start with redis://"),
        ({"state": {"namespace": ""}}, "state.namespace", "at least 1 character"),
        ({"state": {"namespace": "a b"}}, "state.namespace", "should match pattern"),
        ({"admission": {"tiers": {"gold": "vip"}}}, "admission", "unknown band(s) vip"),
        ({"admission": {"bands": ["a", "a"]}}, "admission", "bands must be distinct"),
        ({"admission": {"bands": []}}, "admission.bands", "at least 1 item"),
        (
            {"admission": {"max_in_flight_per_backend": 0}},
            "admission.max_in_flight_per_backend",
            "greater than",
        ),
        ([1, 2], "(root)", "valid dictionary"),
        (
            {"backends": [{"url": "http://a", "kv_events": "http://a:1"}]},
            "backends.0.kv_events.endpoint",
            "tcp://host:port",
        ),
        (
            {"backends": [{"url": "http://a", "kv_events": "tcp://*:5557"}]},
            "backends.0.kv_events.endpoint",
            "engine's host",
        ),
        (
            {
                "backends": [
                    {
                        "url": "http://a",
                        "kv_events": {"endpoint": "tcp://a:1", "replay": "tcp://a:0"},
                    }
                ]
            },
            "backends.0.kv_events.replay",
            "port in 1-65535",
        ),
        (
            {"backends": [{"url": "http://a", "kv_events": {}}]},
            "backends.0.kv_events.endpoint",
            "Field required",
        ),
    ],
)
def test_errors_name_the_field_path(raw: object, path: str, why: str) -> None:
    message = _config_error(raw)
    line = next((ln for ln in message.splitlines() if ln.strip().startswith(f"{path}:")), None)
    assert line is not None, message
    assert why in line


def test_every_bad_field_is_listed() -> None:
    message = _config_error({"server": {"port": -1}, "upstream": {"max_attempts": 0}})
    assert message.splitlines()[0] == "config: 2 invalid field(s)"
    assert "server.port" in message
    assert "upstream.max_attempts" in message


def test_file_errors_name_the_file_and_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server:\n  prot: 80\n")
    with pytest.raises(ConfigError, match=r"server\.prot") as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: 1 invalid field(s)")


def test_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("server: [host, \n  port: 1\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path)


def test_undecodable_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"server:\n  host: \xff\xfe\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match="cannot read config") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# -- backends -----------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://h", "http://", "https:///", "", "/x"])
def test_backend_url_must_be_http(url: str) -> None:
    assert "backends.0.url" in _config_error({"backends": [{"url": url}]})


def test_backend_entry_defaults_and_trailing_slash() -> None:
    cfg = parse_config({"backends": [{"url": "https://h:8001/"}]})
    assert cfg.backends == [BackendEntry(url="https://h:8001", id=None, engine="vllm", models=[])]


def test_kv_events_of_a_backend() -> None:
    entry = BackendEntry.model_validate({"url": "http://a:8000", "kv_events": "tcp://a:5557"})
    assert entry.kv_events is not None
    assert (entry.kv_events.endpoint, entry.kv_events.replay, entry.kv_events.topic) == (
        "tcp://a:5557",
        None,
        "",
    )
    full = {"endpoint": "ipc:///run/kv", "replay": "tcp://[::1]:5558", "topic": "kv"}
    entry = BackendEntry.model_validate({"url": "http://a:8000", "kv_events": full})
    assert entry.kv_events is not None and entry.kv_events.model_dump() == full
    assert BackendEntry(url="http://a:8000").kv_events is None


# -- routing ------------------------------------------------------------------------------


def test_unknown_policy_is_rejected_listing_the_profiles() -> None:
    message = _config_error(
        {"routing": {"policy": "fastest", "profiles": {"mine": {"picker": {"type": "p"}}}}}
    )
    assert "routing.policy: 'fastest' is not a profile" in message
    assert (
        "available: estimated-ttft, least-in-flight, least-load, mine, power-of-two, "
        "precise-prefix, prefix-aware, random, round-robin, session"
    ) in message


def test_policy_may_name_a_user_profile() -> None:
    cfg = parse_config(
        {"routing": {"policy": "mine", "profiles": {"mine": {"picker": {"type": "p"}}}}}
    )
    assert cfg.routing.policy == "mine"
    assert cfg.routing.profiles["mine"].picker.instance_name == "p"


# -- issue 15, defect 8: backends and the YAML loader ------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:99999", "port in '127.0.0.1:99999' must be a number in 1-65535"),
        ("http://h:0", "port must be in 1-65535"),
        ("http://h:http", "must be a number in 1-65535"),
        ("http://exa mple:80", "whitespace"),
        ("http://h..x:1", "not a valid DNS name"),
        ("http://-h:1", "not a valid DNS name"),
        (f"http://{'a' * 64}:1", "not a valid DNS name"),
        ("http://[::zz]:1", "IPv6 address"),
        ("http://[1.2.3.4]:1", "cannot be in brackets"),
        ("http://user:pw@h:1", "credentials"),
        ("http://h:1/v1?x=1", "query or fragment"),
        ("http://h:1#top", "query or fragment"),
    ],
)
def test_backend_url_is_checked_whole(url: str, why: str) -> None:
    message = _config_error({"backends": [{"url": url}]})
    assert re.search(rf"(?m)^  backends\.0\.url: .*{re.escape(why)}", message), message


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:8000",
        "https://engine.example.com",
        "http://[fd00::5]:8000",
        "http://vllm_0:8000/engine/",
        "http://bücher.example:8000",
        "http://h:65535",
    ],
)
def test_reachable_backend_urls_pass(url: str) -> None:
    assert parse_config({"backends": [{"url": url}]}).backends[0].url == url.rstrip("/")


def test_duplicate_backend_ids_name_the_entry_and_the_first() -> None:
    message = _config_error(
        {
            "backends": [
                {"url": "http://a:1", "id": "gpu"},
                {"url": "http://b:1"},
                {"url": "http://c:1", "id": "gpu"},
                {"url": "http://b:1/"},
            ]
        }
    )
    assert message.splitlines() == [
        "config: 2 invalid field(s)",
        "  backends.2.id: duplicate backend id 'gpu': backends.0 has it too",
        "  backends.3.id: duplicate backend id 'b:1' (from its url): backends.1 has it too",
    ]


def test_duplicate_yaml_keys_are_rejected_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("server:\n  port: 8000\n  host: 0.0.0.0\n  port: 9000\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: invalid YAML")
    assert "found duplicate key 'port' (first on line 2)" in message
    assert "line 4, column 3" in message


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text(
        "server: &s\n  port: 8000\n  host: 0.0.0.0\n"
        "upstream: {max_attempts: 3}\n"
        "health:\n  probe_interval_s: 1.0\n"
    )
    assert load_config(path).server.port == 8000
    assert load_yaml("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  p: 3\n") == {
        "a": {"p": 1, "q": 2},
        "b": {"p": 3, "q": 2},
    }


def test_security_defaults_and_duplicate_keys() -> None:
    security = GatewayConfig().security
    assert security.api_keys == [] and security.admin_key_sha256 is None
    assert (security.backend_header, security.forwarded_for) == ("opaque", True)
    assert security.upstream_authorization is None  # strip with API keys, else pass
    assert GatewayConfig().server.admin_port is None
    digest = "A" * 64
    one = {"name": "a", "sha256": digest}
    assert parse_config({"security": {"api_keys": [one]}}).security.api_keys[0].sha256 == "a" * 64
    twice = [one, {"name": "a", "sha256": "b" * 64}]
    assert "same name" in _config_error({"security": {"api_keys": twice}})


def test_tls_cert_and_key_go_together() -> None:
    with pytest.raises(ConfigError, match="tls_cert_file and tls_key_file go together"):
        parse_config({"server": {"tls_cert_file": "c.pem"}})
    both = parse_config({"server": {"tls_cert_file": "c.pem", "tls_key_file": "k.pem"}})
    assert both.server.tls_key_file == "k.pem"
