"""The least a Python HTTP relay does per request, as a floor for the overhead benchmark.

`python -m bench.overhead.floor --backend URL [--backend URL ...] --port P` relays each
request's bytes unchanged to the next backend in turn over kept-alive connections and the
response's bytes unchanged back, as they arrive, on the same stack as kvgate's front door
(uvloop, httptools): parsing only what it must to find where each message ends. No JSON, no
routing, no headers added or checked, no metrics, no limits. What it costs per request is what
any HTTP-aware proxy written in Python pays on this machine before doing any of its own work:
`bench overhead --targets floor,...` puts it beside the routers. HTTP/1.1 keep-alive only, no
pipelining; not a proxy for use.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools
import uvloop


class Upstream(asyncio.Protocol):
    """One kept-alive connection to a backend, relaying one response at a time."""

    def __init__(self, idle: list[Upstream]) -> None:
        self._idle = idle
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._client: asyncio.Transport | None = None
        self._done: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, data: bytes, client: asyncio.Transport, done: Callable[[], None]) -> None:
        self._client, self._done = client, done
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        if self._client is not None:
            self._client.write(data)  # relayed as it comes, before it is parsed
        self._parser.feed_data(data)

    def on_message_complete(self) -> None:
        done, self._client, self._done = self._done, None, None
        self._idle.append(self)
        if done is not None:
            done()

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self._idle:
            self._idle.remove(self)
        if self._client is not None:
            self._client.close()


class Backend:
    """A backend's address and its idle connections."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.idle: list[Upstream] = []

    async def connection(self) -> Upstream:
        if self.idle:
            return self.idle.pop()
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(lambda: Upstream(self.idle), self.host, self.port)
        return proto


class Downstream(asyncio.Protocol):
    """One client connection: each complete request goes to the next backend."""

    def __init__(self, backends: itertools.cycle[Backend]) -> None:
        self._backends = backends
        self._parser = httptools.HttpRequestParser(self)
        self._buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self._connecting: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._parser.feed_data(data)

    def on_message_complete(self) -> None:
        request, self._buffer = bytes(self._buffer), bytearray()
        backend = next(self._backends)
        if backend.idle:  # the usual case: no task, no await
            self._send(backend.idle.pop(), request)
        else:
            task = asyncio.ensure_future(self._connect_and_send(backend, request))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect_and_send(self, backend: Backend, request: bytes) -> None:
        self._send(await backend.connection(), request)

    def _send(self, upstream: Upstream, request: bytes) -> None:
        assert self.transport is not None
        self.transport.pause_reading()  # one request at a time on this connection
        upstream.send(request, self.transport, self._resume)

    def _resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


async def serve(backends: list[str], host: str, port: int) -> None:
    cycle = itertools.cycle([Backend(url) for url in backends])
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Downstream(cycle), host, port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"relaying on http://{host}:{port}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.floor", description=__doc__)
    parser.add_argument("--backend", action="append", required=True, metavar="URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.backend, args.host, args.port))


if __name__ == "__main__":
    main()
