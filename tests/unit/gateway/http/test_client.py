"""The upstream HTTP/1.1 client without sockets: a fake transport feeds the protocol bytes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.http import http1
from gateway.http.client import ClientLimits, Origin, UpstreamClient, _request_head
from gateway.http.http1 import Http1Connection


class FakeTransport:
    """Records writes; `close()` reports the loss to the protocol like a real transport."""

    def __init__(self, protocol: Http1Connection) -> None:
        self.protocol = protocol
        self.written: list[bytes] = []
        self.closing = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.protocol.connection_lost(None)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def _connection() -> tuple[Http1Connection, FakeTransport]:
    conn = Http1Connection(asyncio.get_running_loop())
    transport = FakeTransport(conn)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


class FakeClient(UpstreamClient):
    """Connects to a fake transport and lets the test script the backend's bytes."""

    def __init__(self, limits: ClientLimits | None = None, now: list[float] | None = None):
        self.now = now or [0.0]
        super().__init__(limits or ClientLimits(), clock=lambda: self.now[0])
        self.connections: list[tuple[Http1Connection, FakeTransport]] = []

    async def _connect(self, origin: Origin) -> Http1Connection:
        pair = _connection()
        self.connections.append(pair)
        return pair[0]


async def _send(client: FakeClient, reply: bytes, **kw: Any) -> Any:
    task = asyncio.ensure_future(client.send("http://b:9", "/v1/x", "POST", [], b"{}", **kw))
    await asyncio.sleep(0)
    client.connections[-1][0].data_received(reply)
    return await task


async def _body(resp: Any) -> bytes:
    return b"".join([c async for c in resp.aiter_raw()])


OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n2\r\nhi\r\n0\r\n\r\n"
)


def test_request_head_is_one_http11_block() -> None:
    head = _request_head("POST", "/v1/chat", b"b:9", [(b"x-a", b"1")], 12)
    assert head == b"POST /v1/chat HTTP/1.1\r\nhost: b:9\r\ncontent-length: 12\r\nx-a: 1\r\n\r\n"


@pytest.mark.parametrize(
    "header",
    [
        (b"x-a", b"1\r\nx-evil: 2"),
        (b"x-a", b"bare\nlf"),
        (b"x-a", b"bare\rcr"),
        (b"x-\r\na", b"1"),
        (b"x-\na", b"1"),
    ],
)
def test_request_head_refuses_line_breaks_in_headers(header: tuple[bytes, bytes]) -> None:
    headers = [(b"x-before", b"ok"), header, (b"x-after", b"ok")]
    with pytest.raises(http1.RemoteProtocolError):
        _request_head("POST", "/", b"b", headers, 0)


def test_request_head_passes_many_headers_without_line_breaks() -> None:
    headers = [(b"x-%d" % i, b"v %d" % i) for i in range(40)]
    head = _request_head("GET", "/a?b=c", b"h:1", headers, 0)
    assert head.count(b"\r\n") == 2 + 1 + 40 + 1
    assert head.endswith(b"x-39: v 39\r\n\r\n")


def test_origin_parse_keeps_path_prefix_and_default_ports() -> None:
    o = Origin.parse("http://user@h.example/engine/")
    assert (o.scheme, o.host, o.port, o.host_header, o.base_path) == (
        "http", "h.example", 80, b"h.example", "/engine",
    )  # fmt: skip
    assert Origin.parse("https://h:8443").port == 8443
    with pytest.raises(ValueError):
        Origin.parse("ftp://h")


async def test_response_with_length_is_read_and_connection_pooled() -> None:
    client = FakeClient()
    resp = await _send(client, OK)
    assert resp.status_code == 200
    assert resp.header(b"content-type") == b"application/json"
    assert await _body(resp) == b"{}"
    await resp.aclose()
    written = b"".join(client.connections[0][1].written)
    assert written.startswith(b"POST /v1/x HTTP/1.1\r\nhost: b:9\r\ncontent-length: 2\r\n")
    assert written.endswith(b"\r\n\r\n{}")
    # The next request reuses the pooled connection.
    resp = await _send(client, OK)
    await _body(resp)
    await resp.aclose()
    assert len(client.connections) == 1


async def test_one_connection_reads_responses_of_every_framing_in_turn() -> None:
    client = FakeClient()
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    replies = [CHUNKED, OK, interim + OK, no_content, CHUNKED, OK]
    for reply in replies:
        resp = await _send(client, reply)
        body = await _body(resp)
        assert body == {CHUNKED: b"data: hi", no_content: b""}.get(reply, b"{}")
        await resp.aclose()
    assert len(client.connections) == 1


async def test_chunked_body_is_decoded_and_queued_chunks_joined() -> None:
    client = FakeClient()
    resp = await _send(client, CHUNKED)
    assert resp.header(b"content-type") == b"text/event-stream"
    assert [c async for c in resp.aiter_raw()] == [b"data: hi"]


async def test_body_arriving_later_wakes_the_reader() -> None:
    client = FakeClient()
    resp = await _send(client, CHUNKED[: CHUNKED.index(b"6\r\n")])
    conn = client.connections[0][0]
    reader = asyncio.ensure_future(_body(resp))
    await asyncio.sleep(0)
    conn.data_received(b"2\r\nhi\r\n")
    await asyncio.sleep(0)
    conn.data_received(b"0\r\n\r\n")
    assert await reader == b"hi"


async def test_unfinished_response_closes_instead_of_pooling() -> None:
    client = FakeClient()
    resp = await _send(client, CHUNKED[: CHUNKED.index(b"0\r\n")])
    await resp.aclose()
    assert client.connections[0][1].closing
    resp = await _send(client, OK)
    assert len(client.connections) == 2


async def test_connection_closed_mid_body_raises_protocol_error() -> None:
    client = FakeClient()
    resp = await _send(client, CHUNKED[: CHUNKED.index(b"2\r\n")])
    client.connections[0][1].close()
    with pytest.raises(http1.RemoteProtocolError):
        await _body(resp)


async def test_body_without_length_ends_at_close() -> None:
    client = FakeClient()
    resp = await _send(client, b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nab")
    client.connections[0][1].close()
    assert await _body(resp) == b"ab"


async def test_malformed_response_is_a_protocol_error() -> None:
    client = FakeClient()
    with pytest.raises(http1.RemoteProtocolError):
        await _send(client, b"NOT HTTP AT ALL\r\n\r\n")


async def test_read_timeout_waiting_for_the_head() -> None:
    client = FakeClient(ClientLimits(read_timeout=0.01))
    with pytest.raises(http1.ReadTimeout):
        await _send(client, b"")
    assert client.connections[0][1].closing


async def test_each_wait_gets_its_whole_read_timeout() -> None:
    # One timer serves successive waits: a wait that starts after it was armed must still
    # get its own full limit, and the limit must still hold.
    conn, _ = _connection()
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, conn.on_body, b"a")
    await conn.wait_for_data(0.5)  # woken at 0.3 s
    loop.call_later(0.35, conn.on_body, b"b")  # 0.65 s: past the first wait's deadline
    await conn.wait_for_data(0.5)
    assert conn.take_body() == b"ab"
    with pytest.raises(http1.ReadTimeout, match=r"no progress in 0.05 s"):
        await conn.wait_for_data(0.05)


async def test_closing_cancels_the_read_timer() -> None:
    conn, transport = _connection()
    loop = asyncio.get_running_loop()
    loop.call_soon(conn.on_body, b"a")
    await conn.wait_for_data(300)
    assert conn._read_timer is not None
    transport.close()
    assert conn._read_timer is None


async def test_expired_or_closed_idle_connections_are_not_reused() -> None:
    now = [0.0]
    client = FakeClient(ClientLimits(keepalive_expiry=4.0), now)
    resp = await _send(client, OK)
    await _body(resp)
    await resp.aclose()
    now[0] = 5.0  # past the keep-alive expiry
    resp = await _send(client, OK)
    await _body(resp)
    await resp.aclose()
    assert len(client.connections) == 2
    assert client.connections[0][1].closing
    client.connections[1][1].close()  # the backend closed the idle connection
    await _send(client, OK)
    assert len(client.connections) == 3


async def test_pool_timeout_when_all_slots_are_busy() -> None:
    client = FakeClient(ClientLimits(max_connections=1, pool_timeout=0.01))
    held = await _send(client, OK)
    with pytest.raises(http1.PoolTimeout):
        await client.send("http://b:9", "/v1/x", "POST", [], b"{}")
    await _body(held)
    await held.aclose()
    await _send(client, OK)  # the slot came back


async def test_slots_go_to_waiters_first_come_first_served() -> None:
    client = UpstreamClient(ClientLimits(max_connections=1, pool_timeout=5.0))
    await client._acquire()  # the one slot
    order: list[str] = []

    async def wait(name: str) -> None:
        await client._acquire()
        order.append(name)

    first = asyncio.create_task(wait("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0)
    client._release_slot()
    await first
    assert order == ["first"] and not second.done()
    client._release_slot()
    await second
    assert order == ["first", "second"]


async def test_a_cancelled_waiter_strands_no_slot() -> None:
    client = UpstreamClient(ClientLimits(max_connections=1, pool_timeout=5.0))
    await client._acquire()
    gone = asyncio.create_task(client._acquire())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    client._release_slot()  # nobody waits any more: the slot is free again
    await asyncio.wait_for(client._acquire(), 0.5)  # taken at once, no timeout


async def test_a_slot_handed_to_a_waiter_as_it_is_cancelled_passes_on() -> None:
    client = UpstreamClient(ClientLimits(max_connections=1, pool_timeout=5.0))
    await client._acquire()
    gone = asyncio.create_task(client._acquire())
    await asyncio.sleep(0)
    client._release_slot()  # handed to `gone`, which has not run yet
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    await asyncio.wait_for(client._acquire(), 0.5)  # the slot came back, not lost
    with pytest.raises(http1.PoolTimeout):  # and there is still only one
        client.limits = ClientLimits(max_connections=1, pool_timeout=0.01)
        await client._acquire()


async def test_slow_reader_pauses_the_socket() -> None:
    conn, transport = _connection()
    conn.data_received(CHUNKED[: CHUNKED.index(b"6\r\n")])
    for _ in range(70):
        conn.data_received(b"1\r\nx\r\n")
    assert transport.paused
    assert conn.take_body() == b"x" * 70
    assert not transport.paused


async def test_interim_responses_are_skipped() -> None:
    client = FakeClient()
    resp = await _send(client, b"HTTP/1.1 100 Continue\r\n\r\n" + OK)
    assert resp.status_code == 200
    assert resp.header(b"content-type") == b"application/json"
    assert await _body(resp) == b"{}"


async def _pooled(client: FakeClient) -> None:
    """One exchange, read to the end: its connection goes back to the pool."""
    resp = await _send(client, OK)
    await _body(resp)
    await resp.aclose()


async def test_a_second_response_in_the_same_read_is_not_merged() -> None:
    client = FakeClient()
    stray = b"HTTP/1.1 200 OK\r\nx-stray: 1\r\ncontent-length: 5\r\n\r\nstray"
    resp = await _send(client, OK + stray)
    assert await _body(resp) == b"{}"
    assert resp.header(b"x-stray") is None
    await resp.aclose()
    assert client.connections[0][1].closing  # never reused
    await _pooled(client)
    assert len(client.connections) == 2


async def test_bytes_on_an_idle_connection_close_it() -> None:
    client = FakeClient()
    await _pooled(client)
    conn, transport = client.connections[0]
    conn.data_received(OK)  # an answer nobody asked for
    assert transport.closing
    resp = await _send(client, b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")
    assert resp.status_code == 201  # the answer to this request, not the stray one
    assert len(client.connections) == 2


async def test_garbage_after_a_complete_response_leaves_it_whole() -> None:
    client = FakeClient()
    resp = await _send(client, OK + b"\x00garbage")
    assert await _body(resp) == b"{}"
    assert client.connections[0][1].closing


class _ClosesOnNextRequest(FakeTransport):
    """A pooled connection the backend closes just as the next request arrives."""

    def write(self, data: bytes) -> None:
        super().write(data)
        if len(self.written) > 1:
            asyncio.get_running_loop().call_soon(self.close)


class _StaleClient(FakeClient):
    async def _connect(self, origin: Origin) -> Http1Connection:
        conn = Http1Connection(asyncio.get_running_loop())
        transport = _ClosesOnNextRequest(conn)
        conn.connection_made(transport)  # type: ignore[arg-type]
        self.connections.append((conn, transport))
        return conn


async def test_reused_connection_lost_before_any_byte_is_replaced_once() -> None:
    client = _StaleClient()
    await _pooled(client)
    task = asyncio.ensure_future(client.send("http://b:9", "/v1/x", "POST", [], b"{}"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(client.connections) == 2  # the request went again, on a fresh connection
    client.connections[1][0].data_received(OK)
    resp = await task
    assert resp.status_code == 200 and await _body(resp) == b"{}"


async def test_reused_connection_lost_after_a_byte_is_not_retried() -> None:
    client = FakeClient()
    await _pooled(client)
    task = asyncio.ensure_future(client.send("http://b:9", "/v1/x", "POST", [], b"{}"))
    await asyncio.sleep(0)
    conn, transport = client.connections[0]
    conn.data_received(b"HTTP/1.1 200")
    transport.close()
    with pytest.raises(http1.RemoteProtocolError):
        await task
    assert len(client.connections) == 1


async def test_a_fresh_connection_lost_before_any_byte_fails() -> None:
    client = FakeClient()
    task = asyncio.ensure_future(client.send("http://b:9", "/v1/x", "POST", [], b"{}"))
    await asyncio.sleep(0)
    client.connections[0][1].close()
    with pytest.raises(http1.RemoteProtocolError):
        await task
    assert len(client.connections) == 1


async def test_first_byte_timeout_is_a_deadline_for_the_head() -> None:
    client = FakeClient()
    task = asyncio.ensure_future(
        client.send("http://b:9", "/v1/x", "POST", [], b"{}", first_byte_timeout=0.2)
    )
    await asyncio.sleep(0)
    conn = client.connections[0][0]
    for part in (b"HTTP/1.1 200 OK\r\n", b"x-a: 1\r\n", b"x-b: 2\r\n"):
        await asyncio.sleep(0.08)  # progress, but no whole head in time
        conn.data_received(part)
    with pytest.raises(http1.FirstByteTimeout):
        await task
    assert client.connections[0][1].closing


async def test_first_byte_timeout_does_not_limit_the_body() -> None:
    client = FakeClient(ClientLimits(read_timeout=1.0))
    resp = await _send(client, CHUNKED[: CHUNKED.index(b"6\r\n")], first_byte_timeout=0.05)
    conn = client.connections[0][0]
    asyncio.get_running_loop().call_later(0.1, conn.data_received, b"2\r\nhi\r\n0\r\n\r\n")
    assert await _body(resp) == b"hi"
