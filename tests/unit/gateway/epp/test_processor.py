"""The ext_proc stream state machine, fed Envoy's messages in memory (no sockets)."""

from __future__ import annotations

import random

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.epp import messages as msg
from gateway.epp.pb.envoy.config.core.v3 import base_pb2
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.epp.picker import EndpointPicker
from gateway.epp.processor import RequestStream
from routing.config.schema import parse_config

MODEL = "m"
BODY = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi " * 40}]})


def _app(backends: int = 2, healthy: bool = True) -> GatewayApp:
    raw = {
        "backends": [
            {"url": f"http://10.0.0.{i}:8000", "models": [MODEL]} for i in range(1, backends + 1)
        ],
        "routing": {"policy": "round-robin"},
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(healthy, 0.0)
    return app


def _stream(app: GatewayApp) -> RequestStream:
    return RequestStream(
        EndpointPicker(app.runtime.director, max_fallbacks=1), max_body_bytes=1 << 20
    )


def _headers(end: bool = False, **extra: str) -> pb.ProcessingRequest:
    values = {":method": "POST", ":path": "/v1/chat/completions", **extra}
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hm, end_of_stream=end))


def _duplex(req: pb.ProcessingRequest) -> pb.ProcessingRequest:
    req.protocol_config.request_body_mode = msg.FULL_DUPLEX
    return req


def _body(data: bytes, end: bool = True) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=data, end_of_stream=end))


def _response_headers(
    status: str, served: str | None = None, content_type: str = "text/event-stream"
) -> pb.ProcessingRequest:
    values = {":status": status, "content-type": content_type}
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )
    req = pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hm))
    if served is not None:
        req.metadata_context.filter_metadata[msg.LB_NAMESPACE].update({msg.SERVED: served})
    return req


def _decisions(app: GatewayApp) -> float:
    text = app.runtime.metrics.render().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kvgate_routing_decisions_total"
    )


def _destination(resp: pb.ProcessingResponse, kind: str) -> str:
    common = getattr(resp, kind).response
    [option] = common.header_mutation.set_headers
    assert option.header.key == msg.DESTINATION
    value = option.header.raw_value.decode()
    lb = resp.dynamic_metadata.fields[msg.LB_NAMESPACE].struct_value
    assert lb.fields[msg.DESTINATION].string_value == value  # header and metadata agree
    return value


def test_full_duplex_answers_headers_after_the_body_and_hands_the_body_back() -> None:
    stream = _stream(_app())
    assert stream.handle(_duplex(_headers())) == []
    assert stream.handle(_body(BODY[:10], end=False)) == []
    headers, body = stream.handle(_body(BODY[10:]))
    assert _destination(headers, "request_headers") in (
        "10.0.0.1:8000,10.0.0.2:8000",
        "10.0.0.2:8000,10.0.0.1:8000",
    )
    streamed = body.request_body.response.body_mutation.streamed_response
    assert streamed.body == BODY and streamed.end_of_stream


def test_one_endpoint_per_answer_by_default() -> None:
    stream = RequestStream(EndpointPicker(_app(backends=3).runtime.director), 1 << 20)
    stream.handle(_headers())
    [answer] = stream.handle(_body(BODY))
    assert _destination(answer, "request_body") in {f"10.0.0.{i}:8000" for i in (1, 2, 3)}


def test_a_large_body_is_handed_back_in_chunks() -> None:
    stream = _stream(_app())
    body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 200_000}]})
    stream.handle(_duplex(_headers()))
    stream.handle(_body(body[:65_536], end=False))
    headers, *chunks = stream.handle(_body(body[65_536:]))
    assert headers.HasField("request_headers")
    streamed = [c.request_body.response.body_mutation.streamed_response for c in chunks]
    assert len(streamed) == 4 and all(len(s.body) <= msg.BODY_CHUNK_BYTES for s in streamed)
    assert b"".join(s.body for s in streamed) == body
    assert [s.end_of_stream for s in streamed] == [False, False, False, True]


def test_a_re_sent_last_chunk_is_not_decided_again() -> None:
    app = _app()
    stream = _stream(app)
    stream.handle(_duplex(_headers()))
    stream.handle(_body(BODY[:10], end=False))
    last = _body(BODY[10:])
    assert len(stream.handle(last)) == 2  # the destination, then the body
    exchange = stream.exchange
    assert stream.final_body(last) is None  # nothing to parse again
    assert stream.handle(last) == []  # envoy#46237: the last chunk again, end_of_stream set
    assert stream.exchange is exchange and sum(b.in_flight for b in app.runtime.pool) == 1
    assert _decisions(app) == 1


def test_buffered_continues_the_headers_and_names_the_endpoint_on_the_body() -> None:
    stream = _stream(_app())
    [cont] = stream.handle(_headers())
    assert cont.HasField("request_headers") and not cont.request_headers.HasField("response")
    [answer] = stream.handle(_body(BODY))
    assert _destination(answer, "request_body").count(",") == 1


@pytest.mark.parametrize("duplex", [False, True])
def test_a_client_own_prefiller_header_is_removed(duplex: bool) -> None:
    stream = _stream(_app())
    headers = _headers(**{"x-prefiller-host-port": "10.9.9.9:80"})
    if duplex:
        stream.handle(_duplex(headers))
        answer, _ = stream.handle(_body(BODY))
    else:
        stream.handle(headers)
        [answer] = stream.handle(_body(BODY))
    kind = "request_headers" if duplex else "request_body"
    mutation = getattr(answer, kind).response.header_mutation
    assert list(mutation.remove_headers) == ["x-prefiller-host-port"]
    assert [o.header.key for o in mutation.set_headers] == [msg.DESTINATION]


def test_the_subset_hint_limits_the_choice() -> None:
    stream = _stream(_app(backends=3))
    req = _body(BODY)
    hint = req.metadata_context.filter_metadata[msg.SUBSET_NAMESPACE]
    hint.update({msg.SUBSET: ["10.0.0.3:8000"]})
    stream.handle(_headers())
    [answer] = stream.handle(req)
    assert _destination(answer, "request_body") == "10.0.0.3:8000"


def _hinted(app: GatewayApp, hint: list[str] | str) -> pb.ProcessingResponse:
    stream = RequestStream(EndpointPicker(app.runtime.director), 1 << 20)
    stream.handle(_headers())
    req = _body(BODY)
    req.metadata_context.filter_metadata[msg.SUBSET_NAMESPACE].update({msg.SUBSET: hint})
    [answer] = stream.handle(req)
    return answer


@pytest.mark.parametrize("hint", [[], ""], ids=["empty list", "empty string"])
def test_an_empty_subset_hint_is_503(hint: list[str] | str) -> None:
    answer = _hinted(_app(backends=3), hint)
    assert answer.immediate_response.status.code == 503


def test_a_subset_hint_matching_no_backend_is_503() -> None:
    assert _hinted(_app(), ["10.0.0.99:8000"]).immediate_response.status.code == 503


def test_a_subset_entry_on_another_port_allows_the_backends_at_its_ip() -> None:
    assert _destination(_hinted(_app(backends=3), ["10.0.0.2:9999"]), "request_body") == (
        "10.0.0.2:8000"
    )


def test_an_exact_subset_entry_allows_that_backend_only() -> None:
    raw = {
        "backends": [
            {"url": f"http://10.0.0.1:{port}", "models": [MODEL]} for port in (8000, 8001, 8002)
        ],
        "routing": {"policy": "round-robin"},
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
    for _ in range(3):  # round-robin would move on, the hint holds it
        answer = _hinted(app, ["10.0.0.1:8001"])
        assert _destination(answer, "request_body") == "10.0.0.1:8001"
    shared_ip = {_destination(_hinted(app, ["10.0.0.1:7"]), "request_body") for _ in range(3)}
    assert len(shared_ip) == 3  # another port: any backend at the IP


def test_the_served_endpoint_gets_the_credit_and_the_count_is_released() -> None:
    app = _app()
    stream = _stream(app)
    stream.handle(_headers())
    [answer] = stream.handle(_body(BODY))
    picked, other = _destination(answer, "request_body").split(",")
    by_address = {b.spec.url.split("://")[1]: b for b in app.runtime.pool}
    assert by_address[picked].in_flight == 1
    stream.handle(_response_headers("200", served=other))
    assert by_address[picked].in_flight == 0 and by_address[other].in_flight == 1
    stream.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=b"data: x\n\n")))
    ttft = f'kvgate_time_to_first_token_seconds_count{{backend="{by_address[other].id}"'
    assert ttft.encode() in app.runtime.metrics.render()
    stream.handle(pb.ProcessingRequest(response_body=pb.HttpBody(end_of_stream=True)))
    assert by_address[other].in_flight == 0 and stream.ended


def test_a_cut_stream_releases_the_in_flight_count() -> None:
    app = _app()
    stream = _stream(app)
    stream.handle(_headers())
    stream.handle(_body(BODY))
    assert sum(b.in_flight for b in app.runtime.pool) == 1
    stream.close(completed=False)
    stream.close(completed=False)  # once only
    assert sum(b.in_flight for b in app.runtime.pool) == 0


def test_no_healthy_backend_is_an_immediate_503_in_openai_shape() -> None:
    stream = _stream(_app(healthy=False))
    stream.handle(_headers())
    [answer] = stream.handle(_body(BODY))
    immediate = answer.immediate_response
    assert immediate.status.code == 503
    assert orjson.loads(immediate.body)["error"]["code"] == "no_healthy_backend"
    assert stream.ended


def test_a_bad_body_is_an_immediate_400() -> None:
    stream = _stream(_app())
    stream.handle(_headers())
    [answer] = stream.handle(_body(b"{nope"))
    assert answer.immediate_response.status.code == 400
    assert orjson.loads(answer.immediate_response.body)["error"]["code"] == "invalid_json"


def test_sglang_generate_is_routed_for_the_pool_model_and_refused_in_sglangs_shape() -> None:
    app = _app()
    stream = _stream(app)
    stream.handle(_headers(**{":path": "/generate"}))
    [answer] = stream.handle(_body(orjson.dumps({"input_ids": [1, 2, 3], "stream": True})))
    assert _destination(answer, "request_body")
    assert stream.exchange is not None and stream.exchange.rec is not None
    assert stream.exchange.rec.model == MODEL  # the body names none: the pool's one model
    refused = _stream(app)
    refused.handle(_headers(**{":path": "/generate"}))
    [answer] = refused.handle(_body(b"{}"))
    assert answer.immediate_response.status.code == 400
    message = "Either text, input_ids or input_embeds should be provided."
    assert orjson.loads(answer.immediate_response.body) == {"error": {"message": message}}


@pytest.mark.parametrize("duplex", [False, True])
def test_a_request_without_a_body_is_routed_on_its_headers(duplex: bool) -> None:
    stream = _stream(_app())
    headers = _headers(end=True, **{":path": "/v1/models", ":method": "GET"})
    [answer] = stream.handle(_duplex(headers) if duplex else headers)  # no body to hand back
    assert _destination(answer, "request_headers")


def test_a_stream_is_asked_for_usage_and_the_usage_event_is_not_relayed() -> None:
    app = _app()
    stream = _stream(app)
    body = orjson.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
    )
    stream.handle(_duplex(_headers()))
    headers, forwarded = stream.handle(_body(body))
    new_body = forwarded.request_body.response.body_mutation.streamed_response.body
    assert orjson.loads(new_body)["stream_options"] == {"include_usage": True}
    lengths = [
        h.header.raw_value
        for h in headers.request_headers.response.header_mutation.set_headers
        if h.header.key == "content-length"
    ]
    assert lengths == [str(len(new_body)).encode()]
    hm = base_pb2.HeaderMap(
        headers=[
            base_pb2.HeaderValue(key=":status", raw_value=b"200"),
            base_pb2.HeaderValue(key="content-type", raw_value=b"text/event-stream"),
        ]
    )
    stream.handle(pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hm)))
    usage = (
        b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,'
        b'"prompt_tokens_details":{"cached_tokens":0}}}\n\n'
    )
    chunk = b'data: {"choices":[{"delta":{}}]}\n\n'
    [first] = stream.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk)))
    assert not first.response_body.HasField("response")  # relayed as it is
    [last] = stream.handle(
        pb.ProcessingRequest(
            response_body=pb.HttpBody(body=usage + b"data: [DONE]\n\n", end_of_stream=True)
        )
    )
    assert last.response_body.response.body_mutation.body == b"data: [DONE]\n\n"
    [hits] = app.runtime.ledger.cache_hits.values()  # the engine's answer reached the accounting
    assert hits.prompt_tokens == 5


def test_a_failure_while_picking_is_an_immediate_500(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app()
    stream = _stream(app)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(app.runtime.router, "route", broken)
    stream.handle(_headers())
    [answer] = stream.handle(_body(BODY))
    assert answer.immediate_response.status.code == 500
    assert orjson.loads(answer.immediate_response.body)["error"]["code"] == "internal_error"
    assert sum(b.in_flight for b in app.runtime.pool) == 0


def test_the_final_body_is_offered_for_tokenizing_before_the_decision() -> None:
    stream = _stream(_app())
    stream.handle(_duplex(_headers()))
    first = _body(BODY[:10], end=False)
    assert stream.final_body(first) is None
    stream.handle(first)
    last = _body(BODY[10:])
    assert stream.final_body(last) == BODY
    assert stream.path == "/v1/chat/completions"
    stream.handle(last)
    assert stream.final_body(_body(b"", end=True)) is None  # decided: nothing more to offer


async def test_the_picker_tokenizes_only_when_the_precise_index_follows_a_backend() -> None:
    from routing.kv_events import BlockStored

    app = _app()
    picker = EndpointPicker(app.runtime.director, max_fallbacks=1)

    async def token_ids(path: str, body: bytes) -> list[int] | None:
        return await picker.token_ids(await picker.parse(path, body))

    assert await token_ids("/v1/chat/completions", BODY) is None  # no tokenizer

    raw = {
        "backends": [{"url": "http://10.0.0.1:8000", "models": [MODEL]}],
        "tokenizers": [{"model": "*", "source": "engine"}],
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 1.0, rng=random.Random(1)))
    picker = EndpointPicker(app.runtime.director, max_fallbacks=1)
    assert await token_ids("/v1/chat/completions", BODY) is None  # no events yet
    app.runtime.stack.precise.apply(
        "10.0.0.1:8000", [BlockStored((1,), None, tuple(range(16)), 16)]
    )
    calls = []

    async def fake(req: object) -> list[int]:
        calls.append(req)
        return [1, 2, 3]

    app.runtime.director.token_ids = fake  # type: ignore[method-assign]
    assert await token_ids("/v1/chat/completions", BODY) == [1, 2, 3]
    assert await token_ids("/v1/chat/completions", b"{not json") is None
    assert await token_ids("/v1/models", b"") is None
    assert len(calls) == 1
    await app.runtime.tokenizers.aclose()
