from __future__ import annotations

import httpx
import pytest

from gateway.config import UpstreamSection
from gateway.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeoutError
from gateway.upstream import (
    HOP_BY_HOP,
    error_kind,
    make_client,
    map_httpx_error,
    request_headers,
    response_headers,
)


def _names(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    return [k for k, _ in headers]


# -- request headers ----------------------------------------------------------------------


def test_request_headers_drop_hop_by_hop_host_and_length() -> None:
    raw = [(name.encode(), b"v") for name in sorted(HOP_BY_HOP)] + [
        (b"host", b"gateway:8000"),
        (b"content-length", b"12"),
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer k"),
    ]
    out = request_headers(raw, "rid-1")
    assert out == [
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer k"),
        (b"x-request-id", b"rid-1"),
    ]


def test_request_headers_drop_those_named_in_connection() -> None:
    raw = [
        (b"connection", b"keep-alive, X-Secret ,x-other"),
        (b"x-secret", b"1"),
        (b"x-other", b"2"),
        (b"x-kept", b"3"),
    ]
    assert _names(request_headers(raw, "r")) == [b"x-kept", b"x-request-id"]


def test_request_headers_replace_the_clients_request_id() -> None:
    raw = [(b"x-request-id", b"client-id"), (b"X-Request-ID", b"again"), (b"accept", b"*/*")]
    assert request_headers(raw, "ours") == [(b"accept", b"*/*"), (b"x-request-id", b"ours")]


def test_request_headers_keep_repeats_and_order() -> None:
    raw = [(b"x-a", b"1"), (b"x-b", b"2"), (b"x-a", b"3")]
    assert request_headers(raw, "r")[:3] == raw


def test_request_headers_keep_non_ascii_bytes() -> None:
    raw = [(b"x-name", "José".encode())]
    out = request_headers(raw, "r")
    assert out[0] == (b"x-name", "José".encode())
    # httpx must accept them as they are (it encodes str values as ASCII).
    request = httpx.Request("POST", "http://backend/v1/completions", headers=out)
    assert dict(request.headers.raw)[b"x-name"] == "José".encode()


# -- response headers ---------------------------------------------------------------------


def test_response_headers_drop_hop_by_hop_date_server_and_request_id() -> None:
    resp = httpx.Response(
        200,
        headers=[
            ("Content-Type", "text/event-stream"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Date", "Sun, 29 Nov 2026 15:30:05 GMT"),
            ("Server", "uvicorn"),
            ("X-Request-ID", "upstream-id"),
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
        ],
    )
    extra = [(b"x-request-id", b"ours"), (b"x-kvgate-backend", b"b1")]
    assert response_headers(resp, extra) == [
        (b"content-type", b"text/event-stream"),
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
        (b"x-request-id", b"ours"),
        (b"x-kvgate-backend", b"b1"),
    ]


def test_response_headers_relay_bytes_unchanged() -> None:
    value = 'attachment; filename="résumé€.txt"'.encode()
    resp = httpx.Response(200, headers=[(b"content-disposition", value), (b"x-l1", b"\xe9")])
    assert response_headers(resp, []) == [(b"content-disposition", value), (b"x-l1", b"\xe9")]


# -- error mapping ------------------------------------------------------------------------

_REQUEST = httpx.Request("POST", "http://backend:8000/v1/completions")


@pytest.mark.parametrize(
    ("exc_type", "err_type", "status", "retryable", "kind"),
    [
        (httpx.ConnectError, UpstreamConnectError, 502, True, "connect"),
        (httpx.ConnectTimeout, UpstreamConnectError, 502, True, "connect"),
        (httpx.ReadTimeout, UpstreamTimeoutError, 504, False, "timeout"),
        (httpx.WriteTimeout, UpstreamTimeoutError, 504, False, "timeout"),
        (httpx.PoolTimeout, UpstreamTimeoutError, 504, False, "timeout"),
        (httpx.RemoteProtocolError, UpstreamProtocolError, 502, False, "protocol"),
        (httpx.ReadError, UpstreamProtocolError, 502, False, "protocol"),
        (httpx.WriteError, UpstreamProtocolError, 502, False, "protocol"),
    ],
)
def test_map_httpx_error(
    exc_type: type[httpx.TransportError],
    err_type: type[Exception],
    status: int,
    retryable: bool,
    kind: str,
) -> None:
    err = map_httpx_error(exc_type("boom", request=_REQUEST), "b1")
    assert type(err) is err_type
    assert (err.status, err.retryable) == (status, retryable)
    assert "b1" in err.message
    assert exc_type.__name__ in err.message
    assert error_kind(err) == kind


# -- the client ---------------------------------------------------------------------------


async def test_make_client_settings() -> None:
    cfg = UpstreamSection(
        connect_timeout_s=1.5,
        read_timeout_s=60.0,
        write_timeout_s=7.0,
        pool_timeout_s=3.0,
        max_connections=10,
        max_keepalive_connections=4,
        keepalive_expiry_s=2.5,
    )
    async with make_client(cfg) as client:
        assert client.timeout == httpx.Timeout(connect=1.5, read=60.0, write=7.0, pool=3.0)
        for name in ("accept-encoding", "user-agent", "accept"):
            assert name not in client.headers
        assert client.follow_redirects is False
        assert client.trust_env is False
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert pool._max_connections == 10
        assert pool._max_keepalive_connections == 4
        assert pool._keepalive_expiry == 2.5  # under the engines' 5 s idle timeout
    assert UpstreamSection().keepalive_expiry_s < 5.0


async def test_make_client_sends_only_the_given_headers() -> None:
    async with make_client(UpstreamSection()) as client:
        request = client.build_request("POST", "http://backend/v1/completions", content=b"{}")
        names = {k.lower() for k, _ in request.headers.raw}
        # No accept, accept-encoding or user-agent of httpx's own: the client's are relayed.
        assert names == {b"host", b"content-length", b"connection"}
