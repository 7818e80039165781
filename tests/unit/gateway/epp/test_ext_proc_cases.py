"""The reference picker's ext_proc-level cases (llm-d's hermetic and handler tests), as
behaviours of kvgate's servicer: Envoy's messages in, in memory, the answers out."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.epp import messages as msg
from gateway.epp.pb.envoy.config.core.v3 import base_pb2
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.epp.picker import EndpointPicker
from gateway.epp.processor import ExternalProcessor
from gateway.epp.request_metrics import EppRequestMetrics
from routing.config.schema import parse_config
from routing.types import EngineMetrics

MODEL = "sql-lora"
Request = pb.ProcessingRequest
Response = pb.ProcessingResponse


def _app(backends: int = 3, *, healthy: bool = True, policy: str = "least-load") -> GatewayApp:
    raw = {
        "backends": [
            {"url": f"http://192.168.1.{i}:8000", "models": [MODEL]} for i in range(1, backends + 1)
        ],
        "routing": {"policy": policy},
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(healthy, 0.0)
    return app


def _header_map(values: dict[str, str]) -> base_pb2.HeaderMap:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )


def _headers(values: dict[str, str], *, end: bool = False, duplex: bool = True) -> Request:
    req = Request(request_headers=pb.HttpHeaders(headers=_header_map(values), end_of_stream=end))
    if duplex:
        req.protocol_config.request_body_mode = msg.FULL_DUPLEX
    return req


CHAT = {":method": "POST", ":path": "/v1/completions", "x-request-id": "test-request-id"}


def _body(data: bytes | str, end: bool = True) -> Request:
    raw = data.encode() if isinstance(data, str) else data
    return Request(request_body=pb.HttpBody(body=raw, end_of_stream=end))


def _completion(prompt: str = "test6") -> bytes:
    return orjson.dumps({"max_tokens": 100, "model": MODEL, "prompt": prompt, "temperature": 0})


def _with_subset(req: Request, *endpoints: str) -> Request:
    hint = req.metadata_context.filter_metadata[msg.SUBSET_NAMESPACE]
    hint.update({msg.SUBSET: list(endpoints)})
    return req


def _response(status: str, content_type: str) -> Request:
    values = {":status": status, "content-type": content_type}
    return Request(response_headers=pb.HttpHeaders(headers=_header_map(values)))


def _response_body(data: str, end: bool) -> Request:
    return Request(response_body=pb.HttpBody(body=data.encode(), end_of_stream=end))


async def _run(app: GatewayApp, requests: Sequence[Request]) -> list[Response]:
    metrics = app.runtime.metrics
    counted = EppRequestMetrics(metrics.registry, metrics.model_label)
    processor = ExternalProcessor(EndpointPicker(app.runtime.director, metrics=counted), 1 << 22)

    async def stream() -> AsyncIterator[Request]:
        for r in requests:
            yield r

    return [out async for out in processor.Process(stream(), None)]


def _routed_to(answers: Sequence[Response]) -> str:
    """The destination of a full-duplex answer (headers first, then the body), checked
    against its metadata."""
    first = answers[0]
    assert first.HasField("request_headers"), first
    [dest] = [
        o.header.raw_value.decode()
        for o in first.request_headers.response.header_mutation.set_headers
        if o.header.key == msg.DESTINATION
    ]
    lb = first.dynamic_metadata.fields[msg.LB_NAMESPACE].struct_value
    assert lb.fields[msg.DESTINATION].string_value == dest
    return dest


def _forwarded_body(answers: Sequence[Response]) -> bytes:
    chunks = [a.request_body.response.body_mutation.streamed_response for a in answers[1:]]
    assert chunks and chunks[-1].end_of_stream
    return b"".join(c.body for c in chunks)


def _immediate(answers: Sequence[Response]) -> tuple[int, dict[str, object]]:
    [only] = answers
    resp = only.immediate_response
    return resp.status.code, orjson.loads(resp.body)


def _metric(app: GatewayApp, name: str, **labels: str) -> float:
    text = app.runtime.metrics.render().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_select_lower_queue_and_kv_cache() -> None:
    app = _app()
    for i, (waiting, kv) in enumerate([(3, 0.2), (0, 0.1), (10, 0.2)], 1):
        backend = app.runtime.pool.get(f"192.168.1.{i}:8000")
        backend.metrics = EngineMetrics(scraped_at=1.0, waiting=waiting, kv_usage=kv)
    answers = await _run(app, [_headers(CHAT), _body(_completion())])
    assert _routed_to(answers) == "192.168.1.2:8000"
    assert _forwarded_body(answers) == _completion()


async def test_split_body_across_chunks() -> None:
    body = _completion()
    answers = await _run(app := _app(), [_headers(CHAT), _body(body[:30], False), _body(body[30:])])
    assert _routed_to(answers)
    assert _forwarded_body(answers) == body  # handed back whole, in order
    assert _metric(app, "llm_d_epp_request_total", model_name=MODEL) == 1


async def test_invalid_json_body_is_400() -> None:
    status, body = _immediate(await _run(_app(), [_headers(CHAT), _body("no healthy upstream")]))
    assert status == 400 and body["error"]["code"] == "invalid_json"  # type: ignore[index]


async def test_request_missing_model_field_is_400() -> None:
    answers = await _run(_app(), [_headers(CHAT), _body('{"prompt":"hello world"}')])
    status, body = _immediate(answers)
    assert status == 400 and body["error"]["code"] == "missing_field"  # type: ignore[index]


async def test_no_backend_available_is_503() -> None:
    app = _app(healthy=False)
    status, body = _immediate(await _run(app, [_headers(CHAT), _body(_completion())]))
    assert status == 503 and body["error"]["code"] == "no_healthy_backend"  # type: ignore[index]
    assert _metric(app, "llm_d_epp_request_error_total", error_code="ServiceUnavailable") == 1


@pytest.mark.parametrize(
    ("subset", "want"),
    [
        (("192.168.1.1:8000", "192.168.1.2:8000", "192.168.1.3:8000"), None),
        (("192.168.1.3:8000",), "192.168.1.3:8000"),  # partial: the one it names
        (("192.168.1.3:9000",), "192.168.1.3:8000"),  # another port: matched by IP
    ],
    ids=["all", "partial", "by IP"],
)
async def test_subsetting_picks_within_the_hint(subset: tuple[str, ...], want: str | None) -> None:
    answers = await _run(_app(), [_with_subset(_headers(CHAT), *subset), _body(_completion())])
    dest = _routed_to(answers)
    assert dest in subset if want is None else dest == want


@pytest.mark.parametrize("subset", [("192.168.1.99:8000",), ()], ids=["no match", "empty"])
async def test_subsetting_without_a_match_is_503(subset: tuple[str, ...]) -> None:
    answers = await _run(_app(), [_with_subset(_headers(CHAT), *subset), _body(_completion())])
    assert _immediate(answers)[0] == 503


async def test_simple_get_is_routed_on_its_headers() -> None:
    get = {":method": "GET", ":path": "/v1/models"}
    [answer] = await _run(_app(), [_headers(get, end=True)])
    assert _routed_to([answer]).startswith("192.168.1.")


async def test_response_buffering_multi_chunk_json_is_relayed_unchanged() -> None:
    chunks = ['{"id":"x","choices":[],"usage":{"prompt_tokens":7,', '"completion_tokens":10}}']
    requests = [
        _headers(CHAT),
        _body(_completion()),
        _response("200", "application/json"),
        _response_body(chunks[0], False),
        _response_body(chunks[1], False),
        _response_body("", True),  # an empty end-of-stream chunk
    ]
    app = _app()
    answers = await _run(app, requests)
    relayed = [a for a in answers if a.HasField("response_body")]
    assert len(relayed) == 3 and not any(a.response_body.HasField("response") for a in relayed)
    assert _metric(app, "llm_d_epp_request_input_tokens_sum", model_name=MODEL) == 7
    assert _metric(app, "llm_d_epp_request_output_tokens_sum", model_name=MODEL) == 10
    assert _metric(app, "llm_d_epp_request_running") == 0


async def test_response_streaming_counts_the_usage_tokens() -> None:
    stream = orjson.dumps(
        {"model": MODEL, "prompt": "hi", "stream": True, "stream_options": {"include_usage": True}}
    )
    requests = [
        _headers(CHAT),
        _body(stream),
        _response("200", "text/event-stream"),
        _response_body("data: {}\n\n", False),
        _response_body(
            'data: {"usage":{"prompt_tokens":7,"total_tokens":17,"completion_tokens":10}}\n\n'
            "data: [DONE]\n\n",
            False,
        ),
        _response_body("", True),
    ]
    app = _app()
    await _run(app, requests)
    assert _metric(app, "inference_objective_input_tokens_sum", model_name=MODEL) == 7
    assert _metric(app, "llm_d_epp_request_output_tokens_count", model_name=MODEL) == 1


async def test_an_engine_error_is_a_model_server_error() -> None:
    requests = [
        _headers(CHAT),
        _body(_completion()),
        _response("500", "application/json"),
        _response_body('{"error":"boom"}', True),
    ]
    app = _app()
    await _run(app, requests)
    assert _metric(app, "llm_d_epp_request_error_total", error_code="ModelServerError") == 1


async def test_a_re_sent_end_of_stream_chunk_yields_one_decision() -> None:
    body = _completion("x" * 300_000)
    last = _body(body[65_536:])
    app = _app()
    answers = await _run(app, [_headers(CHAT), _body(body[:65_536], False), last, last])
    assert _forwarded_body(answers) == body  # the duplicate is not handed back
    assert all(len(a.request_body.response.body_mutation.streamed_response.body) <= 62_000
               for a in answers[1:])  # fmt: skip
    assert _metric(app, "kvgate_routing_decisions_total") == 1
    assert _metric(app, "llm_d_epp_request_total") == 1


def test_header_keys_are_lowercased_and_raw_values_preferred() -> None:
    hm = base_pb2.HeaderMap(
        headers=[
            base_pb2.HeaderValue(key="X-Kvgate-Policy", raw_value=b"round-robin"),
            base_pb2.HeaderValue(key="x-old", value="legacy", raw_value=b"raw"),
        ]
    )
    assert msg.header_map(pb.HttpHeaders(headers=hm)) == {
        "x-kvgate-policy": "round-robin",
        "x-old": "raw",
    }


async def test_grpc_response_trailers_end_the_request_once() -> None:
    requests = [
        _headers(CHAT),
        _body(_completion()),
        _response("200", "application/grpc"),
        _response_body("frame", False),
        Request(response_trailers=pb.HttpTrailers()),
    ]
    app = _app()
    answers = await _run(app, requests)
    assert answers[-1].HasField("response_trailers")
    assert _metric(app, "llm_d_epp_request_running") == 0
    assert _metric(app, "kvgate_requests_total", status="200") == 1
