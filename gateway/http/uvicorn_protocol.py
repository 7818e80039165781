"""`GatewayHttpProtocol`: uvicorn's httptools protocol with coalesced writes, the
disconnect signal (`gateway.http.server` explains both and picks it at start-up) and the
server limits of `gateway.http.limits` (timeouts, head size, connection cap).

It extends uvicorn internals that are not public API: the `HttpToolsProtocol` methods it
overrides, the `cycle` and `scope` attributes uvicorn sets on the protocol, and the
`disconnected` and `scope` attributes of its `RequestResponseCycle`. `missing_internals()`
lists those the installed uvicorn lacks, so the server can fall back instead of failing
on the first request. Importing this module fails if uvicorn has no httptools protocol.

Per request it is also cheaper than uvicorn's own (the bytes on the wire are the same): its
`GatewayCycle` writes a response head checking the header names and values once each, as two
joined runs, instead of two regex searches per header; uvicorn's `send` handles what is not
the usual case (paused writes, uvicorn's access log, a message out of order), and every error.
`on_headers_complete` is uvicorn's, building the cycle with positional arguments.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from asyncio import TimerHandle
from typing import Any

import httptools
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.asgi import DISCONNECT_EXTENSION, DisconnectSignal
from gateway.errors import GatewayError
from gateway.http.coalescing import CoalescingTransport
from gateway.http.limits import (
    HeadTooLarge,
    ServerEvents,
    ServerLimits,
    WarnEvery,
    head_too_large,
    raw_error_response,
    request_timeout,
)

log = logging.getLogger(__name__)
_EXTENDED = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_header",
    "on_headers_complete",
    "on_message_complete",
    "_unset_keepalive_if_required",
    "_should_upgrade",
    "handle_websocket_upgrade",
    "_unsupported_upgrade_warning",
    "send_400_response",
)
# (class, method, attribute): the method assigns the attribute. Instances only exist once
# connections arrive, so the start-up check reads the names the method's code stores.
_ASSIGNED = (
    (HttpToolsProtocol, "__init__", "cycle"),
    (HttpToolsProtocol, "__init__", "connections"),
    (HttpToolsProtocol, "__init__", "pipeline"),
    (HttpToolsProtocol, "on_message_begin", "scope"),
    (HttpToolsProtocol, "on_message_begin", "headers"),  # on_header is inlined: these three
    (HttpToolsProtocol, "on_message_begin", "url"),
    (HttpToolsProtocol, "on_message_begin", "expect_100_continue"),
    (RequestResponseCycle, "__init__", "disconnected"),
    (RequestResponseCycle, "__init__", "scope"),
    (RequestResponseCycle, "__init__", "message_event"),
    (RequestResponseCycle, "__init__", "keep_alive"),
    (RequestResponseCycle, "__init__", "response_started"),
    (RequestResponseCycle, "__init__", "response_complete"),
    # GatewayCycle.send's fast path and on_headers_complete, as uvicorn's write them.
    (RequestResponseCycle, "__init__", "default_headers"),
    (RequestResponseCycle, "__init__", "flow"),
    (RequestResponseCycle, "__init__", "access_log"),
    (RequestResponseCycle, "__init__", "waiting_for_100_continue"),
    (RequestResponseCycle, "__init__", "chunked_encoding"),
    (RequestResponseCycle, "__init__", "expected_content_length"),
    (RequestResponseCycle, "__init__", "on_response"),
    (HttpToolsProtocol, "__init__", "root_path"),
    (HttpToolsProtocol, "__init__", "limit_concurrency"),
    (HttpToolsProtocol, "__init__", "tasks"),
    (HttpToolsProtocol, "__init__", "flow"),
    (HttpToolsProtocol, "__init__", "server_state"),
    (HttpToolsProtocol, "on_response_complete", "server_state"),
    (HttpToolsProtocol, "_start_asgi_task", "tasks"),
)
# The module globals and the cycle's constructor as GatewayCycle and on_headers_complete use
# them (positional: scope, transport, flow, logger, access_logger, access_log,
# default_headers, message_event, expect_100_continue, keep_alive, on_response).
_GLOBALS = ("HEADER_RE", "HEADER_VALUE_RE", "STATUS_LINE")
_CYCLE_ARGS = (
    "self",
    "scope",
    "transport",
    "flow",
    "logger",
    "access_logger",
    "access_log",
    "default_headers",
    "message_event",
    "expect_100_continue",
    "keep_alive",
    "on_response",
)
_HEADER_RE: Any = getattr(httptools_impl, "HEADER_RE", None)
_HEADER_VALUE_RE: Any = getattr(httptools_impl, "HEADER_VALUE_RE", None)
_STATUS_LINE: Any = getattr(httptools_impl, "STATUS_LINE", None)


def _allowed(pattern: Any) -> bytes:
    """The bytes uvicorn's one-character `pattern` does not flag: deleting them from a run
    (`bytes.translate`, a table lookup a byte) leaves exactly what the regex would find."""
    if pattern is None:
        return b""
    return bytes(c for c in range(256) if not pattern.search(bytes([c])))


_NAME_BYTES, _VALUE_BYTES = _allowed(_HEADER_RE), _allowed(_HEADER_VALUE_RE)
_HEAD, _BODY = "head", "body"  # what the connection's one timer is waiting for
_refusals = WarnEvery()


def missing_internals() -> list[str]:
    """The uvicorn internals `GatewayHttpProtocol` relies on that are missing, by name."""
    # Defined by uvicorn itself: asyncio.Protocol's no-op connection_lost does not count.
    uvicorn_classes = [c for c in HttpToolsProtocol.__mro__ if c.__module__.startswith("uvicorn.")]
    missing = [
        f"HttpToolsProtocol.{name}"
        for name in _EXTENDED
        if not any(name in vars(c) for c in uvicorn_classes)
    ]
    for cls, method, attribute in _ASSIGNED:
        code = getattr(getattr(cls, method, None), "__code__", None)
        if code is None or attribute not in code.co_names:
            missing.append(f"{cls.__name__}.{attribute}")
    missing += [f"httptools_impl.{name}" for name in _GLOBALS if not hasattr(httptools_impl, name)]
    init = getattr(RequestResponseCycle.__init__, "__code__", None)
    if init is None or init.co_varnames[: len(_CYCLE_ARGS)] != _CYCLE_ARGS:
        missing.append("RequestResponseCycle.__init__ arguments")
    return missing


class GatewayCycle(RequestResponseCycle):
    """uvicorn's request/response cycle, writing the usual response more cheaply (see the
    module docstring)."""

    async def send(self, message: Any) -> None:
        if self.flow.write_paused or self.disconnected:
            return await super().send(message)
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start" or self.access_log:
                return await super().send(message)
            self._start(message)
        elif kind != "http.response.body" or self.response_complete:
            return await super().send(message)
        else:
            self._body(message)

    def _start(self, message: Any) -> None:
        headers = [*self.default_headers, *message.get("headers", ())]
        names = b"".join([name for name, _ in headers])
        values = b"".join([value for _, value in headers])
        if names.translate(None, _NAME_BYTES) or values.translate(None, _VALUE_BYTES):
            self._refuse_headers(headers)
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        content = [_STATUS_LINE[status_code]]
        has_connection_close = False
        for raw_name, value in headers:
            name = raw_name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection":
                connection = [token.lower().strip() for token in value.split(b",")]
                if b"close" in connection:
                    self.keep_alive = False
                    has_connection_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and self.scope["method"] != "HEAD"
            and status_code not in (204, 304)
        ):
            self.chunked_encoding = True  # neither content-length nor transfer-encoding
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))

    def _refuse_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        """uvicorn's error for the first bad header, as its own loop would raise it."""
        self.response_started = True
        for name, value in headers:
            if _HEADER_RE.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if _HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")

    def _body(self, message: Any) -> None:
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            content = [b"%x\r\n" % len(body), body, b"\r\n"] if body else []
            if not more_body:
                content.append(b"0\r\n\r\n")
            self.transport.write(b"".join(content))
        else:
            num_bytes = len(body)
            if num_bytes > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= num_bytes
            self.transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with coalesced writes, the disconnect extension and the
    server limits. `with_limits` makes the subclass a server uses."""

    limits = ServerLimits()
    events = ServerEvents()

    @classmethod
    def with_limits(
        cls, limits: ServerLimits, events: ServerEvents | None = None
    ) -> type[GatewayHttpProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits, "events": events or ServerEvents()})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._reading_head = True  # between a message's end and the next one's headers
        self._head_bytes = 0  # raw bytes read while the head was incomplete
        self._head_begun = False  # the parser saw the first byte of the next request
        self._header_bytes = 0  # request line and headers as parsed
        self._max_header_bytes = self.limits.max_header_bytes
        self._timer: TimerHandle | None = None
        self._phase: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.events.refused += 1
            transport.abort()  # see gateway.http.limits: why not a 503
            if _refusals.ready():
                log.warning(
                    "connection refused: %d connections open (server.max_connections)",
                    len(self.connections),
                )
            return
        wrapped: Any = CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(wrapped)
        self.events.connections += 1
        self._arm(_HEAD)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self.events.connections -= 1
        self._arm(None)
        cycle = self.cycle
        super().connection_lost(exc)
        # uvicorn marks the request disconnected only if its response was unfinished.
        if cycle is not None and cycle.disconnected:
            signal = cycle.scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
            if isinstance(signal, DisconnectSignal):
                signal.fire()

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._reading_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._arm(None)  # as uvicorn: a WebSocket handshake, if a library is installed
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, HeadTooLarge):
                self.events.heads_too_large += 1
                self._reject(head_too_large(self.limits))
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if self._reading_head and self._head_bytes > self.limits.max_header_bytes:
            self.events.heads_too_large += 1
            self._reject(head_too_large(self.limits))  # one header line still incomplete
            return
        if self._reading_head:
            phase = _HEAD if self._head_begun or self._head_bytes else None
        else:
            phase = _BODY
        if phase is not self._phase:
            self._arm(phase)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        self._header_bytes = 0
        extensions: Any = {DISCONNECT_EXTENSION: DisconnectSignal()}
        self.scope["extensions"] = extensions

    def on_header(self, name: bytes, value: bytes) -> None:
        # Bytes as each header is parsed; the count once the head is complete (a head of
        # many small headers is over the byte limit long before it is buffered whole).
        self._header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_bytes > self._max_header_bytes:
            raise HeadTooLarge
        # uvicorn's on_header, inlined: one Python frame fewer for every header.
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._reading_head = self._head_begun = False
        self._head_bytes = 0
        # The URL is counted here, once: over several reads the raw count caught it.
        if (
            len(self.url) + self._header_bytes > self._max_header_bytes
            or len(self.headers) > self.limits.max_headers
        ):
            raise HeadTooLarge
        # uvicorn's on_headers_complete, building a GatewayCycle with positional arguments.
        parser = self.parser
        http_version = parser.get_http_version()
        scope = self.scope
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = parsed_url.query or b""
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app
        existing_cycle = self.cycle
        self.cycle = GatewayCycle(
            scope,
            self.transport,
            self.flow,
            self.logger,
            self.access_logger,
            self.access_log,
            self.server_state.default_headers,
            asyncio.Event(),
            self.expect_100_continue,
            http_version != "1.0" and parser.should_keep_alive(),
            self.on_response_complete,
        )
        if existing_cycle is None or existing_cycle.response_complete:
            self._start_asgi_task(self.cycle, app)  # the usual case
        else:  # pipelined requests queue up
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))

    def on_message_complete(self) -> None:
        self._reading_head = True
        super().on_message_complete()

    def _arm(self, phase: str | None) -> None:
        """Keep the one timer waiting for `phase` (None: none); a timer already waiting for
        it keeps its deadline, so trickling bytes does not extend it."""
        if phase == self._phase:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = phase
        if phase is not None:
            delay = self.limits.header_timeout_s if phase == _HEAD else self.limits.body_timeout_s
            self._timer = self.loop.call_later(delay, self._timed_out, phase)

    def _timed_out(self, phase: str) -> None:
        self._timer = self._phase = None
        if self.transport.is_closing():
            return
        if phase == _HEAD:
            self.events.head_timeouts += 1
            if self._head_pending():  # a partial head: tell the client why
                self._reject(request_timeout("headers", self.limits.header_timeout_s))
            elif not self._responding():
                self.transport.close()
            return
        if self.pipeline:  # queued behind a response still running: reading is paused
            self._arm(_BODY)
            return
        self.events.body_timeouts += 1
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            self.transport.write(
                raw_error_response(request_timeout("body", self.limits.body_timeout_s))
            )
        if cycle is not None:  # the app's receive() now returns http.disconnect
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def _reject(self, error: GatewayError) -> None:
        self._arm(None)
        if self._responding():
            # A pipelined request went wrong while an earlier response is still being
            # written: nothing may be interleaved with it, so the connection closes after it.
            self.cycle.keep_alive = False
            self.transport.pause_reading()
            return
        self.transport.write(raw_error_response(error))
        self.transport.close()

    def _head_pending(self) -> bool:
        """Some of the next request's head has arrived (in this read or an earlier one)."""
        return self._head_begun or self._head_bytes > 0

    def _responding(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete
