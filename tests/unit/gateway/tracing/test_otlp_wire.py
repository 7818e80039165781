"""The hand-written encoder against the official message classes."""

from __future__ import annotations

import random

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from bench.otlp_receiver import value_of
from gateway.tracing.otlp_wire import SpanEncoder, varint
from gateway.tracing.spans import FinishedTrace, Outcome, RequestTrace, Tracer, finished
from gateway.usage import Usage
from routing.types import Decision, EndpointScores, ScoreTable

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _decision(table: bool) -> Decision:
    if table:
        scores = ScoreTable(("b", "a", "c"), ("prefix",), ([0.2, 0.9, 0.5],), [0.2, 0.9, 0.5])
    else:
        scores = (EndpointScores("b", {"prefix": 0.2}, 0.2), EndpointScores("a", {}, 0.9))  # type: ignore[assignment]
    return Decision("prefix-aware", ("a", "c", "b") if table else ("a", "b"), scores)


def _trace(
    *, parent: str | None, status: int = 200, table: bool = True, seed: int = 1
) -> FinishedTrace:
    got: list[FinishedTrace] = []

    def sink(trace: RequestTrace, outcome: Outcome) -> None:
        got.append(finished(trace, outcome))

    tracer = Tracer(lambda *_: True, sink, random.Random(seed))
    t = tracer.start("POST", "/v1/chat/completions", parent, "k=v" if parent else None)
    t.route_started()
    t.routed(_decision(table), 7)
    t.matched_blocks = 5
    failed = t.upstream("c", "http://10.0.0.3:8000", 1)
    failed.end_ns, failed.error = failed.start_ns + 10, "cannot connect"
    ok = t.upstream("a", "http://10.0.0.1:8000", 2)
    ok.end_ns, ok.status = ok.start_ns + 1000, status
    t.backend = "a"
    error = "the upstream backend failed" if status >= 500 else None
    tracer.finish(t, Outcome(status, "m", True, 0.25, Usage(100, 64, 3), error, "1.2.3.4", "r1"))
    [flat] = got
    return flat


def _decode(*traces: FinishedTrace) -> tuple[ExportTraceServiceRequest, list[Span]]:
    payload, count = SpanEncoder({"service.name": "kvgate"}, "kvgate", "9.9").encode(traces)
    msg = ExportTraceServiceRequest.FromString(payload)
    spans = [s for rs in msg.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert count == len(spans)
    return msg, spans


def _attrs(span: Span) -> dict[str, object]:
    return {kv.key: value_of(kv.value) for kv in span.attributes}


def test_varint_matches_protobuf() -> None:
    assert varint(0) == b"\x00" and varint(127) == b"\x7f" and varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


def test_a_request_becomes_its_spans_parented_under_the_callers() -> None:
    t = _trace(parent=TRACEPARENT)
    msg, spans = _decode(t)
    rs = msg.resource_spans[0]
    assert value_of(rs.resource.attributes[0].value) == "kvgate"
    assert (rs.scope_spans[0].scope.name, rs.scope_spans[0].scope.version) == ("kvgate", "9.9")
    server, route, failed, ok = spans
    assert server.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert {s.trace_id for s in spans} == {server.trace_id}
    assert server.parent_span_id.hex() == "00f067aa0ba902b7"
    assert server.flags == 0x301  # sampled, parent known to be remote
    assert [s.parent_span_id for s in (route, failed, ok)] == [server.span_id] * 3
    assert route.flags == ok.flags == 0x101
    assert {s.trace_state for s in spans} == {"k=v"}
    assert (server.kind, route.kind, ok.kind) == (
        Span.SPAN_KIND_SERVER,
        Span.SPAN_KIND_INTERNAL,
        Span.SPAN_KIND_CLIENT,
    )
    assert server.start_time_unix_nano == t.start_ns and server.end_time_unix_nano == t.end_ns
    assert ok.end_time_unix_nano - ok.start_time_unix_nano == 1000

    a = _attrs(server)
    assert a["http.response.status_code"] == 200 and a["gen_ai.request.model"] == "m"
    assert a["gen_ai.usage.input_tokens"] == 100 and a["gen_ai.usage.output_tokens"] == 3
    assert a["gen_ai.usage.cache_read.input_tokens"] == 64
    assert a["kvgate.ttft_s"] == 0.25 and a["kvgate.stream"] is True
    assert a["kvgate.request_id"] == "r1" and a["client.address"] == "1.2.3.4"
    [event] = server.events
    assert event.name == "first_token" and event.time_unix_nano == t.start_ns + 250_000_000
    assert server.status.code == Status.STATUS_CODE_UNSET

    r = _attrs(route)
    assert r["kvgate.policy"] == "prefix-aware" and r["kvgate.backend"] == "a"
    assert r["kvgate.route.top_backends"] == ["a", "c", "b"]
    assert r["kvgate.route.top_scores"] == [0.9, 0.5, 0.2]
    assert r["kvgate.prefix.blocks"] == 7 and r["kvgate.prefix.matched_blocks"] == 5
    assert r["kvgate.route.candidates"] == 3

    f = _attrs(failed)
    assert f["kvgate.attempt"] == 1 and f["server.address"] == "10.0.0.3"
    assert f["error.type"] == "upstream_error"
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert failed.status.message == "cannot connect"
    o = _attrs(ok)
    assert o["server.port"] == 8000 and o["http.response.status_code"] == 200
    assert "error.type" not in o and ok.status.code == Status.STATUS_CODE_UNSET


def test_a_root_span_has_no_parent_and_a_5xx_is_an_error() -> None:
    _, spans = _decode(_trace(parent=None, status=503, table=False))
    server, route, _, ok = spans
    assert server.parent_span_id == b"" and server.flags == 0x101
    assert server.status.code == Status.STATUS_CODE_ERROR
    assert _attrs(server)["error.type"] == "503"
    assert ok.status.code == Status.STATUS_CODE_ERROR
    assert _attrs(route)["kvgate.route.top_scores"] == [0.9, 0.2]


def test_a_batch_holds_every_request() -> None:
    traces = [_trace(parent=None, seed=i) for i in range(40)]
    _, spans = _decode(*traces)
    assert len(spans) == 160
    assert len({s.trace_id for s in spans}) == 40
