"""Server limits a client cannot hold the gateway hostage with, enforced by `GatewayHttpProtocol`.

- `header_timeout_s`: the time for the request line and headers, from a new connection or a
  keep-alive request's first byte; then a partial head gets 408 and a close, a silent one a close.
- `body_timeout_s`: the whole body, from the end of the headers; then 408 (if no response
  started), the connection closed, and the app sees a disconnect.
- `idle_timeout_s`: an idle keep-alive connection is closed (uvicorn's `timeout_keep_alive`).
- `max_header_bytes` / `max_headers`: the request line and headers, counted as they are parsed
  (and the raw bytes of a head still incomplete after each read) → 431, connection closed.
- `max_connections` (default: what the descriptor limit leaves, `connection_cap`): a connection
  beyond it is closed on accept, before any byte is read (decision 0009).

Timers (`loop.call_later`, one per connection at most) run only while a head or body is
incomplete. Under uvicorn's stock protocol (`gateway.http.server`) only `idle_timeout_s` and
`max_connections` (as `limit_concurrency`: 503) hold.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

from gateway.errors import GatewayError, HeaderFieldsTooLargeError, RequestTimeoutError
from routing.config.schema import ServerSection, UpstreamSection

# Descriptors kept from the soft RLIMIT_NOFILE for all but client and upstream connections:
# listeners, health probes and scrapes, tokenizer clients, KV-event sockets, Redis, files.
FD_RESERVE = 256
MIN_CONNECTIONS = 16
NOFILE_UNLIMITED = 1 << 20  # Linux's default fs.nr_open, for an unlimited soft limit

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one connection may take: time for its head and body, and head size."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_header_bytes: int = 65536
    max_headers: int = 100
    max_connections: int = 4096

    @classmethod
    def from_config(
        cls, server: ServerSection, upstream: UpstreamSection | None = None
    ) -> ServerLimits:
        """The limits of `server`; an unset `max_connections` derived from the descriptor
        limit and `upstream.max_connections` (`connection_cap`)."""
        cap = server.max_connections
        if cap is None:
            cap = connection_cap((upstream or UpstreamSection()).max_connections)
        return cls(
            header_timeout_s=server.header_timeout_s,
            body_timeout_s=server.body_timeout_s,
            max_header_bytes=server.max_header_bytes,
            max_headers=server.max_headers,
            max_connections=cap,
        )


def connection_cap(upstream_connections: int, nofile: int | None = None) -> int:
    """Client connections the descriptor limit allows (as HAProxy derives its maxconn).

    Of the soft RLIMIT_NOFILE (`nofile`), `FD_RESERVE` (at most a quarter of it) is kept for
    everything else; each client connection in flight may hold one upstream connection, up
    to `upstream_connections`, so the rest is halved between clients and upstream when the
    upstream cap is above that half, else clients get all but the upstream cap. At least
    `MIN_CONNECTIONS`. E.g. 1024 descriptors and 1024 upstream connections: 384 clients;
    65536 descriptors: 64256.
    """
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile == resource.RLIM_INFINITY or nofile < 0:
        nofile = NOFILE_UNLIMITED
    spare = nofile - min(FD_RESERVE, nofile // 4)
    return max(MIN_CONNECTIONS, spare - min(upstream_connections, spare // 2))


class ServerEvents:
    """What the limits did, counted by the protocol (plain integers: it runs on the event
    loop) and exported by `gateway.http.server_metrics`."""

    __slots__ = ("body_timeouts", "connections", "head_timeouts", "heads_too_large", "refused")

    def __init__(self) -> None:
        self.connections = 0  # open now
        self.refused = 0
        self.head_timeouts = 0
        self.body_timeouts = 0
        self.heads_too_large = 0


class HeadTooLarge(Exception):
    """Raised from a parser callback: the head is over a limit (httptools re-raises it as
    the context of its `HttpParserCallbackError`)."""


def head_too_large(limits: ServerLimits) -> HeaderFieldsTooLargeError:
    return HeaderFieldsTooLargeError(
        f"request line and headers exceed the limit of {limits.max_header_bytes} bytes "
        f"or {limits.max_headers} headers"
    )


def request_timeout(what: str, seconds: float) -> RequestTimeoutError:
    return RequestTimeoutError(f"the request {what} did not arrive within {seconds:g} s")


def raw_error_response(error: GatewayError) -> bytes:
    """A complete HTTP/1.1 error response that closes the connection, written by the
    protocol itself when no app is running for the request."""
    body = error.body()
    head = [
        b"HTTP/1.1 %d %s" % (error.status, _REASONS.get(error.status, b"Error")),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    head.extend(name + b": " + value for name, value in error.headers())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class WarnEvery:
    """Lets a repeated warning through at most once per `interval_s` (a flood of refused
    connections must not become a flood of log lines)."""

    __slots__ = ("_interval", "_last", "suppressed")

    def __init__(self, interval_s: float = 10.0) -> None:
        self._interval = interval_s
        self._last = float("-inf")
        self.suppressed = 0

    def ready(self) -> bool:
        now = time.monotonic()
        if now - self._last < self._interval:
            self.suppressed += 1
            return False
        self._last = now
        return True
