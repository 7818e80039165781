"""Tracing end to end: `kvgate serve` (a real process) exporting over OTLP, gRPC and
HTTP/protobuf, to a real receiver in the test, in front of a fake engine that records the
headers it gets."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from bench.otlp_receiver import OtlpReceiver, ReceivedSpan
from gateway.app import GatewayApp
from tests.support.fixture_types import StartEngines
from tests.support.gateway_process import GatewayProcess, gateway_config
from tests.support.servers import ServerThread

SERVER, CLIENT, INTERNAL = 2, 3, 1  # Span.SpanKind
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SYSTEM = "You are a careful assistant who answers in one short line. " * 40


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def _traced_gateway(
    tmp_path: Path, backend: str, receiver: OtlpReceiver, protocol: str
) -> GatewayProcess:
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    env: dict[str, str | None] = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not the default 5
        "OTEL_SERVICE_NAME": "kvgate-under-test",
        "OTEL_TRACES_SAMPLER": None,
    }
    config = gateway_config([backend], routing={"policy": "prefix-aware"})
    config["backends"] = [{"url": backend, "id": "e1"}]
    return GatewayProcess(config, tmp_path / "gw", env=env).start()


def _chat(url: str, headers: dict[str, str], stream: bool = True) -> httpx.Response:
    body = {
        "model": "m1",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
        "stream": stream,
    }
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=10)


def _of_trace(spans: Sequence[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def _started(span: ReceivedSpan) -> int:
    return int(span.span.start_time_unix_nano)


def _by_kind(spans: Sequence[ReceivedSpan]) -> tuple[ReceivedSpan, ReceivedSpan, ReceivedSpan]:
    [server] = [s for s in spans if s.span.kind == SERVER]
    [route] = [s for s in spans if s.span.kind == INTERNAL]
    [upstream] = [s for s in spans if s.span.kind == CLIENT]
    return server, route, upstream


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_three_spans_reach_the_collector_parented_and_propagated(
    protocol: str, fake_engines: StartEngines, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    [(engine, server)] = fake_engines(1)
    gw = _traced_gateway(tmp_path, server.url, receiver, protocol)
    try:
        caller = {
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
            "tracestate": "vendor=opaque",
        }
        first = _chat(gw.url, caller)
        assert first.status_code == 200
        spans = receiver.wait_for(lambda s: len(_of_trace(s, CLIENT_TRACE)) >= 3)
    finally:
        gw.stop()
    mine = _of_trace(spans, CLIENT_TRACE)
    assert len(mine) == 3
    assert {s.protocol for s in mine} == {"http" if protocol == "http/protobuf" else "grpc"}
    srv, route, up = _by_kind(mine)

    # The client's span is the server span's parent; kvgate's other spans are its children.
    assert srv.parent_id == CLIENT_SPAN
    assert route.parent_id == srv.span_id
    assert up.parent_id == srv.span_id
    assert srv.span.trace_state == "vendor=opaque"
    assert srv.resource["service.name"] == "kvgate-under-test"
    assert srv.span.start_time_unix_nano <= route.span.start_time_unix_nano
    assert route.span.end_time_unix_nano <= up.span.start_time_unix_nano
    assert up.span.end_time_unix_nano <= srv.span.end_time_unix_nano

    a = srv.attributes
    assert srv.name == "POST /v1/chat/completions"
    assert a["http.request.method"] == "POST"
    assert a["http.response.status_code"] == 200
    assert a["gen_ai.request.model"] == "m1"
    assert a["kvgate.stream"] is True
    assert a["kvgate.backend"] == "e1"
    assert a["gen_ai.usage.output_tokens"] == engine.tokens
    assert a["gen_ai.usage.input_tokens"] > 0
    assert 0 < a["kvgate.ttft_s"] < 10
    assert [e.name for e in srv.span.events] == ["first_token"]
    assert first.headers["x-request-id"] == a["kvgate.request_id"]

    r = route.attributes
    assert route.name == "kvgate.route"
    assert r["kvgate.policy"] == "prefix-aware"
    assert r["kvgate.backend"] == "e1"
    assert r["kvgate.route.candidates"] == 1
    assert r["kvgate.route.top_backends"] == ["e1"]
    assert len(r["kvgate.route.top_scores"]) == 1
    assert r["kvgate.prefix.blocks"] > 1
    assert r["kvgate.prefix.matched_blocks"] == 0  # the first request: nothing cached

    u = up.attributes
    assert u["server.address"] == "127.0.0.1"
    assert u["server.port"] == server.port
    assert u["kvgate.attempt"] == 1
    assert u["http.response.status_code"] == 200

    # The engine saw kvgate's upstream span as its parent, the caller's trace and state.
    [seen] = engine.inference_requests()
    assert seen.headers["traceparent"] == f"00-{CLIENT_TRACE}-{up.span_id}-01"
    assert seen.headers["tracestate"] == "vendor=opaque"


def test_a_request_without_traceparent_starts_a_trace_and_counts_matched_blocks(
    fake_engines: StartEngines, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    [(engine, server)] = fake_engines(1)
    gw = _traced_gateway(tmp_path, server.url, receiver, "grpc")
    try:
        assert _chat(gw.url, {}, stream=False).status_code == 200
        assert _chat(gw.url, {}, stream=False).status_code == 200  # the same prompt again
        spans = receiver.wait_for(lambda s: len(s) >= 6)
    finally:
        gw.stop()
    traces = {s.trace_id for s in spans}
    assert len(traces) == 2
    received = [r.headers["traceparent"] for r in engine.inference_requests()]
    for trace_id in traces:
        srv, _, up = _by_kind(_of_trace(spans, trace_id))
        assert srv.parent_id == ""  # a root span
        assert "kvgate.ttft_s" not in srv.attributes  # not streamed: no first token to time
        assert f"00-{trace_id}-{up.span_id}-01" in received
    routes = sorted((s for s in spans if s.span.kind == INTERNAL), key=_started)
    assert [r.attributes["kvgate.prefix.matched_blocks"] > 0 for r in routes] == [False, True]


def test_tracing_off_creates_no_spans_and_forwards_the_callers_traceparent(
    fake_engines: StartEngines,
    start_gateway: Callable[..., tuple[GatewayApp, ServerThread]],
    receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only where to send is set: without OTEL_TRACES_EXPORTER tracing stays off.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.grpc_endpoint)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    [(engine, server)] = fake_engines(1)
    app, gw = start_gateway([server.url])
    assert app.runtime.director.tracer is None
    caller = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "v=1"}
    assert _chat(gw.url, caller).status_code == 200
    [seen] = engine.inference_requests()
    assert seen.headers["traceparent"] == caller["traceparent"]
    assert seen.headers["tracestate"] == "v=1"
    time.sleep(0.3)
    assert receiver.spans() == [] and receiver.requests == {"grpc": 0, "http": 0}
