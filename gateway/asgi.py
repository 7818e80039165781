"""Plain-ASGI building blocks: types, body reading, JSON responses, disconnect watching."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import orjson

from gateway.errors import (
    BadRequestError,
    ClientDisconnectedError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
)

DISCONNECT_EXTENSION = "kvgate.disconnect"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON = b"application/json"
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


class TrackedSend:
    """Wraps `send` to remember whether the response has started (then errors can't be sent)
    and whether its last body message went out; for an SSE response also whether the bytes
    sent so far end at an event boundary (where an error event can still be added)."""

    __slots__ = ("_send", "at_event_boundary", "finished", "sse", "started", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.finished = False
        self.status = 0
        self.sse = False
        self.at_event_boundary = True

    def is_finished(self) -> bool:
        """The last body message went out (a bound method is cheaper than a lambda)."""
        return self.finished

    def __call__(self, message: Message) -> Awaitable[None]:
        # Not a coroutine itself: hands back the server's `send(message)` to be awaited, one
        # coroutine per message fewer.
        if message["type"] == "http.response.start":
            self.started = True
            self.status = message["status"]
            self.sse = _is_sse(message.get("headers", ()))
        else:
            if self.sse and (body := message.get("body")):
                self.at_event_boundary = body.endswith(_EVENT_ENDS)
            if not message.get("more_body", False):
                self.finished = True
        return self._send(message)


def _is_sse(headers: Headers) -> bool:
    for name, value in headers:  # lower-case names, as ASGI apps send them
        if name == b"content-type":
            return value.startswith(b"text/event-stream")
    return False


_HEADER_MAP = "kvgate.header_map"


def header_map(scope: Scope) -> dict[str, str]:
    """Request headers as a lower-case dict (the last value wins for repeated names); built
    once per request and kept in the scope (the app's dispatch and its handler both ask).
    Read it, never change it."""
    headers: dict[str, str] | None = scope.get(_HEADER_MAP)
    if headers is None:
        headers = scope[_HEADER_MAP] = {}
        for k, v in scope["headers"]:  # a loop, not a comprehension: no function object
            headers[k.decode("latin-1").lower()] = v.decode("latin-1")
    return headers


def check_json_content_type(value: str | None) -> None:
    """415 unless a request body's `content-type` is JSON (`application/json`, `*+json`)."""
    if value is None or value == "application/json":
        return  # lenient like most OpenAI servers: a missing type is read as JSON
    mime = value.split(";", 1)[0].strip().lower()
    if mime != "application/json" and not mime.endswith("+json"):
        raise UnsupportedMediaTypeError(
            f"content type {mime or '(empty)'!r} is not supported; send application/json"
        )


def parse_json_body(body: bytes) -> Any:
    """An admin request's JSON body (None when empty); 400 `invalid_json` when it is not JSON."""
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError as exc:
        message = f"request body is not valid JSON: {exc}"
        raise BadRequestError(message, code="invalid_json") from None


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnectedError("client disconnected while sending the body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    headers: Headers | None = None,
) -> None:
    out: Headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if headers:
        out.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, payload: Any, headers: Headers | None = None) -> None:
    await send_bytes(send, status, orjson.dumps(payload), JSON, headers)


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class DisconnectSignal:
    """The `kvgate.disconnect` scope extension: set when the client goes away before its
    response is complete, running `callback` then. The server's protocol
    (`gateway.http.uvicorn_protocol`) puts one in each request's scope and fires it."""

    __slots__ = ("callback", "disconnected")

    def __init__(self) -> None:
        self.disconnected = False
        self.callback: Callable[[], None] | None = None

    def fire(self) -> None:
        if not self.disconnected:
            self.disconnected = True
            if self.callback is not None:
                self.callback()


def disconnect_signal(scope: Scope) -> DisconnectSignal | None:
    """The server's disconnect callback extension, if it offers one."""
    extensions = scope.get("extensions")
    return extensions.get(DISCONNECT_EXTENSION) if extensions else None


async def _watch(receive: Receive, client_left: Callable[[], None]) -> None:
    await _wait_disconnect(receive)
    client_left()


async def _end_watcher(watcher: asyncio.Future[None]) -> None:
    if not watcher.done():
        watcher.cancel()
        # Neither task may outlive the request; returns (not raises) once the watcher ends.
        await asyncio.wait((watcher,))
    elif not watcher.cancelled() and (error := watcher.exception()) is not None:
        raise error


async def run_until_disconnect(
    work: Coroutine[Any, Any, None],
    receive: Receive,
    finished: Callable[[], bool] = lambda: False,
    signal: DisconnectSignal | None = None,
) -> bool:
    """Run `work` until it finishes or the client disconnects; True if the client left.

    On disconnect `work` is cancelled, so its `finally` blocks close the upstream request and
    the engine aborts the generation and frees its KV cache. Call only after the request body
    has been fully received. `finished()` says the response is complete: the server then
    reports a disconnect that is only the end of the exchange, and nothing is cancelled.
    `work` runs in the calling task. The disconnect is learnt from `signal` (the server's
    callback, no extra task) when given, else from a watcher task parked in `receive()`.
    """
    task = asyncio.current_task()
    assert task is not None
    cancelled_by_watcher = False

    def client_left() -> None:
        nonlocal cancelled_by_watcher
        if not finished():
            cancelled_by_watcher = True
            task.cancel()

    watcher: asyncio.Future[None] | None = None
    if signal is not None:
        if signal.disconnected and not finished():
            work.close()  # gone already: send nothing upstream
            return True
        signal.callback = client_left
    else:
        watcher = asyncio.ensure_future(_watch(receive, client_left))
    try:
        await work
    except asyncio.CancelledError:
        if cancelled_by_watcher and task.uncancel() == 0:
            return True  # our own cancellation only: the client left
        raise
    finally:
        if signal is not None:
            signal.callback = None
        if watcher is not None:
            await _end_watcher(watcher)
    if cancelled_by_watcher:
        # The cancel came after `work`'s last await: take it here so it cannot hit the caller.
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            if task.uncancel() > 0:
                raise
    return cancelled_by_watcher
