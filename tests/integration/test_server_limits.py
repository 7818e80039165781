"""Server limits of the gateway's protocol behind a real uvicorn on 127.0.0.1: head and
body timeouts, header size and count (431), the connection cap (issue 15, defects 4, 5)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import orjson
import pytest
import uvicorn

from gateway.asgi import Receive, Scope, Send
from gateway.http.limits import ServerEvents, ServerLimits
from gateway.http.uvicorn_protocol import GatewayHttpProtocol
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.timeout(30)
LIMITS = ServerLimits(
    header_timeout_s=0.3,
    body_timeout_s=0.3,
    max_header_bytes=4096,
    max_headers=20,
    max_connections=3,
)


class App:
    """Answers 200 with the body it read; records what it saw."""

    def __init__(self) -> None:
        self.requests = 0
        self.disconnects = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnects += 1
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/slow":  # a stream longer than the header timeout
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(6):
                await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
                await asyncio.sleep(0.1)
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serve(app: App, events: ServerEvents | None = None) -> AsyncIterator[tuple[str, int]]:
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=GatewayHttpProtocol.with_limits(LIMITS, events),
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_keep_alive=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await async_wait_until(lambda: server.started)
        yield "127.0.0.1", server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def _read_all(reader: asyncio.StreamReader, within: float = 5.0) -> bytes:
    """Everything until the server closes the connection (a reset counts as closed)."""
    try:
        return await asyncio.wait_for(reader.read(), within)
    except ConnectionResetError:
        return b""


def _error(response: bytes) -> dict[str, str]:
    return orjson.loads(response.split(b"\r\n\r\n", 1)[1])["error"]


async def test_a_silent_connection_is_closed_after_the_header_timeout() -> None:
    async with serve(App()) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        assert await _read_all(reader) == b""  # closed, nothing said
        writer.close()


async def test_a_trickled_head_gets_408_at_its_deadline() -> None:
    app = App()
    async with serve(app) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n")
        reading = asyncio.create_task(_read_all(reader))
        for _ in range(20):  # one header every 0.1 s: each must not extend the deadline
            await asyncio.sleep(0.1)
            if reading.done():
                break
            writer.write(b"x-a: b\r\n")
        response = await reading
        writer.close()
    assert response.startswith(b"HTTP/1.1 408 ")
    assert _error(response)["code"] == "request_timeout"
    assert app.requests == 0


async def test_a_half_sent_body_gets_408_and_the_app_sees_a_disconnect() -> None:
    app = App()
    async with serve(app) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nhalf")
        response = await _read_all(reader)
        writer.close()
        await async_wait_until(lambda: app.disconnects == 1)
    assert response.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in response


async def test_keep_alive_requests_each_get_their_own_head_deadline() -> None:
    async with serve(App()) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        for _ in range(3):  # 3 x 0.2 s on one connection: longer than one header timeout
            writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            await asyncio.sleep(0.2)
        writer.close()


async def test_a_timed_out_pipelined_head_never_cuts_into_the_response_before_it() -> None:
    async with serve(App()) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost:")
        response = await _read_all(reader)
        writer.close()
    assert response.startswith(b"HTTP/1.1 200 ")
    assert response.count(b"tick") == 6 and response.endswith(b"0\r\n\r\n")
    assert b"408" not in response  # closed after the stream, nothing written into it


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-%d: v\r\n" % i for i in range(21)),
        b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"v" * 5000 + b"\r\n",
        b"GET /" + b"p" * 5000 + b" HTTP/1.1\r\nhost: x\r\n",
    ],
    ids=["too-many-headers", "too-many-bytes", "long-url"],
)
async def test_an_oversized_head_gets_431_and_never_reaches_the_app(head: bytes) -> None:
    app = App()
    async with serve(app) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + b"\r\n")
        response = await _read_all(reader)
        writer.close()
    assert response.startswith(b"HTTP/1.1 431 ")
    assert _error(response)["code"] == "request_header_fields_too_large"
    assert app.requests == 0


async def test_one_huge_header_line_is_refused_before_it_is_buffered_whole() -> None:
    app = App()
    async with serve(app) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nx-big: ")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < 8 * 1024 * 1024 and not reader.at_eof():
                writer.write(b"v" * 65536)  # the line never ends
                sent += 65536
                await writer.drain()
        response = await _read_all(reader)
        writer.close()
    assert sent < 8 * 1024 * 1024  # refused long before the client was done
    assert response == b"" or response.startswith(b"HTTP/1.1 431 ")


async def test_connections_over_the_cap_are_closed_at_once() -> None:
    events = ServerEvents()
    async with serve(App(), events) as (host, port):
        held = [await asyncio.open_connection(host, port) for _ in range(LIMITS.max_connections)]
        reader, writer = await asyncio.open_connection(host, port)
        assert await _read_all(reader, within=2) == b""  # refused, well before the timeout
        writer.close()
        assert (events.refused, events.connections) == (1, LIMITS.max_connections)
        _, first = held.pop()
        first.close()
        await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection(host, port)  # room again
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        writer.close()
        for _, w in held:
            w.close()
