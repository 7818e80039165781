"""The least kvgate's own stack does per request: a second floor for the overhead benchmark.

`python -m bench.overhead.asgi_floor --backend URL [--backend URL ...] --port P` serves an
ASGI app on the server kvgate runs (uvicorn with `GatewayHttpProtocol`, uvloop, the start-up
objects frozen out of GC passes) that relays each request to the next backend in turn through
kvgate's upstream client (`gateway.http.client`): the body read whole, the client's headers
passed on but for the hop-by-hop ones, the response's head and each body chunk relayed as
they arrive. No JSON, no routing, no admission, no metrics, no usage, no access log. Beside
`floor` (a relay on bare protocols) it says what the stack the design card fixes (a plain
ASGI hot path in Python) costs before any of the gateway's own work; not a proxy for use.
"""

from __future__ import annotations

import argparse
import gc
import itertools
from typing import Any

import uvicorn

from gateway.asgi import read_body
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.http.server import server_protocol

_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length"}
_SKIP = {b"connection", b"keep-alive", b"transfer-encoding"}
_MAX_BODY = 1 << 30


class Relay:
    """The ASGI app: read, forward to the next backend, relay back."""

    def __init__(self, backends: list[str]) -> None:
        self._next = itertools.cycle(backends).__next__
        self._client = UpstreamClient(ClientLimits())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # startup
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await self._client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_body(receive, _MAX_BODY)
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP]
        query = scope["query_string"]
        target = scope["path"] + ("?" + query.decode() if query else "")
        resp = await self._client.send(self._next(), target, scope["method"], headers, body)
        try:
            out = [(k, v) for k, v in resp.headers if k.lower() not in _SKIP]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
            ended = False
            async for chunk in resp.aiter_raw():
                ended = resp.at_end  # the last chunk carries the end, as kvgate sends it
                await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await resp.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead.asgi_floor", description=__doc__
    )
    parser.add_argument("--backend", action="append", required=True, metavar="URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        Relay(args.backend),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http=server_protocol(),
        proxy_headers=False,
        lifespan="on",
        access_log=False,
        server_header=False,
        log_level="warning",
        log_config=None,
    )
    server = uvicorn.Server(config)
    config.load()
    gc.collect()
    gc.freeze()
    print(f"relaying on http://{args.host}:{args.port}", flush=True)
    server.run()


if __name__ == "__main__":
    main()
