"""The shared upstream HTTP client, header hygiene, and the one place httpx errors are mapped."""

from __future__ import annotations

import httpx

from gateway.asgi import Headers
from gateway.config import UpstreamSection
from gateway.errors import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
)

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
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
_RESPONSE_DROP = HOP_BY_HOP | {"date", "server"}  # our server sets its own


def make_client(cfg: UpstreamSection) -> httpx.AsyncClient:
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=cfg.connect_timeout_s,
            read=cfg.read_timeout_s,
            write=cfg.write_timeout_s,
            pool=cfg.pool_timeout_s,
        ),
        limits=httpx.Limits(
            max_connections=cfg.max_connections,
            max_keepalive_connections=cfg.max_keepalive_connections,
            # Shorter than the engines' own idle timeout, so the gateway never sends a request
            # on a connection the engine is closing (a 502 race otherwise).
            keepalive_expiry=cfg.keepalive_expiry_s,
        ),
        follow_redirects=False,
        trust_env=False,
    )
    # Relay the client's own Accept-Encoding and User-Agent, not httpx's defaults.
    for name in ("accept-encoding", "user-agent", "accept"):
        del client.headers[name]
    return client


def _connection_tokens(headers: list[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower()
        for name, value in headers
        if name == "connection"
        for token in value.split(",")
    }


def request_headers(raw: Headers, request_id: str) -> Headers:
    """Client headers to send upstream: hop-by-hop ones dropped, x-request-id set.

    Values stay bytes: httpx encodes `str` header values as ASCII, so non-ASCII bytes from
    the client would fail the request.
    """
    pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]
    drop = _REQUEST_DROP | _connection_tokens(pairs) | {"x-request-id"}
    out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs if k not in drop]
    out.append((b"x-request-id", request_id.encode()))
    return out


def response_headers(resp: httpx.Response, extra: Headers) -> Headers:
    """Upstream response headers to relay to the client, hop-by-hop ones dropped."""
    # From the raw bytes (latin-1 round-trips them): `multi_items()` may decode as UTF-8.
    pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in resp.headers.raw]
    drop = _RESPONSE_DROP | _connection_tokens(pairs) | {"x-request-id"}
    out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs if k not in drop]
    out.extend(extra)
    return out


def map_httpx_error(exc: httpx.HTTPError, backend: str) -> UpstreamError:
    """Map an httpx exception to the most specific gateway error."""
    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return UpstreamConnectError(f"cannot connect to backend {backend}: {name}")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeoutError(f"backend {backend} timed out ({name})")
    return UpstreamProtocolError(f"backend {backend} connection failed: {name}")


def error_kind(err: UpstreamError) -> str:
    if isinstance(err, UpstreamConnectError):
        return "connect"
    if isinstance(err, UpstreamTimeoutError):
        return "timeout"
    return "protocol"
