"""Under `kvgate epp` with shared state, the end of a request reaches the other gateways at
once (a load report now), as at the front door, not with the next load interval."""

from __future__ import annotations

import random

import orjson

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.epp.picker import EndpointPicker
from routing.config.schema import parse_config
from tests.support.state_sink import RecordingSink

MODEL = "m"
BODY = orjson.dumps(
    {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
)


def test_the_end_of_a_streamed_request_is_reported_at_once() -> None:
    raw = {"backends": [{"url": "http://10.0.0.1:8000", "models": [MODEL]}]}
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
    sink = app.runtime.ledger.sink = RecordingSink()
    picker = EndpointPicker(app.runtime.director)
    ex = picker.pick("/v1/chat/completions", {}, BODY, "r1")
    picker.response_status(ex, 200, "text/event-stream")
    picker.response_chunk(ex, b'data: {"choices": []}\n\n', end=False)
    told = len(sink.calls)
    picker.finish(ex, completed=True)
    assert [b.in_flight for b in app.runtime.pool] == [0]
    assert sink.calls[told:] == [
        ("load_changed",)
    ]  # the in-flight count dropped: the others hear it now
