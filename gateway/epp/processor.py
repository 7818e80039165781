"""The ext_proc stream of one request: Envoy's messages in, the picker's answers out.

Request side, by the body mode the proxy announces (`protocol_config`):
- `FULL_DUPLEX_STREAMED`: the headers are answered once the whole body is in (the answer
  carries the destination), then the body is handed back in streamed chunks;
- `BUFFERED` (and anything else): the headers are answered at once with no change, and the
  body answer carries the destination header (the proxy holds the headers until then).
One decision per request: body chunks after it are dropped (envoy#46237 re-sends the last).
Before it, an inference call waits for its place in admission (the proxy holds it; a place no
exchange takes goes back when the stream closes) and a stored response's backend is found.
Response side: the status and the served endpoint from the headers, TTFT from the first body
chunk, the usage from the last ones; a stream whose client did not ask for usage is forwarded
asking for it and the usage event taken out, as at the front door. Errors the picker raises
become immediate responses. What an answer says of stored responses is settled before the
message carrying it is answered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from gateway.access_log import clip, request_id_from
from gateway.epp import messages as msg
from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from gateway.epp.picker import Admitted, EndpointPicker, Exchange, Parsed
from gateway.errors import GatewayError, PayloadTooLargeError
from gateway.inference_request import ERROR_SHAPES
from gateway.responses.affinity import Pin
from gateway.responses.ids import object_path

log = logging.getLogger(__name__)
Responses = list[msg.ProcessingResponse]


class RequestStream:
    """State of one ext_proc stream; `handle` maps each message to the answers it needs."""

    def __init__(self, picker: EndpointPicker, max_body_bytes: int) -> None:
        self._picker = picker
        self._limit = max_body_bytes
        self._request_duplex = False
        self._response_duplex = False
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._decided = False
        self._subset: list[str] | None = None
        self.exchange: Exchange | None = None
        self.ended = False  # the response is over (or answered immediately)
        self.parsed: Parsed | None = None  # the final body, parsed before the decision
        self.token_ids: list[int] | None = None  # the prompt's, for the precise index
        self.pin: Pin | None = None  # the backend of the stored response it names
        self.admitted: Admitted = None  # its place in admission until an exchange takes it

    @property
    def path(self) -> str:
        return self._headers.get(":path", "")

    @property
    def headers(self) -> dict[str, str]:
        return self._headers

    def names_stored_response(self, req: msg.ProcessingRequest) -> str | None:
        """The path of a request on a stored response, when `req` brings its headers (its
        backend is looked up before they are handled: a GET may be decided on them)."""
        if req.WhichOneof("request") != "request_headers":
            return None
        path = msg.header_map(req.request_headers).get(":path", "")
        return path if object_path(path.split("?", 1)[0]) is not None else None

    def final_body(self, req: msg.ProcessingRequest) -> bytes | None:
        """The whole request body when `req` completes it (the decision comes next), else
        None: the caller may parse and tokenize it first (`parsed`, `token_ids`), which
        `handle` cannot await."""
        if self._decided:
            return None
        kind = req.WhichOneof("request")
        if kind == "request_trailers":
            return b"".join(self._body)
        if kind != "request_body":
            return None
        chunk = req.request_body
        if not chunk.end_of_stream or self._size + len(chunk.body) > self._limit:
            return None
        return b"".join((*self._body, chunk.body))

    def handle(self, req: msg.ProcessingRequest) -> Responses:
        if req.HasField("protocol_config"):
            cfg = req.protocol_config
            self._request_duplex = cfg.request_body_mode == msg.FULL_DUPLEX
            self._response_duplex = cfg.response_body_mode == msg.FULL_DUPLEX
        if (hint := msg.subset_hint(req)) is not None:  # with any message; empty: 503
            self._subset = hint
        kind = req.WhichOneof("request")
        if kind == "request_headers":
            self._headers = msg.header_map(req.request_headers)
            if req.request_headers.end_of_stream:
                return self._decide(on_body=False)
            return [] if self._request_duplex else [msg.continue_headers(True)]
        if kind == "request_body":
            return self._request_body(req)
        if kind == "request_trailers":
            out = [] if self._decided else self._decide(on_body=False, end=False)
            return [*out, msg.continue_trailers(True)]
        if kind == "response_headers":
            return self._response_headers(req)
        if kind == "response_body":
            return self._response_body(req.response_body)
        if kind == "response_trailers":
            self.close(completed=True)
            return [msg.continue_trailers(False)]
        return []

    def close(self, completed: bool) -> None:
        """Settle the exchange's accounting (once); `completed` is False when cut short."""
        self.ended = self.ended or completed
        if self.exchange is not None:
            self._picker.finish(self.exchange, completed)
        admitted, self.admitted = self.admitted, None
        self._picker.give_back(admitted)

    def _request_body(self, req: msg.ProcessingRequest) -> Responses:
        chunk = req.request_body
        if self._decided:  # a chunk re-sent after the end of the body: already answered
            log.debug("request body chunk after the decision dropped (%d bytes)", len(chunk.body))
            return []
        self._body.append(chunk.body)
        self._size += len(chunk.body)
        if self._size > self._limit:
            self.ended = True
            exc = PayloadTooLargeError(f"request body exceeds the limit of {self._limit} bytes")
            return [msg.immediate_error(exc)]
        if chunk.end_of_stream:
            return self._decide(on_body=not self._request_duplex)
        return [] if self._request_duplex else [msg.continue_body(True)]

    def _decide(self, *, on_body: bool, end: bool = True) -> Responses:
        self._decided = True
        body = b"".join(self._body)
        request_id = request_id_from(self._headers.get("x-request-id"))
        try:
            ex = self._picker.pick(
                self._headers.get(":path", ""),
                self._headers,
                body,
                request_id,
                self._subset,
                token_ids=self.token_ids,
                parsed=self.parsed,
                pin=self.pin,
                admitted=self.admitted,
            )
        except GatewayError as exc:
            self.ended = True
            log.info("request %s answered %d: %s", request_id, exc.status, clip(exc.message))
            path = self._headers.get(":path", "").split("?", 1)[0]
            return [msg.immediate_error(exc, ERROR_SHAPES.get(path, "openai"))]
        except Exception:  # a bug must not cost the proxy its stream: answer a plain 500
            self.ended = True
            log.exception("request %s: picking failed", request_id)
            return [msg.immediate_error(GatewayError("internal endpoint picker error"))]
        self.exchange = ex
        self.admitted = None  # the exchange holds the place now
        extra, drop = ex.request_headers(), ex.removed_headers()
        if on_body:
            return [msg.destination_on_body(ex.destination, ex.body, extra, drop)]
        new_length = None
        if self._request_duplex and ex.body is not None:
            body, new_length = ex.body, len(ex.body)
        out = [msg.destination_on_headers(ex.destination, new_length, extra, drop)]
        if self._request_duplex and self._body:  # the proxy sent a body: it goes back
            out.extend(msg.streamed_bodies(True, body, end))
        return out

    def _response_body(self, chunk: msg.HttpBody) -> Responses:
        data, end = chunk.body, chunk.end_of_stream
        relay = data
        if self.exchange is not None:
            relay = self._picker.response_chunk(self.exchange, data, end)
        if end:
            self.close(completed=True)
        if self._response_duplex:
            return msg.streamed_bodies(False, relay, end)
        if relay == data:
            return [msg.continue_body(False)]
        return [msg.replaced_response_body(relay)]

    def _response_headers(self, req: msg.ProcessingRequest) -> Responses:
        headers = msg.header_map(req.response_headers)
        ex = self.exchange
        if ex is not None:
            served = msg.served_endpoint(req, headers)
            if served:
                self._picker.served(ex, served)
            status = headers.get(":status", "0")
            code = int(status) if status.isdigit() else 0
            self._picker.response_status(ex, code, headers.get("content-type", ""))
        if req.response_headers.end_of_stream:
            self.close(completed=True)
        if ex is not None and (removed := ex.response_headers_removed()):
            return [msg.response_headers_without(removed)]
        return [msg.continue_headers(False)]


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """`envoy.service.ext_proc.v3.ExternalProcessor`: one `RequestStream` per call."""

    def __init__(self, picker: EndpointPicker, max_body_bytes: int) -> None:
        self._picker = picker
        self._limit = max_body_bytes

    async def Process(
        self, request_iterator: AsyncIterator[msg.ProcessingRequest], context: object
    ) -> AsyncIterator[msg.ProcessingResponse]:
        stream = RequestStream(self._picker, self._limit)
        try:
            async for req in request_iterator:
                picker = self._picker
                body = stream.final_body(req)
                if body is not None:
                    stream.parsed = await picker.parse(stream.path, body, stream.headers)
                    stream.admitted = await picker.admit(stream.headers, stream.parsed, len(body))
                    stream.token_ids = await picker.token_ids(stream.parsed)
                    stream.pin = await picker.pin(stream.path, stream.parsed)
                elif (path := stream.names_stored_response(req)) is not None:
                    stream.pin = await picker.pin(path, None)
                answers = stream.handle(req)
                if stream.exchange is not None:
                    await picker.settle(stream.exchange)
                for out in answers:
                    yield out
                if stream.ended:
                    break
        finally:
            stream.close(completed=stream.ended)
