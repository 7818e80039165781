"""The gateway's uvicorn protocol: coalesced writes and the disconnect signal extension."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.asgi import Receive, Scope, Send, disconnect_signal, run_until_disconnect
from gateway.http.server import CoalescingTransport, DisconnectSignal, GatewayHttpProtocol
from tests.support.waiting import async_wait_until


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def _wrap(inner: RecordingTransport) -> CoalescingTransport:
    transport: Any = inner
    return CoalescingTransport(transport, asyncio.get_running_loop())


async def test_writes_of_one_step_leave_in_one_write() -> None:
    inner = RecordingTransport()
    t = _wrap(inner)
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(b"body")
    assert inner.writes == []
    assert t.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nbody")
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    t.write(b"next")  # a later step: its own write
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"next"]


async def test_close_flushes_first_and_later_writes_are_dropped() -> None:
    inner = RecordingTransport()
    t = _wrap(inner)
    t.write(b"last")
    t.close()
    assert (inner.writes, inner.closed) == ([b"last"], True)
    t.write(b"too late")
    await asyncio.sleep(0)
    assert inner.writes == [b"last"]


async def test_other_calls_pass_through() -> None:
    t = _wrap(RecordingTransport())
    assert t.get_extra_info("peername") == "info:peername"
    assert not t.is_closing()


def test_disconnect_signal_fires_once() -> None:
    calls: list[str] = []
    signal = DisconnectSignal()
    signal.fire()  # nobody listening yet: remembered
    assert signal.disconnected
    signal.callback = lambda: calls.append("x")
    signal.fire()
    assert calls == []  # fired already


# -- behind a real uvicorn server -----------------------------------------------------------


class App:
    def __init__(self) -> None:
        self.outcome: asyncio.Future[bool] | None = None
        self.streaming = asyncio.Event()
        self.had_signal: list[bool] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.had_signal.append(disconnect_signal(scope) is not None)
        await receive()
        path = scope["path"]
        start = {"type": "http.response.start", "status": 200, "headers": []}
        if path == "/plain":
            start["headers"] = [(b"content-length", b"5")]
            await send(start)
            await send({"type": "http.response.body", "body": b"hello"})
        elif path == "/stream":
            await send(start)
            for part in (b"a", b"b", b"c"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
                await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": b""})
        else:  # a stream that never ends until the client leaves
            await send(start)
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            self.streaming.set()
            left = await run_until_disconnect(
                asyncio.sleep(60), receive, signal=disconnect_signal(scope)
            )
            assert self.outcome is not None
            self.outcome.set_result(left)


@contextlib.asynccontextmanager
async def serve(app: App) -> AsyncIterator[str]:
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=GatewayHttpProtocol,
        lifespan="off",
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await async_wait_until(lambda: server.started)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_responses_arrive_whole_and_streams_in_order() -> None:
    app = App()
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        plain = await client.get("/plain")
        assert (plain.status_code, plain.content) == (200, b"hello")
        async with client.stream("GET", "/stream") as resp:
            chunks = [c async for c in resp.aiter_raw()]
        assert b"".join(chunks) == b"abc"
        assert len(chunks) == 3  # one write per step: the chunks were not held back
    assert app.had_signal == [True, True]


@pytest.mark.timeout(20)
async def test_client_disconnect_cancels_through_the_signal() -> None:
    app = App()
    app.outcome = asyncio.get_running_loop().create_future()
    async with serve(app) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /hang HTTP/1.1\r\nhost: x\r\n\r\n")
        await app.streaming.wait()
        assert b"data: 1" in await reader.readuntil(b"data: 1\n\n")
        writer.close()
        await writer.wait_closed()
        assert await asyncio.wait_for(app.outcome, 5) is True
