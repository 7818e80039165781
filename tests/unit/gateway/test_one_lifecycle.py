"""One request lifecycle: the same request and the same answer, on the same clock, through the
front door (its inference handler and proxy) and through the endpoint picker (ext_proc
messages), leave identical accounting — metrics, the prefix index, pending prefill, in-flight
counts, passive health, the engine's cache hits and what the shared state is told, in order —
and the same stored responses learnt and followed."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.epp.pb.envoy.config.core.v3 import base_pb2
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.epp.picker import EndpointPicker
from gateway.epp.processor import ExternalProcessor, RequestStream
from gateway.proxy import Proxy
from gateway.runtime import Runtime
from routing.config.schema import parse_config
from tests.support.state_sink import RecordingSink

MODEL = "m"
PATH = "/v1/chat/completions"
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 2,
    "prompt_tokens_details": {"cached_tokens": 0},
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Answer:
    """What the engine answers: status, content type, body chunks, each `step_s` apart."""

    status: int
    content_type: str
    chunks: tuple[bytes, ...]
    step_s: float = 0.01


def _sse(*events: object) -> tuple[bytes, ...]:
    return (*(b"data: " + orjson.dumps(e) + b"\n\n" for e in events), b"data: [DONE]\n\n")


STREAMED = Answer(
    200,
    "text/event-stream",
    _sse(
        {"choices": [{"delta": {"content": "a"}}]},
        {"choices": [{"delta": {"content": "b"}}]},
        {"choices": [], "usage": USAGE},
    ),
)
WHOLE = Answer(200, "application/json", (orjson.dumps({"choices": [], "usage": USAGE}),))
REFUSED = Answer(503, "application/json", (b'{"error": {"message": "busy"}}',))
BAD = Answer(400, "application/json", (b'{"error": {"message": "no"}}',))


def _runtime(clock: Clock) -> tuple[Runtime, RecordingSink]:
    raw = {
        "backends": [{"url": f"http://10.0.0.{i}:8000", "models": [MODEL]} for i in (1, 2)],
        "server": {"access_log": False},
    }
    rt = build_runtime(parse_config(raw), clock=clock, rng=random.Random(7))
    for backend in rt.pool:
        backend.state.record_probe(True, 0.0)
    sink = RecordingSink()
    rt.ledger.sink = sink
    return rt, sink


class _Response:
    """An upstream answer as the proxy reads it, on the test's clock."""

    def __init__(self, answer: Answer, clock: Clock) -> None:
        self.status_code = answer.status
        self.headers = [(b"content-type", answer.content_type.encode())]
        self._answer, self._clock, self._left = answer, clock, len(answer.chunks)

    def header(self, name: bytes) -> bytes | None:
        return dict(self.headers).get(name)

    @property
    def at_end(self) -> bool:
        return self._left == 0

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self._answer.chunks:
            self._clock.now += self._answer.step_s
            self._left -= 1
            yield chunk

    async def aclose(self) -> None:
        pass


class _Client:
    def __init__(self, answer: Answer, clock: Clock) -> None:
        self._answer, self._clock = answer, clock

    async def send(self, *args: object, **kwargs: object) -> _Response:
        self._clock.now += self._answer.step_s  # the response head
        return _Response(self._answer, self._clock)


async def _front_door(
    body: bytes,
    answer: Answer,
    clock: Clock,
    rt: Runtime | None = None,
    path: str = PATH,
    method: str = "POST",
) -> Runtime:
    rt = rt or _runtime(clock)[0]
    app = GatewayApp(rt)
    app.inference.proxy = Proxy(rt.director, _Client(answer, clock), max_attempts=1)  # type: ignore[arg-type]
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"r1")],
        "client": ("127.0.0.1", 5000),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent[0]["status"] == answer.status
    return rt


def _header_map(values: dict[str, str]) -> base_pb2.HeaderMap:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )


def _picker(body: bytes, answer: Answer, clock: Clock) -> Runtime:
    rt, _ = _runtime(clock)
    stream = RequestStream(EndpointPicker(rt.director, max_fallbacks=0), 1 << 20)
    head = {":method": "POST", ":path": PATH, "x-request-id": "r1"}
    stream.handle(pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=_header_map(head))))
    stream.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)))
    clock.now += answer.step_s  # the response head
    status = {":status": str(answer.status), "content-type": answer.content_type}
    stream.handle(
        pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_header_map(status)))
    )
    for i, chunk in enumerate(answer.chunks):
        clock.now += answer.step_s
        end = i == len(answer.chunks) - 1
        stream.handle(
            pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=end))
        )
    assert stream.ended
    stream.close(completed=True)
    return rt


# Not the lifecycle's: how long a decision took (real time, perf_counter), the admission
# queue, which only the front door passes (its counts, not its gauges' presence, matter here),
# and the process's own figures.
UNCOMPARED = re.compile(
    r"^process_|^#|decision_duration_seconds_(bucket|sum)|"
    r"scheduler_e2e_duration_seconds_(bucket|sum)|^kvgate_admission_queue_length"
)


def _accounting(rt: Runtime) -> dict[str, Any]:
    page = rt.metrics_page().decode().splitlines()
    ledger = rt.ledger
    return {
        "metrics": [line for line in page if not UNCOMPARED.search(line)],
        "told": ledger.sink.calls,  # type: ignore[union-attr]
        "in_flight": [b.in_flight for b in rt.pool],
        "pending": [b.pending_prefill_tokens for b in rt.pool],
        "dispatched": [b.dispatched for b in rt.pool],
        "failures": [(b.state._upstream_fails, b.state.last_error) for b in rt.pool],
        "index": [rt.stack.index.blocks(b.id) for b in rt.pool],
        "cache_hits": dict(ledger.cache_hits),
        "ttft_lines": rt.stack.ttft_model.lines([b.id for b in rt.pool]),
    }


CASES = {
    "streamed": (STREAMED, True),
    "whole": (WHOLE, False),
    "503-streamed": (REFUSED, True),
    "503": (REFUSED, False),
    "400": (BAD, False),
}


@pytest.mark.parametrize(("answer", "stream"), CASES.values(), ids=CASES.keys())
async def test_front_door_and_picker_account_alike(answer: Answer, stream: bool) -> None:
    content = "the same long system prompt for every turn " * 20
    body = orjson.dumps(
        {"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": content}]}
    )
    front = _accounting(await _front_door(body, answer, Clock()))
    picked = _accounting(_picker(body, answer, Clock()))
    assert front == picked
    assert front["in_flight"] == [0, 0] and front["pending"] == [0, 0]
    assert front["told"][-1] == ("load_changed",)  # the end is reported at once, on both paths
    assert any(line.startswith("kvgate_requests_total") for line in front["metrics"])


# -- stored responses (Responses API) ---------------------------------------------------

RESPONSES = "/v1/responses"
RESPONSE_USAGE = {
    "input_tokens": 120,
    "output_tokens": 2,
    "input_tokens_details": {"cached_tokens": 0},
}


def _response(status: str, response_id: str = "resp_1") -> dict[str, Any]:
    return {"id": response_id, "object": "response", "status": status, "output": []}


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


STORED_WHOLE = Answer(
    200, "application/json", (orjson.dumps({**_response("completed"), "usage": RESPONSE_USAGE}),)
)
FOLLOWED = Answer(
    200,
    "application/json",
    (orjson.dumps({**_response("completed", "resp_2"), "usage": RESPONSE_USAGE}),),
)
STORED_STREAMED = Answer(
    200,
    "text/event-stream",
    (
        _event("response.created", {"response": _response("in_progress")}),
        _event("response.output_text.delta", {"delta": "a"}),
        _event(
            "response.completed",
            {"response": {**_response("completed"), "usage": RESPONSE_USAGE}},
        ),
    ),
)


async def _picked(
    rt: Runtime, body: bytes, answer: Answer, clock: Clock, path: str, method: str
) -> None:
    """One request through the endpoint picker's gRPC servicer, as Envoy streams it."""
    processor = ExternalProcessor(EndpointPicker(rt.director, max_fallbacks=0), 1 << 20)

    async def messages() -> AsyncIterator[pb.ProcessingRequest]:
        head = _header_map({":method": method, ":path": path, "x-request-id": "r1"})
        yield pb.ProcessingRequest(
            request_headers=pb.HttpHeaders(headers=head, end_of_stream=not body)
        )
        if body:
            yield pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
        clock.now += answer.step_s
        status = {":status": str(answer.status), "content-type": answer.content_type}
        yield pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_header_map(status)))
        for i, chunk in enumerate(answer.chunks):
            clock.now += answer.step_s
            end = i == len(answer.chunks) - 1
            yield pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=end))

    answers = [out async for out in processor.Process(messages(), None)]
    assert not any(a.HasField("immediate_response") for a in answers)


def _dispatched(rt: Runtime) -> list[int]:
    return [b.dispatched for b in rt.pool]


@pytest.mark.parametrize("answer", [STORED_WHOLE, STORED_STREAMED], ids=["whole", "streamed"])
async def test_front_door_and_picker_follow_stored_responses_alike(answer: Answer) -> None:
    stream = answer is STORED_STREAMED
    content = "the same long question for every turn " * 20
    create = orjson.dumps({"model": MODEL, "stream": stream, "input": content})
    follow = orjson.dumps({"model": MODEL, "input": content, "previous_response_id": "resp_1"})
    seen: list[dict[str, Any]] = []
    for transport in ("front door", "picker"):
        clock = Clock()
        rt, _ = _runtime(clock)
        steps = [
            (create, answer, RESPONSES, "POST"),
            (follow, FOLLOWED, RESPONSES, "POST"),
            (b"", STORED_WHOLE, RESPONSES + "/resp_1", "GET"),
            (b"", STORED_WHOLE, RESPONSES + "/resp_1/cancel", "POST"),
        ]
        dispatched = []
        for body, reply, path, method in steps:
            if transport == "front door":
                await _front_door(body, reply, clock, rt, path, method)
            else:
                await _picked(rt, body, reply, clock, path, method)
            dispatched.append(_dispatched(rt))
        affinity = rt.director.affinity
        assert affinity is not None
        owner = affinity.owners.get("resp_1")
        first = [b.id for b in rt.pool][dispatched[0].index(1)]
        assert owner == first  # learnt from the answer, then every later request went there
        assert affinity.owners.get("resp_2") == owner  # the follow-up's own answer too
        assert [d[dispatched[0].index(1)] for d in dispatched] == [1, 2, 3, 4]
        seen.append(_accounting(rt))
    assert seen[0] == seen[1]
    metrics = "\n".join(seen[0]["metrics"])
    assert 'reason="affinity"' in metrics
    assert 'kvgate_response_affinity_total{event="learned"} 2.0' in metrics
    assert 'kvgate_response_affinity_total{event="local"} 3.0' in metrics
    assert 'kvgate_response_affinity_total{event="unknown"} 0.0' in metrics


async def test_an_unknown_stored_response_is_answered_by_the_gateway_on_both_paths() -> None:
    clock = Clock()
    rt, _ = _runtime(clock)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {
        "type": "http", "method": "GET", "path": RESPONSES + "/resp_x", "query_string": b"",
        "headers": [], "client": ("127.0.0.1", 5000),
    }  # fmt: skip
    await GatewayApp(rt)(scope, receive, send)
    assert sent[0]["status"] == 404
    assert orjson.loads(sent[1]["body"])["error"]["param"] == "response_id"
    stream = RequestStream(EndpointPicker(rt.director, max_fallbacks=0), 1 << 20)
    head = _header_map({":method": "GET", ":path": RESPONSES + "/resp_x"})
    out = stream.handle(
        pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=head, end_of_stream=True))
    )
    assert out[0].immediate_response.status.code == 404
    assert _dispatched(rt) == [0, 0]
