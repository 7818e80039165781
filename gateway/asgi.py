"""Plain-ASGI building blocks: types, body reading, JSON responses, disconnect watching."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import orjson

from gateway.errors import PayloadTooLargeError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON = b"application/json"


class TrackedSend:
    """Wraps `send` to remember whether the response has started (then errors can't be sent)."""

    __slots__ = ("_send", "started", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.status = 0

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = message["status"]
        await self._send(message)


def header_map(scope: Scope) -> dict[str, str]:
    """Request headers as a lower-case dict (the last value wins for repeated names)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError("client disconnected while sending the body")
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


async def run_until_disconnect(work: Coroutine[Any, Any, None], receive: Receive) -> bool:
    """Run `work` until it finishes or the client disconnects; True if the client left.

    On disconnect `work` is cancelled, so its `finally` blocks close the upstream request and
    the engine aborts the generation and frees its KV cache. Call only after the request body
    has been fully received.
    """
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait((work_task, watch_task), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also runs when we ourselves are cancelled: neither task may outlive this call.
        for task in (watch_task, work_task):
            if not task.done():
                task.cancel()
        await asyncio.gather(work_task, watch_task, return_exceptions=True)
    if work_task.cancelled():
        return True
    exc = work_task.exception()
    if exc is not None:
        raise exc
    return False
