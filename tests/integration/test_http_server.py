"""The gateway's uvicorn protocol behind a real server on 127.0.0.1: whole responses,
ordered streams, the disconnect signal, and the stock protocol it falls back to."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Literal

import httpx
import pytest
import uvicorn

import gateway.http
from gateway.asgi import Receive, Scope, Send, disconnect_signal, run_until_disconnect
from gateway.http.server import server_protocol
from gateway.http.uvicorn_protocol import GatewayHttpProtocol
from tests.support.waiting import async_wait_until


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
async def serve(
    app: App, protocol: type[asyncio.Protocol] | Literal["auto"] = GatewayHttpProtocol
) -> AsyncIterator[str]:
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=protocol,
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


async def test_without_uvicorns_internals_the_stock_protocol_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    monkeypatch.delitem(sys.modules, "gateway.http.uvicorn_protocol")
    monkeypatch.delattr(gateway.http, "uvicorn_protocol")
    protocol = server_protocol()
    assert protocol == "auto"
    monkeypatch.undo()  # uvicorn imports its own protocol module to serve
    app = App()
    async with serve(app, protocol) as url, httpx.AsyncClient(base_url=url) as client:
        plain = await client.get("/plain")
        async with client.stream("GET", "/stream") as resp:
            streamed = b"".join([c async for c in resp.aiter_raw()])
    assert (plain.status_code, plain.content, streamed) == (200, b"hello", b"abc")
    assert app.had_signal == [False, False]  # the app notices disconnects via receive()
