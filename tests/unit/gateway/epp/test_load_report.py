"""Under `kvgate epp` with shared state, the end of a request reaches the other gateways at
once (a load report now), as at the front door, not with the next load interval."""

from __future__ import annotations

import random

import orjson

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.epp.picker import EndpointPicker
from routing.config.schema import parse_config
from routing.types import RoutingRequest

MODEL = "m"
BODY = orjson.dumps(
    {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
)


class Sink:
    """A shared-state sink that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def placed(self, backend_id: str, request: RoutingRequest, uncached_tokens: int) -> None:
        self.told.append("placed")

    def withdrawn(self, backend_id: str, request: RoutingRequest, start: int) -> None:
        self.told.append("withdrawn")

    def evicted(self, backend_id: str, request: RoutingRequest, weight: int) -> None:
        self.told.append("evicted")

    def forgotten(self, backend_id: str) -> None:
        self.told.append("forgotten")

    def ttft(self, backend_id: str, work_tokens: float, ttft_s: float) -> None:
        self.told.append("ttft")

    def load_changed(self) -> None:
        self.told.append("load")


def test_the_end_of_a_streamed_request_is_reported_at_once() -> None:
    raw = {"backends": [{"url": "http://10.0.0.1:8000", "models": [MODEL]}]}
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
    sink = app.runtime.ledger.sink = Sink()
    picker = EndpointPicker(app.runtime.director)
    ex = picker.pick("/v1/chat/completions", {}, BODY, "r1")
    picker.response_status(ex, 200, "text/event-stream")
    picker.response_chunk(ex, b'data: {"choices": []}\n\n', end=False)
    told = len(sink.told)
    picker.finish(ex, completed=True)
    assert [b.in_flight for b in app.runtime.pool] == [0]
    assert sink.told[told:] == ["load"]  # the in-flight count dropped: the others hear it now
