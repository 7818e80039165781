"""The shared upstream client, header hygiene, and the one place its errors are mapped.

Client-facing error messages never carry a backend's address; the detail goes to the log
line and to `/admin/backends` (`failure_detail`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.asgi import Headers
from gateway.errors import (
    GatewayOverloadedError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamFirstByteTimeoutError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
)
from gateway.header_policy import HeaderPolicy
from gateway.http import http1
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.retry_budget import RetryBudget
from routing.config.schema import UpstreamSection

# RFC 9110 §7.6.1 hop-by-hop headers, plus those the client library sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Expect: the gateway has the whole body already, so the backend has nothing to wait for.
# x-prefiller-host-port: only kvgate names a P to a decode sidecar, never the client.
_REQUEST_DROP = frozenset(
    n.encode()
    for n in HOP_BY_HOP
    | {"host", "content-length", "x-request-id", "expect", "x-prefiller-host-port"}
)
# With tracing on, the caller's trace context is replaced by kvgate's (its span as parent).
_TRACED_REQUEST_DROP = _REQUEST_DROP | {b"traceparent", b"tracestate"}
# Date and Server: our server sets its own. x-request-id: the gateway's is added.
_RESPONSE_DROP = frozenset(n.encode() for n in HOP_BY_HOP | {"date", "server", "x-request-id"})


@dataclass(frozen=True, slots=True)
class FirstByteTimeouts:
    """Longest wait from request sent to response head (None: only the read timeout)."""

    stream: float | None = None
    non_stream: float | None = None


def first_byte_timeouts(cfg: UpstreamSection) -> FirstByteTimeouts:
    return FirstByteTimeouts(cfg.first_byte_timeout_s, cfg.first_byte_timeout_non_stream_s)


def make_retry_budget(cfg: UpstreamSection, clock: Callable[[], float]) -> RetryBudget:
    return RetryBudget(cfg.retry_budget_ratio, cfg.retry_budget_min_per_s, clock)


def make_client(cfg: UpstreamSection) -> UpstreamClient:
    return UpstreamClient(
        ClientLimits(
            connect_timeout=cfg.connect_timeout_s,
            read_timeout=cfg.read_timeout_s,
            write_timeout=cfg.write_timeout_s,
            pool_timeout=cfg.pool_timeout_s,
            max_connections=cfg.max_connections,
            max_keepalive=cfg.max_keepalive_connections,
            # Shorter than the engines' own idle timeout, so the gateway never sends a request
            # on a connection the engine is closing (a 502 race otherwise).
            keepalive_expiry=cfg.keepalive_expiry_s,
        )
    )


def _connection_tokens(raw: Headers) -> set[bytes]:
    return {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
    }


def _without(raw: Headers, drop: frozenset[bytes]) -> Headers:
    """`raw` minus the headers in `drop` and those its Connection header names; names
    lower-cased, values left as bytes (non-ASCII bytes pass through unchanged)."""
    # One pass, each name lower-cased once; a Connection header (rare) costs a second pass.
    out = []
    named = False
    for k, v in raw:
        name = k.lower()
        if name == b"connection":
            named = True
        if name not in drop:
            out.append((name, v))
    if named:
        extra = _connection_tokens(raw)
        out = [(name, v) for name, v in out if name not in extra]
    return out


def request_headers(
    raw: Headers,
    request_id: str,
    policy: HeaderPolicy | None = None,
    client: str | None = None,
    scheme: str = "http",
    *,
    traced: bool = False,
) -> Headers:
    """Client headers to send upstream: hop-by-hop ones dropped, x-request-id set, and
    `policy`'s Authorization and X-Forwarded-For rules applied (`client`: the peer's host).
    `traced`: tracing is on, and `traceparent`/`tracestate` are left for it to set (else the
    client's pass unchanged)."""
    out = _without(raw, _TRACED_REQUEST_DROP if traced else _REQUEST_DROP)
    if policy is not None:
        policy.upstream(out, client, scheme)
    out.append((b"x-request-id", request_id.encode()))
    return out


def response_headers(raw: Headers, extra: Headers) -> Headers:
    """Upstream response headers to relay to the client, hop-by-hop ones dropped."""
    out = _without(raw, _RESPONSE_DROP)
    out.extend(extra)
    return out


def map_client_error(exc: http1.HttpClientError) -> UpstreamError:
    """Map an upstream client exception to the most specific gateway error. The message is
    the client's: it names no backend (`failure_detail` is for the operator)."""
    if isinstance(exc, http1.ConnectError):
        return UpstreamConnectError("cannot connect to the upstream backend")
    if isinstance(exc, http1.FirstByteTimeout):
        return UpstreamFirstByteTimeoutError("the upstream backend did not answer in time")
    if isinstance(exc, http1.Timeout):
        return UpstreamTimeoutError("the upstream backend timed out")
    return UpstreamProtocolError("the upstream backend's connection failed")


def overloaded_error(exc: http1.PoolTimeout) -> GatewayOverloadedError:
    """Waiting for an upstream connection slot timed out: the gateway's own overload."""
    del exc  # its text names the pool timeout, which clients need not know
    return GatewayOverloadedError("the gateway is overloaded; retry later")


def failure_detail(exc: http1.HttpClientError, backend: str) -> str:
    """What went wrong, for the log and `/admin/backends` (names the backend)."""
    return f"backend {backend}: {type(exc).__name__}: {exc}"


def error_kind(err: UpstreamError) -> str:
    if isinstance(err, UpstreamConnectError):
        return "connect"
    if isinstance(err, UpstreamTimeoutError):
        return "timeout"
    return "protocol"
