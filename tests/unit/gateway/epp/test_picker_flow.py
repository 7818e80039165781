"""The picker's flow control and model rewrites, fed Envoy's messages in memory (no sockets):
a request waits in admission while its stream is held, a shed one is answered 429 with the
dropped-reason header, a rewritten one goes with the target and its answer names the model
asked."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.compose import build_runtime
from gateway.epp import messages as msg
from gateway.epp.pb.envoy.config.core.v3 import base_pb2
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.epp.picker import EndpointPicker
from gateway.epp.processor import ExternalProcessor, RequestStream
from gateway.runtime import Runtime
from routing.config.schema import parse_config

MODEL = "m"
PATH = "/v1/chat/completions"


def _runtime(**raw: Any) -> Runtime:
    config = {
        "backends": [{"url": "http://10.0.0.1:8000", "models": [MODEL, "m-v1", "m-v2"]}],
        "admission": {"max_in_flight_per_backend": 1, "queue_timeout_s": 30},
        "objectives": [{"name": "premium", "priority": 1}, {"name": "batch", "priority": -1}],
        **raw,
    }
    rt = build_runtime(parse_config(config), rng=random.Random(3))
    for backend in rt.pool:
        backend.state.record_probe(True, 0.0)
    return rt


def _headers(values: dict[str, str], end: bool = False) -> pb.HttpHeaders:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )
    return pb.HttpHeaders(headers=hm, end_of_stream=end)


def _body(model: str = MODEL, stream: bool = False) -> bytes:
    return orjson.dumps(
        {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi " * 30}]}
    )


class Stream:
    """One ext_proc stream: messages put in by the test, answers collected as they come."""

    def __init__(self, processor: ExternalProcessor) -> None:
        self.inbox: asyncio.Queue[pb.ProcessingRequest | None] = asyncio.Queue()
        self.answers: list[pb.ProcessingResponse] = []
        self.task = asyncio.ensure_future(self._run(processor))

    async def _messages(self) -> AsyncIterator[pb.ProcessingRequest]:
        while (req := await self.inbox.get()) is not None:
            yield req

    async def _run(self, processor: ExternalProcessor) -> None:
        async for out in processor.Process(self._messages(), None):
            self.answers.append(out)

    def request(self, headers: dict[str, str], body: bytes) -> None:
        head = {":method": "POST", ":path": PATH, **headers}
        self.inbox.put_nowait(pb.ProcessingRequest(request_headers=_headers(head)))
        self.inbox.put_nowait(
            pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
        )

    def answer(self, chunks: list[bytes], content_type: str = "application/json") -> None:
        status = _headers({":status": "200", "content-type": content_type})
        self.inbox.put_nowait(pb.ProcessingRequest(response_headers=status))
        for i, chunk in enumerate(chunks):
            end = i == len(chunks) - 1
            self.inbox.put_nowait(
                pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=end))
            )

    async def close(self) -> None:
        self.inbox.put_nowait(None)
        await asyncio.wait_for(self.task, 2.0)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _immediate(stream: Stream) -> pb.ImmediateResponse:
    [answer] = [a for a in stream.answers if a.HasField("immediate_response")]
    return answer.immediate_response


def _set(common: pb.CommonResponse) -> dict[str, bytes]:
    return {o.header.key: o.header.raw_value for o in common.header_mutation.set_headers}


async def test_a_queued_request_holds_its_stream_until_a_place_comes_back() -> None:
    rt = _runtime()
    processor = ExternalProcessor(EndpointPicker(rt.director, admission=rt.admission), 1 << 20)
    first, second = Stream(processor), Stream(processor)
    first.request({}, _body())
    await _settle()
    assert first.answers and rt.admission.admitted == 1
    second.request({"x-llm-d-inference-objective": "premium"}, _body())
    await _settle()
    assert second.answers == [msg.continue_headers(True)]  # held: no destination yet
    assert rt.admission.queue.band_sizes() == [1, 0, 0]
    first.answer([b'{"choices": []}'])
    await _settle()
    destination = second.answers[-1].request_body.response
    assert _set(destination)[msg.DESTINATION] == b"10.0.0.1:8000"
    second.answer([b'{"choices": []}'])
    await first.close()
    await second.close()
    assert rt.admission.admitted == 0


async def test_a_shed_request_is_answered_429_with_the_dropped_reason() -> None:
    rt = _runtime(admission={"max_in_flight_per_backend": 1, "max_queue": 0})
    processor = ExternalProcessor(EndpointPicker(rt.director, admission=rt.admission), 1 << 20)
    holder, shed = Stream(processor), Stream(processor)
    holder.request({}, _body())
    await _settle()
    shed.request({"x-gateway-inference-objective": "batch"}, _body())
    await shed.close()
    answer = _immediate(shed)
    assert answer.status.code == 429
    headers = {o.header.key: o.header.raw_value for o in answer.headers.set_headers}
    assert headers["x-llm-d-request-dropped-reason"] == b"rejected-saturated"
    assert int(headers["retry-after"]) >= 1
    assert orjson.loads(answer.body)["error"]["code"] == "overloaded"
    assert rt.metrics_page().count(b'kvgate_requests_total{backend="none",model="m",status="429"}')
    holder.answer([b'{"choices": []}'])
    await holder.close()
    assert rt.admission.admitted == 0


async def test_a_client_gone_while_queued_leaves_the_queue() -> None:
    rt = _runtime()
    processor = ExternalProcessor(EndpointPicker(rt.director, admission=rt.admission), 1 << 20)
    holder, leaver = Stream(processor), Stream(processor)
    holder.request({}, _body())
    await _settle()
    leaver.request({}, _body())
    await _settle()
    assert len(rt.admission.queue) == 1
    leaver.task.cancel()  # Envoy reset the stream
    await _settle()
    assert len(rt.admission.queue) == 0
    holder.answer([b'{"choices": []}'])
    await holder.close()
    assert rt.admission.admitted == 0


async def test_a_place_is_given_back_when_the_request_is_refused_after_admission() -> None:
    rt = _runtime()
    processor = ExternalProcessor(EndpointPicker(rt.director, admission=rt.admission), 1 << 20)
    unknown = Stream(processor)
    unknown.request({}, _body(model="not-served"))
    await unknown.close()
    assert _immediate(unknown).status.code == 404
    assert rt.admission.admitted == 0


REWRITE = {"rewrites": [{"models": [MODEL], "targets": [{"model": "m-v2"}]}]}


def test_a_rewritten_request_goes_with_the_target_and_the_answer_names_the_model_asked() -> None:
    rt = _runtime(**REWRITE)
    stream = RequestStream(EndpointPicker(rt.director, 0), 1 << 20)
    head = {":method": "POST", ":path": PATH, "x-gateway-model-name-rewrite": "x"}
    stream.handle(pb.ProcessingRequest(request_headers=_headers(head)))
    [answer] = stream.handle(
        pb.ProcessingRequest(request_body=pb.HttpBody(body=_body(), end_of_stream=True))
    )
    common = answer.request_body.response
    assert orjson.loads(common.body_mutation.body)["model"] == "m-v2"
    headers = _set(common)
    assert headers["x-llm-d-model-name-rewrite"] == b"m-v2"
    assert headers["content-length"] == str(len(common.body_mutation.body)).encode()
    assert "x-gateway-model-name-rewrite" in common.header_mutation.remove_headers
    status = _headers({":status": "200", "content-type": "application/json"})
    [head_answer] = stream.handle(pb.ProcessingRequest(response_headers=status))
    removed = head_answer.response_headers.response.header_mutation.remove_headers
    assert list(removed) == ["content-length"]  # the answer's length changes
    whole = b'{"id": "c", "model": "m-v2", "choices": []}'
    relayed = b""
    for i, part in enumerate((whole[:18], whole[18:])):
        [out] = stream.handle(
            pb.ProcessingRequest(response_body=pb.HttpBody(body=part, end_of_stream=i == 1))
        )
        mutation = out.response_body.response.body_mutation
        relayed += b"" if mutation.clear_body else mutation.body
    assert orjson.loads(relayed)["model"] == MODEL
    assert rt.metrics_page().count(b'kvgate_requests_total{backend="10.0.0.1:8000",model="m-v2"')


def test_a_streamed_rewritten_answer_is_renamed_event_by_event() -> None:
    rt = _runtime(**REWRITE)
    stream = RequestStream(EndpointPicker(rt.director, 0), 1 << 20)
    head = pb.ProcessingRequest(request_headers=_headers({":method": "POST", ":path": PATH}))
    head.protocol_config.request_body_mode = msg.FULL_DUPLEX
    head.protocol_config.response_body_mode = msg.FULL_DUPLEX
    stream.handle(head)
    body = _body(stream=True)
    _, body_answer = stream.handle(
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    )
    forwarded = body_answer.request_body.response.body_mutation.streamed_response.body
    sent = orjson.loads(forwarded)
    assert sent["model"] == "m-v2" and sent["stream_options"] == {"include_usage": True}
    status = _headers({":status": "200", "content-type": "text/event-stream"})
    [cont] = stream.handle(pb.ProcessingRequest(response_headers=status))
    assert cont == msg.continue_headers(False)  # an event stream has no length to drop
    event = b'data: {"model":"m-v2","choices":[{"delta":{"content":"a"}}]}\n\n'
    [out] = stream.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=event)))
    relayed = out.response_body.response.body_mutation.streamed_response.body
    assert relayed == event.replace(b'"m-v2"', b'"m"')
