"""The compiled tracer and span encoder against their pure-Python references: the same
traces, the same bytes."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.tracing.export import span_encoder
from gateway.tracing.otlp_native import NativeSpanEncoder, NativeTracer
from gateway.tracing.otlp_wire import SpanEncoder
from gateway.tracing.sampling import ALWAYS, NEVER, Bounds
from gateway.tracing.setup import new_tracer
from gateway.tracing.spans import Outcome, RequestTrace, Tracer
from gateway.usage import Usage
from routing.types import Decision, EndpointScores, ScoreTable

RESOURCE = {"service.name": "kvgate", "deployment.environment": "ci", "pid": 7}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
LONG = "x" * 300  # lengths of two bytes, up to the spans'
ids = st.sampled_from(["a", "b", "c", "été", LONG])
tokens = st.none() | st.integers(0, 2**70) | st.integers(-(2**63), -1)


@st.composite
def decisions(draw: st.DrawFn) -> Decision:
    scored = draw(st.lists(ids, max_size=5))  # an id twice: its last total counts
    totals = draw(st.lists(st.floats(allow_nan=False), min_size=len(scored), max_size=len(scored)))
    ranked = tuple(draw(st.lists(ids, max_size=5)))
    scores: ScoreTable | tuple[EndpointScores, ...]
    if draw(st.booleans()):
        scores = ScoreTable(tuple(scored), ("prefix",), (totals,), totals)
    else:
        scores = tuple(EndpointScores(i, {}, t) for i, t in zip(scored, totals, strict=True))
    filtered = {i: "healthy" for i in draw(st.lists(ids, max_size=2))}
    return Decision(draw(st.sampled_from(["prefix-aware", "é"])), ranked, scores, filtered)


@st.composite
def requests(draw: st.DrawFn) -> tuple[RequestTrace, Outcome]:
    kept: list[tuple[RequestTrace, Outcome]] = []
    tracer = draw(st.sampled_from([Tracer, NativeTracer]))(  # the reference's, or compiled
        lambda *_: draw(st.booleans()),
        lambda t, o: kept.append((t, o)),
        random.Random(draw(st.integers(0, 99))),
    )
    parent = draw(st.sampled_from([None, TRACEPARENT, TRACEPARENT[:-2] + "00"]))
    state = draw(st.sampled_from([None, "", "k=v", "k=\xe9"]))
    t = tracer.start("POST", draw(st.sampled_from(["/v1/completions", "/" + LONG])), parent, state)
    if draw(st.booleans()):
        t.route_started()
        t.routed(draw(decisions()), draw(st.integers(0, 2**40)))
        t.matched_blocks = draw(st.none() | st.integers(0, 300))
    for attempt in range(1, draw(st.integers(0, 3)) + 1):
        url = draw(st.sampled_from(["http://10.0.0.1:8000", "https://h", "http://" + LONG]))
        span = t.upstream(draw(ids), url, attempt)
        span.end_ns = span.start_ns + draw(st.integers(0, 10**9))
        span.status = draw(st.sampled_from([0, 200, 404, 503]))
        span.error = draw(st.sampled_from([None, "", "cannot connect", LONG]))
    t.backend = draw(st.none() | ids)
    usage = draw(st.none() | st.builds(Usage, tokens, tokens, tokens))
    error = draw(st.none() | st.sampled_from(["bad", LONG]))
    outcome = Outcome(
        draw(st.sampled_from([200, 400, 499, 502])), draw(st.none() | ids), draw(st.booleans()),
        draw(st.none() | st.floats(0, 1e4)), usage, error,
        draw(st.none() | st.just("127.0.0.1")), draw(st.none() | st.just("r-1")),
    )  # fmt: skip
    tracer.finish(t, outcome)
    return t, outcome


@settings(max_examples=400, deadline=None)
@given(requests())
def test_the_compiled_encoder_writes_the_references_bytes(
    request: tuple[RequestTrace, Outcome],
) -> None:
    reference = SpanEncoder(RESOURCE, "kvgate", "1.0")
    native = NativeSpanEncoder(RESOURCE, "kvgate", "1.0")
    assert native.request(*request) == reference.request(*request)
    chunk, _ = reference.request(*request)
    assert native.batch([chunk, chunk]) == reference.batch([chunk, chunk])


def test_the_compiled_encoder_and_tracer_are_built_and_chosen() -> None:
    assert isinstance(span_encoder(RESOURCE, "kvgate", "1.0"), NativeSpanEncoder)
    assert isinstance(new_tracer(Bounds.same(ALWAYS), lambda t, o: None), NativeTracer)


FIELDS = (
    "name", "method", "path", "trace_id", "server_id", "sampled", "parent", "route_id",
    "decision", "prefix_blocks", "matched_blocks", "backend",
)  # fmt: skip
UPSTREAM_FIELDS = ("span_id", "backend", "url", "attempt", "status", "error")


def _script(tracer: Tracer | NativeTracer, parent: str | None, state: str | None) -> Any:
    """One request's tracing calls, as the gateway makes them; what they leave."""
    d = Decision("prefix-aware", ("a", "b"), (EndpointScores("a", {}, 1.0),))
    before = time.time_ns()
    t = tracer.start("POST", "/v1/chat/completions", parent, state)
    t.route_started()
    t.routed(d, 7)
    t.matched_blocks = 5
    first = t.upstream("a", "http://10.0.0.1:8000", 1)
    first.status, first.error, first.end_ns = 503, "bad gateway", time.time_ns()
    second = t.upstream("b", "http://10.0.0.2:8000", 2)
    second.status, second.end_ns = 200, time.time_ns()
    headers = t.propagation(second.span_id)
    t.backend = "b"
    tracer.finish(t, Outcome(200, "m", True, 0.5, None, None))
    after = time.time_ns()
    times = [t.start_ns, t.route_start_ns, t.route_end_ns, t.end_ns]
    spans = t.upstreams or []
    times += [x for s in spans for x in (s.start_ns, s.end_ns)]
    assert all(before <= x <= after for x in times)
    assert t.start_ns <= t.route_start_ns <= t.route_end_ns <= spans[0].start_ns
    assert spans[0].start_ns <= spans[1].start_ns <= t.end_ns
    return (
        [getattr(t, f) for f in FIELDS],
        [[getattr(s, f) for f in UPSTREAM_FIELDS] for s in spans],
        headers,
    )


@pytest.mark.parametrize("parent", [None, TRACEPARENT, TRACEPARENT[:-2] + "00", "junk"])
@pytest.mark.parametrize("state", [None, "k=v"])
@pytest.mark.parametrize("sample", [Bounds(ALWAYS, ALWAYS, NEVER), Bounds.same(NEVER)])
def test_the_compiled_tracer_records_what_the_reference_does(
    parent: str | None, state: str | None, sample: Bounds
) -> None:
    kept: list[object] = []
    sink = kept.append
    reference = _script(Tracer(sample, lambda t, o: sink(t), random.Random(5)), parent, state)
    compiled = _script(NativeTracer(sample, lambda t, o: sink(t), random.Random(5)), parent, state)
    assert compiled == reference
    assert len(kept) in (0, 2)  # sampled (and queued) by both, or by neither
