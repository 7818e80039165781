"""The HTTP/1.1 server side: uvicorn's httptools protocol, made cheaper per request for a
proxy (used by `kvgate serve`), and the choice of protocol at start-up.

Why: docs/decisions/0004-serving-loop.md (under the overhead benchmark, `python -m bench
overhead`, most of the gateway's CPU went to system calls and event-loop steps). Two changes,
both invisible to HTTP clients:

- Writes made in one event-loop step leave in one `write()` system call. uvicorn writes the
  response head as soon as `http.response.start` is sent and the body with the next message;
  each write to a loopback socket costs a system call and a wake-up of the reader. Here
  writes are gathered and flushed at the end of the current loop step (`call_soon`, in
  `gateway.http.coalescing`), so a response whose body is already at hand goes out in one
  segment, while nothing waits longer than the step that wrote it: streamed chunks still
  leave one by one as they come.
- A client disconnect is also announced through the ASGI scope extension
  `kvgate.disconnect` (a `gateway.asgi.DisconnectSignal`), fired from `connection_lost`.
  Without it the app can only learn of a disconnect by keeping a second task parked in
  `receive()` for every request (`gateway.asgi.run_until_disconnect` falls back to that
  elsewhere).

The same protocol enforces the server limits (`gateway.http.limits`: header, body and
idle timeouts, header size and count, the connection cap).

The protocol class (`gateway.http.uvicorn_protocol`) extends uvicorn internals. If the
installed uvicorn lacks them, `server_protocol()` logs one warning and the gateway serves
with uvicorn's stock protocol: correct, only without the two changes above, and with only
the idle timeout and connection cap of the limits (`gateway.http.limits` says how).
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
