"""Request hygiene of the gateway app served as `kvgate serve` serves it (the gateway's
protocol, WebSockets available): 405 with Allow, Host required, WebSocket handshakes
refused, a client leaving mid-upload recorded as 499 (issue 15, defect 8)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
import pytest
import uvicorn

from gateway.app import GatewayApp, build_app
from gateway.http.server import server_protocol
from routing.config.schema import parse_config
from tests.integration.conftest import StartGateway
from tests.support.fixture_types import StartEngines
from tests.support.servers import ServerThread, dead_url
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.timeout(30)


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[tuple[GatewayApp, str, int]]:
    app = build_app(parse_config({"backends": [{"url": dead_url()}]}))
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=server_protocol(),
        ws="auto",  # as `kvgate serve`: uvicorn[standard] brings a WebSocket library
        lifespan="off",  # no backends to reach: these requests never get that far
        log_config=None,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await async_wait_until(lambda: server.started)
        yield app, "127.0.0.1", server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def _exchange(host: str, port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    body = await asyncio.wait_for(reader.readexactly(length), 5)
    writer.close()
    return head + body


async def test_405_names_the_allowed_methods() -> None:
    async with serve() as (_, host, port), httpx.AsyncClient(base_url=f"http://{host}:{port}") as c:
        chat = await c.get("/v1/chat/completions")
        ready = await c.delete("/ready")
    assert chat.status_code == 405 and chat.headers["allow"] == "POST"
    assert chat.json()["error"]["code"] == "method_not_allowed"
    assert ready.status_code == 405 and ready.headers["allow"] == "GET"


async def test_http11_without_host_is_400_and_http10_needs_none() -> None:
    async with serve() as (_, host, port):
        missing = await _exchange(host, port, b"GET /health HTTP/1.1\r\n\r\n")
        twice = await _exchange(host, port, b"GET /health HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n")
        old = await _exchange(host, port, b"GET /health HTTP/1.0\r\n\r\n")
    for response in (missing, twice):
        assert response.startswith(b"HTTP/1.1 400 ")
        error = orjson.loads(response.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == "invalid_host_header"
    assert old.startswith(b"HTTP/1.1 200 ")


async def test_a_websocket_handshake_is_refused_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handshake = (
        b"GET /v1/chat/completions HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n"
        b"connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"sec-websocket-version: 13\r\n\r\n"
    )
    async with serve() as (_, host, port):
        response = await _exchange(host, port, handshake)
    assert response.startswith(b"HTTP/1.1 403 ")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_client_leaving_mid_upload_is_recorded_as_499(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with serve() as (app, host, port):
        _, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 1000\r\nx-request-id: leaver\r\n\r\n" + b'{"model": "m1", '
        )
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        await async_wait_until(lambda: any("leaver" in r.getMessage() for r in caplog.records))
        page = app.runtime.metrics_page().decode()
    entry = next(orjson.loads(r.getMessage()) for r in caplog.records if "leaver" in r.getMessage())
    assert entry["status"] == 499
    assert 'status="499"' in page
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_prompt_nested_300_deep_is_400_not_500(
    fake_engines: StartEngines,
    start_gateway: StartGateway,
    client: Callable[[ServerThread], httpx.Client],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ((engine, server),) = fake_engines(1)
    _, gateway = start_gateway([server.url])
    content = b"[" * 300 + b'"x"' + b"]" * 300  # orjson reads 1023 levels, writes 254
    body = b'{"model": "m1", "messages": [{"role": "user", "content": ' + content + b"}]}"
    r = client(gateway).post("/v1/chat/completions", content=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_prompt"
    assert engine.inference_requests() == []
    assert not [rec for rec in caplog.records if rec.exc_info]
