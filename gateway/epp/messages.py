"""The ext_proc messages the endpoint picker reads and writes (Envoy's
`envoy.service.ext_proc.v3`, generated into `gateway.epp.pb`).

Protocol facts (the Gateway API Inference Extension's endpoint-picker protocol):
- the answer is header `x-gateway-destination-endpoint: ip:port[,ip:port...]` and the same
  value in dynamic metadata `{"envoy.lb": {"x-gateway-destination-endpoint": ...}}`;
- the proxy may restrict the choice with filter metadata
  `{"envoy.lb.subset_hint": {"x-gateway-destination-endpoint-subset": [ip:port, ...]}}`;
- the endpoint that served comes back as `envoy.lb` / `x-gateway-destination-endpoint-served`
  in the metadata context (or, where a proxy cannot write that metadata, a response header of
  that name);
- a body handed back in full-duplex mode goes in chunks of at most 62,000 bytes, as the
  reference's: some proxies cap a message near 64 KB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.protobuf import struct_pb2

from gateway.epp.pb.envoy.config.core.v3 import base_pb2
from gateway.epp.pb.envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from gateway.epp.pb.envoy.type.v3 import http_status_pb2
from gateway.errors import GatewayError

DESTINATION = "x-gateway-destination-endpoint"
SERVED = "x-gateway-destination-endpoint-served"
SUBSET = "x-gateway-destination-endpoint-subset"
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"

ProcessingRequest = pb.ProcessingRequest
ProcessingResponse = pb.ProcessingResponse
HttpBody = pb.HttpBody
FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
BODY_CHUNK_BYTES = 62_000


def header_map(headers: pb.HttpHeaders) -> dict[str, str]:
    """Lower-cased header names to values (Envoy sends `raw_value`; older ones `value`)."""
    out: dict[str, str] = {}
    for h in headers.headers.headers:
        value = h.raw_value.decode("latin-1") if h.raw_value else h.value
        out[h.key.lower()] = value
    return out


def subset_hint(req: pb.ProcessingRequest) -> list[str] | None:
    """The endpoints the proxy allows (`ip:port`), or None when it did not restrict them."""
    ns = req.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if ns is None or SUBSET not in ns.fields:
        return None
    value = ns.fields[SUBSET]
    if value.HasField("list_value"):
        return [v.string_value for v in value.list_value.values if v.string_value]
    return [p.strip() for p in value.string_value.split(",") if p.strip()]


def served_endpoint(req: pb.ProcessingRequest, headers: Mapping[str, str]) -> str | None:
    """The endpoint that served, from the metadata context, else from a response header."""
    ns = req.metadata_context.filter_metadata.get(LB_NAMESPACE)
    if ns is not None and SERVED in ns.fields and ns.fields[SERVED].string_value:
        served: str = ns.fields[SERVED].string_value
        return served
    return headers.get(SERVED) or None


def _set(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _destination_mutation(
    endpoints: str,
    new_length: int | None,
    extra: Sequence[tuple[bytes, bytes]],
    remove: Sequence[bytes],
) -> pb.CommonResponse:
    headers = [_set(DESTINATION, endpoints)]
    if new_length is not None:  # the body is forwarded changed
        headers.append(_set("content-length", str(new_length)))
    headers.extend(_set(k.decode(), v.decode("latin-1")) for k, v in extra)
    mutation = pb.HeaderMutation(set_headers=headers, remove_headers=[k.decode() for k in remove])
    return pb.CommonResponse(header_mutation=mutation, clear_route_cache=True)


def _lb_metadata(endpoints: str) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.update({LB_NAMESPACE: {DESTINATION: endpoints}})
    return meta


def destination_on_headers(
    endpoints: str,
    new_length: int | None,
    extra: Sequence[tuple[bytes, bytes]] = (),
    remove: Sequence[bytes] = (),
) -> pb.ProcessingResponse:
    """The request-headers answer naming `endpoints` (full-duplex mode: sent once the body
    is in, which follows in `streamed_bodies` of `new_length` bytes if that is given); `extra`
    headers are set too (the trace context, the prefiller), `remove` ones taken out."""
    common = _destination_mutation(endpoints, new_length, extra, remove)
    return pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=common),
        dynamic_metadata=_lb_metadata(endpoints),
    )


def destination_on_body(
    endpoints: str,
    new_body: bytes | None,
    extra: Sequence[tuple[bytes, bytes]] = (),
    remove: Sequence[bytes] = (),
) -> pb.ProcessingResponse:
    """The request-body answer naming `endpoints` (buffered mode: headers already answered,
    still held by the proxy until the body is answered), replacing the body if given;
    `extra` headers are set too (the trace context, the prefiller), `remove` ones taken out."""
    length = None if new_body is None else len(new_body)
    common = _destination_mutation(endpoints, length, extra, remove)
    if new_body is not None:
        common.body_mutation.body = new_body
    return pb.ProcessingResponse(
        request_body=pb.BodyResponse(response=common), dynamic_metadata=_lb_metadata(endpoints)
    )


def replaced_response_body(body: bytes) -> pb.ProcessingResponse:
    """A response body chunk relayed as `body` instead (streamed mode)."""
    mutation = pb.BodyMutation(body=body) if body else pb.BodyMutation(clear_body=True)
    return pb.ProcessingResponse(
        response_body=pb.BodyResponse(response=pb.CommonResponse(body_mutation=mutation))
    )


def continue_headers(request: bool) -> pb.ProcessingResponse:
    if request:
        return pb.ProcessingResponse(request_headers=pb.HeadersResponse())
    return pb.ProcessingResponse(response_headers=pb.HeadersResponse())


def response_headers_without(names: Sequence[str]) -> pb.ProcessingResponse:
    """The response-headers answer taking `names` off the answer (its length, when the body
    is changed on the way)."""
    mutation = pb.HeaderMutation(remove_headers=list(names))
    common = pb.CommonResponse(header_mutation=mutation)
    return pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=common))


def continue_body(request: bool) -> pb.ProcessingResponse:
    if request:
        return pb.ProcessingResponse(request_body=pb.BodyResponse())
    return pb.ProcessingResponse(response_body=pb.BodyResponse())


def streamed_body(request: bool, body: bytes, end: bool) -> pb.ProcessingResponse:
    """A body chunk handed back in full-duplex mode (the proxy keeps none of its own)."""
    common = pb.CommonResponse(
        body_mutation=pb.BodyMutation(
            streamed_response=pb.StreamedBodyResponse(body=body, end_of_stream=end)
        )
    )
    if request:
        return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))
    return pb.ProcessingResponse(response_body=pb.BodyResponse(response=common))


def streamed_bodies(request: bool, body: bytes, end: bool) -> list[pb.ProcessingResponse]:
    """`body` handed back in full-duplex mode, in chunks of at most `BODY_CHUNK_BYTES` (one
    empty chunk for an empty body); `end` marks the last one."""
    if not body:
        return [streamed_body(request, b"", end)]
    view, size = memoryview(body), len(body)
    return [
        streamed_body(
            request, bytes(view[i : i + BODY_CHUNK_BYTES]), end and i + BODY_CHUNK_BYTES >= size
        )
        for i in range(0, size, BODY_CHUNK_BYTES)
    ]


def continue_trailers(request: bool) -> pb.ProcessingResponse:
    if request:
        return pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
    return pb.ProcessingResponse(response_trailers=pb.TrailersResponse())


def immediate_error(exc: GatewayError, shape: str = "openai") -> pb.ProcessingResponse:
    """A JSON error (`shape`: `GatewayError.body`'s) sent to the client in place of the
    upstream answer."""
    headers = [(b"content-type", b"application/json"), *exc.headers()]
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=exc.status),
            headers=pb.HeaderMutation(
                set_headers=[
                    base_pb2.HeaderValueOption(
                        header=base_pb2.HeaderValue(key=k.decode(), raw_value=v)
                    )
                    for k, v in headers
                ]
            ),
            body=exc.body(shape),
            details=f"kvgate_epp_{exc.code}",
        )
    )
