"""The Envoy template rendered with and without the endpoint picker."""

from __future__ import annotations

from typing import Any

import yaml

from sim.live.envoy import render_envoy_config

BACKENDS = ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]


def _filters(config: Any) -> list[str]:
    [listener] = config["static_resources"]["listeners"]
    [chain] = listener["filter_chains"]
    [manager] = chain["filters"]
    return [f["name"] for f in manager["typed_config"]["http_filters"]]


def test_with_a_picker_the_template_keeps_ext_proc() -> None:
    config = yaml.safe_load(render_envoy_config(BACKENDS, 9002, 10000, 10001))
    assert "envoy.filters.http.ext_proc" in _filters(config)
    clusters = [c["name"] for c in config["static_resources"]["clusters"]]
    assert clusters == ["epp", "pool"]


def test_without_a_picker_only_ext_proc_and_its_cluster_go() -> None:
    with_picker = yaml.safe_load(render_envoy_config(BACKENDS, 9002, 10000, 10001))
    config = yaml.safe_load(render_envoy_config(BACKENDS, None, 10000, 10001))
    assert _filters(config) == [
        f for f in _filters(with_picker) if f != "envoy.filters.http.ext_proc"
    ]
    [pool] = config["static_resources"]["clusters"]
    assert pool["name"] == "pool"
    ports = [
        e["endpoint"]["address"]["socket_address"]["port_value"]
        for e in pool["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ]
    assert ports == [8001, 8002]


def test_the_pickers_messages_can_be_capped() -> None:
    config = yaml.safe_load(
        render_envoy_config(BACKENDS, 9002, 10000, 10001, max_message_bytes=65536)
    )
    [listener] = config["static_resources"]["listeners"]
    [manager] = listener["filter_chains"][0]["filters"]
    [ext_proc] = [
        f for f in manager["typed_config"]["http_filters"] if f["name"].endswith("ext_proc")
    ]
    grpc = ext_proc["typed_config"]["grpc_service"]["envoy_grpc"]
    assert grpc == {"cluster_name": "epp", "max_receive_message_length": 65536}
