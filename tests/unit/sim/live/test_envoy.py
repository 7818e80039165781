"""The Envoy template rendered with and without the endpoint picker, over TLS or not, with
one picker or several."""

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


def _epp_cluster(config: Any) -> dict[str, Any]:
    [epp] = [c for c in config["static_resources"]["clusters"] if c["name"] == "epp"]
    return dict(epp)


def test_the_picker_is_dialled_over_tls_unless_told_otherwise() -> None:
    for template in ("envoy.yaml", "envoy-original-dst.yaml"):
        tls = yaml.safe_load(render_envoy_config(BACKENDS, 9002, 1, 2, template=template))
        socket = _epp_cluster(tls)["transport_socket"]
        assert socket["name"] == "envoy.transport_sockets.tls"
        assert "validation_context" not in socket["typed_config"]["common_tls_context"]
        plain = render_envoy_config(BACKENDS, 9002, 1, 2, template=template, epp_tls=False)
        assert "transport_socket" not in _epp_cluster(yaml.safe_load(plain))


def test_several_pickers_are_endpoints_of_one_checked_cluster() -> None:
    config = yaml.safe_load(render_envoy_config(BACKENDS, [9002, 9012], 10000, 10001))
    epp = _epp_cluster(config)
    ports = [
        e["endpoint"]["address"]["socket_address"]["port_value"]
        for e in epp["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ]
    assert ports == [9002, 9012]
    [check] = epp["health_checks"]
    assert check["grpc_health_check"] == {"service_name": "readiness"}
    assert epp["outlier_detection"]["consecutive_local_origin_failure"] == 1
