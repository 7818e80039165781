from __future__ import annotations

import pytest

from gateway.errors import (
    UpstreamConnectError,
    UpstreamFirstByteTimeoutError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
)
from gateway.http import http1
from gateway.http.client import ClientLimits
from gateway.upstream import (
    HOP_BY_HOP,
    error_kind,
    failure_detail,
    make_client,
    map_client_error,
    overloaded_error,
    request_headers,
    response_headers,
)
from routing.config.schema import UpstreamSection


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


def test_request_headers_lower_case_names() -> None:
    assert request_headers([(b"X-Mixed", b"v")], "r")[0] == (b"x-mixed", b"v")


# -- response headers ---------------------------------------------------------------------


def test_response_headers_drop_hop_by_hop_date_server_and_request_id() -> None:
    raw = [
        (b"Content-Type", b"text/event-stream"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Date", b"Sun, 29 Nov 2026 15:30:05 GMT"),
        (b"Server", b"uvicorn"),
        (b"X-Request-ID", b"upstream-id"),
        (b"Set-Cookie", b"a=1"),
        (b"Set-Cookie", b"b=2"),
    ]
    extra = [(b"x-request-id", b"ours"), (b"x-kvgate-backend", b"b1")]
    assert response_headers(raw, extra) == [
        (b"content-type", b"text/event-stream"),
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
        (b"x-request-id", b"ours"),
        (b"x-kvgate-backend", b"b1"),
    ]


def test_response_headers_relay_bytes_unchanged() -> None:
    value = 'attachment; filename="résumé€.txt"'.encode()
    raw = [(b"content-disposition", value), (b"x-l1", b"\xe9")]
    assert response_headers(raw, []) == raw


# -- error mapping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc_type", "err_type", "status", "retryable", "kind"),
    [
        (http1.ConnectError, UpstreamConnectError, 502, True, "connect"),
        (http1.ConnectTimeout, UpstreamConnectError, 502, True, "connect"),
        (http1.FirstByteTimeout, UpstreamFirstByteTimeoutError, 504, True, "timeout"),
        (http1.ReadTimeout, UpstreamTimeoutError, 504, False, "timeout"),
        (http1.WriteTimeout, UpstreamTimeoutError, 504, False, "timeout"),
        (http1.RemoteProtocolError, UpstreamProtocolError, 502, False, "protocol"),
        (http1.ReadError, UpstreamProtocolError, 502, False, "protocol"),
    ],
)
def test_map_client_error(
    exc_type: type[http1.HttpClientError],
    err_type: type[Exception],
    status: int,
    retryable: bool,
    kind: str,
) -> None:
    err = map_client_error(exc_type("connect to 10.0.0.7:8000 failed"))
    assert type(err) is err_type
    assert (err.status, err.retryable) == (status, retryable)
    assert error_kind(err) == kind


@pytest.mark.parametrize("exc_type", [http1.ConnectError, http1.ReadTimeout, http1.ReadError])
def test_client_messages_name_no_backend_address(exc_type: type[http1.HttpClientError]) -> None:
    exc = exc_type("[Errno 111] Connect call failed ('10.0.0.7', 8000)")
    err = map_client_error(exc)
    assert "10.0.0.7" not in err.message and "8000" not in err.message
    assert "upstream backend" in err.message
    # ...while the operator's detail keeps both.
    detail = failure_detail(exc, "10.0.0.7:8000")
    assert "10.0.0.7:8000" in detail and exc_type.__name__ in detail


def test_pool_timeout_is_the_gateways_overload_not_a_timeout() -> None:
    assert not issubclass(http1.PoolTimeout, http1.Timeout)
    err = overloaded_error(http1.PoolTimeout("no free connection in 5 s"))
    assert (err.status, err.code, err.retryable) == (503, "gateway_overloaded", False)
    assert err.headers() == [(b"retry-after", b"1")]


# -- the client ---------------------------------------------------------------------------


def test_make_client_settings() -> None:
    cfg = UpstreamSection(
        connect_timeout_s=1.5,
        read_timeout_s=60.0,
        write_timeout_s=7.0,
        pool_timeout_s=3.0,
        max_connections=10,
        max_keepalive_connections=4,
        keepalive_expiry_s=2.5,
    )
    client = make_client(cfg)
    assert client.limits == ClientLimits(
        connect_timeout=1.5,
        read_timeout=60.0,
        write_timeout=7.0,
        pool_timeout=3.0,
        max_connections=10,
        max_keepalive=4,
        keepalive_expiry=2.5,  # under the engines' 5 s idle timeout
    )
    assert UpstreamSection().keepalive_expiry_s < 5.0


def test_request_headers_drop_expect() -> None:
    raw = [(b"expect", b"100-continue"), (b"x-a", b"1")]
    assert _names(request_headers(raw, "r")) == [b"x-a", b"x-request-id"]


def test_the_callers_trace_context_passes_unless_tracing_replaces_it() -> None:
    raw = [(b"traceparent", b"00-ab-cd-01"), (b"tracestate", b"k=v"), (b"accept", b"*/*")]
    plain = request_headers(raw, "r1")
    assert (b"traceparent", b"00-ab-cd-01") in plain and (b"tracestate", b"k=v") in plain
    traced = request_headers(raw, "r1", traced=True)
    assert [k for k, _ in traced] == [b"accept", b"x-request-id"]


def test_a_client_cannot_name_a_prefiller_for_a_sidecar_behind_the_gateway() -> None:
    raw = [(b"x-prefiller-host-port", b"evil:80"), (b"accept", b"*/*")]
    assert request_headers(raw, "rid") == [(b"accept", b"*/*"), (b"x-request-id", b"rid")]
