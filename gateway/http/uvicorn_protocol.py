"""`GatewayHttpProtocol`: uvicorn's httptools protocol with coalesced writes and the
disconnect signal (`gateway.http.server` explains both and picks it at start-up).

It extends uvicorn internals that are not public API: the `HttpToolsProtocol` methods it
overrides, the `cycle` and `scope` attributes uvicorn sets on the protocol, and the
`disconnected` and `scope` attributes of its `RequestResponseCycle`. `missing_internals()`
lists those the installed uvicorn lacks, so the server can fall back instead of failing
on the first request. Importing this module fails if uvicorn has no httptools protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.asgi import DISCONNECT_EXTENSION
from gateway.http.server import CoalescingTransport, DisconnectSignal

_EXTENDED = ("connection_made", "connection_lost", "on_message_begin")
# (class, method, attribute): the method assigns the attribute. Instances only exist once
# connections arrive, so the start-up check reads the names the method's code stores.
_ASSIGNED = (
    (HttpToolsProtocol, "__init__", "cycle"),
    (HttpToolsProtocol, "on_message_begin", "scope"),
    (RequestResponseCycle, "__init__", "disconnected"),
    (RequestResponseCycle, "__init__", "scope"),
)


def missing_internals() -> list[str]:
    """The uvicorn internals `GatewayHttpProtocol` relies on that are missing, by name."""
    # Defined by uvicorn itself: asyncio.Protocol's no-op connection_lost does not count.
    uvicorn_classes = [c for c in HttpToolsProtocol.__mro__ if c.__module__.startswith("uvicorn.")]
    missing = [
        f"HttpToolsProtocol.{name}"
        for name in _EXTENDED
        if not any(name in vars(c) for c in uvicorn_classes)
    ]
    for cls, method, attribute in _ASSIGNED:
        code = getattr(getattr(cls, method, None), "__code__", None)
        if code is None or attribute not in code.co_names:
            missing.append(f"{cls.__name__}.{attribute}")
    return missing


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with coalesced writes and the disconnect extension."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped: Any = CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(wrapped)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions: Any = {DISCONNECT_EXTENSION: DisconnectSignal()}
        self.scope["extensions"] = extensions

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        # uvicorn marks the request disconnected only if its response was unfinished.
        if cycle is not None and cycle.disconnected:
            signal = cycle.scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
            if isinstance(signal, DisconnectSignal):
                signal.fire()
