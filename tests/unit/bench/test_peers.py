"""Command lines and configs of the peer routers; no sockets, no installs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.peers import (
    LITELLM_KEY,
    PEER_HEADERS,
    PeerInstall,
    ensure_peer,
    litellm_config,
    peer_command,
)

URLS = ["http://127.0.0.1:9001", "http://127.0.0.1:9002/"]


def _install(name: str) -> PeerInstall:
    return PeerInstall(name, Path(f"/venvs/{name}/bin/python"), "1.2.3")


def _flag(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_kvgate_serves_each_backend_on_loopback_with_the_policy() -> None:
    cmd = peer_command(_install("kvgate"), port=8123, worker_urls=URLS, model="m", policy="p")
    assert cmd[:4] == ["/venvs/kvgate/bin/python", "-m", "kvgate.cli", "serve"]
    assert _flag(cmd, "--host") == "127.0.0.1"
    assert _flag(cmd, "--port") == "8123"
    assert _flag(cmd, "--policy") == "p"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--backend"] == URLS


@pytest.mark.parametrize(
    ("name", "module", "default", "log_level"),
    [
        ("sglang-router", "sglang_router.launch_router", "cache_aware", "warn"),
        ("vllm-router", "vllm_router.launch_router", "cache_aware", "warning"),
    ],
)
def test_rust_routers_bind_loopback_and_their_own_metrics_port(
    name: str, module: str, default: str, log_level: str
) -> None:
    cmd = peer_command(
        _install(name), port=8123, worker_urls=URLS, model="m", policy="default", metrics_port=9999
    )
    assert cmd[:3] == [f"/venvs/{name}/bin/python", "-m", module]
    assert _flag(cmd, "--host") == "127.0.0.1"
    assert _flag(cmd, "--prometheus-host") == "127.0.0.1"
    assert _flag(cmd, "--prometheus-port") == "9999"
    assert _flag(cmd, "--policy") == default
    assert _flag(cmd, "--log-level") == log_level
    start = cmd.index("--worker-urls") + 1
    assert cmd[start : start + len(URLS)] == URLS


def test_litellm_runs_its_cli_on_the_rendered_config() -> None:
    config = Path("/out/litellm.yaml")
    cmd = peer_command(
        _install("litellm"), port=8123, worker_urls=URLS, model="m", policy="x", config_path=config
    )
    assert cmd == [
        *("/venvs/litellm/bin/litellm", "--config", str(config)),
        *("--host", "127.0.0.1", "--port", "8123"),
    ]


def test_litellm_without_a_config_is_refused() -> None:
    with pytest.raises(ValueError, match="config_path"):
        peer_command(_install("litellm"), port=1, worker_urls=URLS, model="m", policy="x")


def test_litellm_config_has_one_deployment_per_replica_under_one_name() -> None:
    config = json.loads(litellm_config(URLS, "m", "simple-shuffle"))  # JSON is valid YAML
    deployments = config["model_list"]
    assert [d["model_name"] for d in deployments] == ["m", "m"]
    assert [d["litellm_params"]["api_base"] for d in deployments] == [
        "http://127.0.0.1:9001/v1",
        "http://127.0.0.1:9002/v1",
    ]
    assert {d["litellm_params"]["model"] for d in deployments} == {"openai/m"}
    assert config["router_settings"]["routing_strategy"] == "simple-shuffle"
    assert config["general_settings"]["master_key"] == LITELLM_KEY
    assert PEER_HEADERS["litellm"] == {"authorization": f"Bearer {LITELLM_KEY}"}


def test_unknown_peer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown peer"):
        ensure_peer("nginx")
    with pytest.raises(ValueError, match="unknown peer"):
        peer_command(_install("nginx"), port=1, worker_urls=URLS, model="m", policy="x")


def test_kvgate_needs_no_install() -> None:
    install = ensure_peer("kvgate", root=Path("/nonexistent"))
    assert install.name == "kvgate"
    assert install.version
