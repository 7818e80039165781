"""Request hygiene at dispatch, before any handler runs: what HTTP requires of a request
that the server does not check itself, and the WebSocket scope the gateway does not serve.

- HTTP/1.1 requires exactly one `Host` header (RFC 9112 3.2: a server MUST answer 400
  otherwise); HTTP/1.0 requests need none.
- A 405 lists the methods its path accepts in `Allow` (`allowed_methods` builds the map
  from the route table).
- The gateway proxies no WebSockets: a handshake is refused with `websocket.close`, which
  the server turns into an HTTP 403 before the upgrade (instead of the 500 that an app
  ignoring the scope produces).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.asgi import Receive, Scope, Send
from gateway.errors import BadRequestError

_POLICY_VIOLATION = 1008  # WebSocket close code; servers answer a refused handshake 403


def check_host(scope: Scope) -> None:
    """400 for an HTTP/1.1 request without exactly one Host header."""
    if scope.get("http_version") != "1.1":
        return
    hosts = 0
    for name, _ in scope["headers"]:  # a plain loop: this runs for every request
        if name == b"host":
            hosts += 1
    if hosts != 1:
        found = "no Host header" if hosts == 0 else f"{hosts} Host headers"
        raise BadRequestError(
            f"an HTTP/1.1 request needs exactly one Host header, got {found}",
            code="invalid_host_header",
        )


def allowed_methods(routes: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """Path → the methods routed for it, sorted (the `Allow` of a 405)."""
    allow: dict[str, set[str]] = {}
    for method, path in routes:
        allow.setdefault(path, set()).add(method)
    return {path: tuple(sorted(methods)) for path, methods in allow.items()}


async def refuse_websocket(receive: Receive, send: Send) -> None:
    """Answer a WebSocket scope: refuse the handshake."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": _POLICY_VIOLATION})
