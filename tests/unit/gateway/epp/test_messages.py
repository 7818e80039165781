"""Reading the proxy's metadata and building the picker's answers."""

from __future__ import annotations

import orjson

from gateway.epp import messages as msg
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.errors import NoHealthyBackendError


def _with(namespace: str, fields: dict[str, object]) -> pb.ProcessingRequest:
    req = pb.ProcessingRequest()
    req.metadata_context.filter_metadata[namespace].update(fields)
    return req


def test_subset_hint_as_a_list_or_a_comma_separated_string() -> None:
    listed = _with(msg.SUBSET_NAMESPACE, {msg.SUBSET: ["10.0.0.1:80", "10.0.0.2:80"]})
    assert msg.subset_hint(listed) == ["10.0.0.1:80", "10.0.0.2:80"]
    joined = _with(msg.SUBSET_NAMESPACE, {msg.SUBSET: "10.0.0.1:80, 10.0.0.2:80"})
    assert msg.subset_hint(joined) == ["10.0.0.1:80", "10.0.0.2:80"]
    assert msg.subset_hint(pb.ProcessingRequest()) is None


def test_served_endpoint_from_metadata_else_the_response_header() -> None:
    req = _with(msg.LB_NAMESPACE, {msg.SERVED: "10.0.0.2:80"})
    assert msg.served_endpoint(req, {msg.SERVED: "10.0.0.9:80"}) == "10.0.0.2:80"
    assert msg.served_endpoint(pb.ProcessingRequest(), {msg.SERVED: "10.0.0.9:80"}) == (
        "10.0.0.9:80"
    )
    assert msg.served_endpoint(pb.ProcessingRequest(), {}) is None


def test_immediate_error_is_openai_shaped_with_its_headers() -> None:
    resp = msg.immediate_error(NoHealthyBackendError("no healthy backend")).immediate_response
    assert resp.status.code == 503
    headers = {h.header.key: h.header.raw_value for h in resp.headers.set_headers}
    assert headers == {
        "content-type": b"application/json",
        "retry-after": b"1",
        "x-llm-d-request-dropped-reason": b"rejected-no-endpoints",
    }
    assert orjson.loads(resp.body)["error"]["type"]


def test_an_emptied_response_chunk_is_cleared() -> None:
    mutation = msg.replaced_response_body(b"").response_body.response.body_mutation
    assert mutation.clear_body


def test_a_body_goes_back_in_chunks_of_at_most_62000_bytes() -> None:
    body = bytes(range(256)) * 800  # 204,800 bytes
    chunks = [
        r.request_body.response.body_mutation.streamed_response
        for r in msg.streamed_bodies(True, body, end=True)
    ]
    assert [len(c.body) for c in chunks] == [62_000, 62_000, 62_000, 18_800]
    assert [c.end_of_stream for c in chunks] == [False, False, False, True]
    assert b"".join(c.body for c in chunks) == body
    exact = msg.streamed_bodies(False, b"x" * 124_000, end=False)
    assert [len(r.response_body.response.body_mutation.streamed_response.body) for r in exact] == [
        62_000,
        62_000,
    ]
    assert not any(
        r.response_body.response.body_mutation.streamed_response.end_of_stream for r in exact
    )


def test_an_empty_body_goes_back_as_one_empty_chunk() -> None:
    [only] = msg.streamed_bodies(True, b"", end=True)
    streamed = only.request_body.response.body_mutation.streamed_response
    assert streamed.body == b"" and streamed.end_of_stream
