"""The HTTP/1.1 server side of `kvgate serve`: uvicorn's httptools protocol, made cheaper per
request for a proxy, and the choice of protocol at start-up.

`GatewayHttpProtocol` (`gateway.http.uvicorn_protocol`) changes nothing an HTTP client sees:
writes made in one event-loop step leave in one `write()` (`gateway.http.coalescing`; nothing
waits past the step that wrote it, so streamed chunks still leave one by one); a client
disconnect is announced through the ASGI scope extension `kvgate.disconnect`
(`gateway.asgi.DisconnectSignal`, fired from `connection_lost`); and it enforces the server
limits (`gateway.http.limits`). It extends uvicorn internals: if the installed uvicorn lacks
them, `server_protocol()` logs one warning and the gateway serves with uvicorn's stock
protocol, correct but without these changes and with only the idle timeout and the connection
cap of the limits (docs/decisions/0004-serving-loop.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

import uvicorn

from gateway.http.limits import ServerEvents, ServerLimits

log = logging.getLogger(__name__)


def server_protocol(
    limits: ServerLimits | None = None, events: ServerEvents | None = None
) -> type[asyncio.Protocol] | Literal["auto"]:
    """uvicorn's `http=` for `kvgate serve`: `GatewayHttpProtocol` enforcing `limits`, or
    "auto" (uvicorn's stock httptools or h11 protocol) after one warning if the internals
    it extends are missing. `events` counts what the limits did."""
    try:
        from gateway.http import uvicorn_protocol
    except ImportError as exc:
        missing = [str(exc)]
    else:
        missing = uvicorn_protocol.missing_internals()
        if not missing:
            return uvicorn_protocol.GatewayHttpProtocol.with_limits(
                limits or ServerLimits(), events
            )
    log.warning(
        "uvicorn %s lacks what kvgate's HTTP protocol extends (%s); serving with uvicorn's "
        "stock protocol, without coalesced writes, the disconnect signal, header and body "
        "timeouts or header limits",
        uvicorn.__version__,
        "; ".join(missing),
    )
    return "auto"
