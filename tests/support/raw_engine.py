"""A vLLM-shaped engine on a raw asyncio TCP server, for engines that break HTTP itself.

`FakeEngine` (ASGI under uvicorn) can only misbehave within what uvicorn lets it send; the
chaos suite needs engines that hang after accepting, send garbage, die halfway through an
SSE event or answer twice. `RawEngine` reads HTTP/1.1 requests off the socket by hand and
answers ``GET /health``, ``/v1/models`` and ``/metrics`` (``metrics_page``, any bytes) itself;
every POST goes to ``behaviour`` (see `tests.support.misbehaviour`), which may write
anything. It runs on its own event loop in a daemon thread (as `ServerThread` does, so sync
test code never deadlocks it); the knobs are plain attributes a test may change any time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from tests.support import vllm_payloads as shapes

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class RawRequest:
    """One request as read off the socket; ``index`` counts requests on its connection."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    index: int


Behaviour = Callable[[RawRequest, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one POST; returns whether the connection may serve another request."""


def response_head(status: int, content_type: str, length: int | None = None) -> bytes:
    """A status line and headers; chunked when ``length`` is None."""
    lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}"]
    lines.append(
        f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    )
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (empty data: the last chunk)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def json_response(status: int, payload: object) -> bytes:
    data = orjson.dumps(payload)
    return response_head(status, "application/json", len(data)) + data


class RawEngine:
    """An engine whose bytes on the wire a test controls entirely."""

    def __init__(self, behaviour: Behaviour, models: tuple[str, ...] = ("m1",)) -> None:
        self.behaviour = behaviour
        self.models = models
        self.metrics_page = shapes.metrics_text(models, 0, 0, 0.0).encode()
        self.health_status = 200
        self.posts = 0
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._serving: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._port}"

    def start(self) -> RawEngine:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10) or self._server is None:
            raise RuntimeError("raw engine did not start")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(self._shutdown)
        thread.join(10)
        self._thread = None

    def __enter__(self) -> RawEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, ready: threading.Event) -> None:
        self._loop = loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._connection, HOST, 0, limit=1 << 20)
            )
            self._port = self._server.sockets[0].getsockname()[1]
            self._serving = loop.create_task(self._server.serve_forever())
            ready.set()
            loop.run_until_complete(self._serving)
        except asyncio.CancelledError:
            pass
        finally:
            ready.set()
            # Handlers see their connections aborted and return; give them a moment.
            if pending := asyncio.all_tasks(loop):
                loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
            loop.close()

    def _shutdown(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
        if self._serving is not None:
            self._serving.cancel()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            index = 0
            while (request := await _read_request(reader, index)) is not None:
                if not await self._answer(request, reader, writer):
                    break
                index += 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _answer(
        self, req: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if req.method == "POST":
            self.posts += 1
            return await self.behaviour(req, reader, writer)
        if req.path == "/health":
            writer.write(response_head(self.health_status, "text/plain", 0))
        elif req.path == "/v1/models":
            writer.write(json_response(200, shapes.models_body(self.models)))
        elif req.path == "/metrics":
            page = self.metrics_page
            writer.write(response_head(200, "text/plain; version=0.0.4", len(page)) + page)
        else:
            writer.write(json_response(404, {"detail": "Not Found"}))
        await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader, index: int) -> RawRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed the connection between requests
    first, *lines = head.decode("latin-1").split("\r\n")
    method, path, _ = first.split(" ", 2)
    headers = {}
    for line in lines:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(length) if length else b""
    return RawRequest(method, path, headers, body, index)
