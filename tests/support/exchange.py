"""One HTTP request/response seen from a raw ASGI handler: body in, JSON/SSE out.

Also watches for the client hanging up while the handler is busy: uvicorn silently drops
``send()`` after a disconnect, so the only reliable signal is ``receive()`` returning
``http.disconnect``, which has to be awaited concurrently with the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson

from tests.support.asgi_types import Receive, Send

T = TypeVar("T")
Headers = list[tuple[bytes, bytes]]

_JSON = b"application/json"
_SSE = b"text/event-stream; charset=utf-8"


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


class Exchange:
    """Sends one response, adding ``extra_headers`` (engine name, echoed request id)."""

    def __init__(self, receive: Receive, send: Send, extra_headers: Headers) -> None:
        self.receive = receive
        self._send = send
        self._extra_headers = extra_headers

    async def start(self, status: int, content_type: bytes, length: int | None = None) -> None:
        headers = [(b"content-type", content_type), *self._extra_headers]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool = False) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def json(self, status: int, payload: Any) -> None:
        data = orjson.dumps(payload)
        await self.start(status, _JSON, len(data))
        await self.body(data)

    async def text(self, status: int, text: str, content_type: bytes) -> None:
        data = text.encode()
        await self.start(status, content_type, len(data))
        await self.body(data)

    async def start_events(self) -> None:
        # No content-length: uvicorn uses chunked encoding, so a cut stream is detectable.
        await self.start(200, _SSE)

    async def event(self, payload: Any) -> None:
        await self.body(b"data: " + orjson.dumps(payload) + b"\n\n", more=True)

    async def end_events(self) -> None:
        await self.body(b"data: [DONE]\n\n")


async def pause(disconnected: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; True as soon as the client has gone."""
    if seconds <= 0:
        await asyncio.sleep(0)
        return disconnected.is_set()
    try:
        async with asyncio.timeout(seconds):
            await disconnected.wait()
    except TimeoutError:
        return False
    return True


async def watching_disconnect(receive: Receive, work: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run ``work(disconnected)`` while a sibling task sets ``disconnected`` on hang-up."""
    disconnected = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected.set()

    async with asyncio.TaskGroup() as group:
        watcher = group.create_task(watch())
        try:
            return await work(disconnected)
        finally:
            watcher.cancel()
