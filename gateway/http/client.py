"""The proxy's upstream HTTP/1.1 client: keep-alive connections pooled per backend origin.

It does only what the proxy needs: a request written in one write, the response parsed by
httptools (uvicorn's parser), body chunks handed over as they arrive with read-side
backpressure, the connection pooled again once its response is complete (why not httpx:
docs/decisions/0001-own-http1-upstream-client.md).

Limits: `max_connections` bounds requests in flight upstream (waiting longer than
`pool_timeout` fails with `PoolTimeout`); at most `max_keepalive` idle connections are kept,
each for at most `keepalive_expiry` seconds, most recently used first. A pooled connection the
backend has closed is never reused; one that fails before any byte of the response is replaced
by a fresh one once, inside `send`. Timeouts are per phase: connect, write, read (the longest
wait for the next byte) and, per request, first byte (request written to response head:
`FirstByteTimeout`). Health probes and scrapes use their own client (`gateway.http.fetcher`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.http.http1 import (
    ConnectError,
    ConnectTimeout,
    FirstByteTimeout,
    Http1Connection,
    PoolTimeout,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
)

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True, eq=False)
class Origin:
    """Where a backend URL points: connection key, Host header and path prefix. One per URL
    in a client (`UpstreamClient._origins`), so it is compared and hashed as itself: a
    generated `__hash__` would be a Python call at each pooled connection's lookup."""

    scheme: str
    host: str
    port: int
    host_header: bytes
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        return cls(
            parts.scheme,
            parts.hostname,
            port,
            parts.netloc.rpartition("@")[2].encode("idna"),
            parts.path.rstrip("/"),
        )


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """Timeouts (seconds) and pool sizes of an `UpstreamClient`."""

    connect_timeout: float = 2.0
    read_timeout: float = 300.0
    write_timeout: float = 30.0
    pool_timeout: float = 5.0
    max_connections: int = 1024
    max_keepalive: int = 256
    keepalive_expiry: float = 4.0


class UpstreamResponse:
    """A response whose head has arrived; iterate `aiter_raw()`, then `aclose()`."""

    __slots__ = ("_client", "_conn", "_done", "_origin", "headers", "status_code")

    def __init__(self, client: UpstreamClient, origin: Origin, conn: Http1Connection) -> None:
        self._client = client
        self._origin = origin
        self._conn = conn
        self._done = False
        self.status_code = conn.status
        self.headers: Headers = conn.headers

    def header(self, name: bytes) -> bytes | None:
        """The first value of header `name` (lower-case), or None."""
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    @property
    def at_end(self) -> bool:
        """Every body byte has been taken and the response is complete."""
        return self._conn.complete and not self._conn.chunks

    def aiter_raw(self) -> BodyChunks:
        """The body as it arrives (transfer-decoded, not content-decoded)."""
        return BodyChunks(self._conn, self._client.limits.read_timeout)

    async def aclose(self) -> None:
        """Pool the connection if its response was read to the end, else close it."""
        if not self._done:
            self._done = True
            self._client._release(self._origin, self._conn)


class BodyChunks:
    """`UpstreamResponse.aiter_raw()`: an async iterator, not an async generator (the event
    loop tracks each of those in a weak set: two Python calls a response)."""

    __slots__ = ("_conn", "_timeout")

    def __init__(self, conn: Http1Connection, timeout: float) -> None:
        self._conn = conn
        self._timeout = timeout

    def __aiter__(self) -> BodyChunks:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        while True:
            if conn.chunks:
                return conn.take_body()
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                raise StopAsyncIteration
            await conn.wait_for_data(self._timeout)


class UpstreamClient:
    """Sends requests to backends over pooled keep-alive connections (one event loop)."""

    def __init__(self, limits: ClientLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._idle: dict[Origin, list[Http1Connection]] = {}
        self._idle_count = 0
        self._origins: dict[str, Origin] = {}
        self._awaiting_head: dict[str, set[Http1Connection]] = {}
        self._free = limits.max_connections  # slots not taken (see `_acquire`)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def send(
        self,
        base_url: str,
        target: str,
        method: str,
        headers: Headers,
        body: bytes,
        *,
        first_byte_timeout: float | None = None,
    ) -> UpstreamResponse:
        """Write `method target` to the backend at `base_url`; wait for the response head
        (at most `first_byte_timeout` seconds after the request is written, if given)."""
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = Origin.parse(base_url)
        path = origin.base_path + target
        head = _request_head(method, path, origin.host_header, headers, len(body))
        await self._acquire()
        conn: Http1Connection | None = None
        try:
            conn = self._take_idle(origin)
            if conn is not None:
                try:
                    await self._exchange(conn, head, body, first_byte_timeout, base_url)
                    return UpstreamResponse(self, origin, conn)
                except (RemoteProtocolError, ReadError):
                    if conn.received:
                        raise
                    # Mostly the backend closing a pooled connection as the request went
                    # out (its idle timeout racing ours), unread. A backend that read it and
                    # died without a byte runs it twice: for inference, only compute lost.
                    conn.close()
            conn = await self._connect(origin)
            await self._exchange(conn, head, body, first_byte_timeout, base_url)
        except BaseException:
            if conn is not None:
                conn.close()
            self._release_slot()
            raise
        return UpstreamResponse(self, origin, conn)

    async def _exchange(
        self,
        conn: Http1Connection,
        head: bytes,
        body: bytes,
        first_byte: float | None,
        base_url: str,
    ) -> None:
        """Write the request on `conn` and wait for the head of its response (`conn` is
        listed as awaiting a head meanwhile, for `abandon_heads`)."""
        waiting = self._awaiting_head.get(base_url)
        if waiting is None:
            waiting = self._awaiting_head[base_url] = set()
        waiting.add(conn)
        try:
            limits = self.limits
            conn.begin()
            await conn.write(head + body if len(body) < 65536 else head, limits.write_timeout)
            if len(body) >= 65536:
                await conn.write(body, limits.write_timeout)
            if first_byte is None or first_byte >= limits.read_timeout:
                while not conn.headers_done:
                    if conn.error is not None:
                        raise conn.error
                    await conn.wait_for_data(limits.read_timeout)
                return
            await self._head_within(conn, first_byte)
        finally:
            waiting.discard(conn)

    def abandon_heads(self, base_url: str, reason: str) -> int:
        """End the waits for a response head from `base_url` (declared down): each raises
        `HeadAbandoned`, which fails over like a first-byte timeout. How many there were."""
        waiting = list(self._awaiting_head.get(base_url, ()))
        for conn in waiting:
            conn.abandon_head(reason)
        return len(waiting)

    async def _head_within(self, conn: Http1Connection, first_byte: float) -> None:
        """Wait for the response head, at most `first_byte` seconds."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = loop.time() + first_byte
        while not conn.headers_done:
            if conn.error is not None:
                raise conn.error
            left = deadline - loop.time()
            if left <= 0:
                raise FirstByteTimeout(f"no response head in {first_byte:g} s")
            try:
                await conn.wait_for_data(min(left, limits.read_timeout))
            except ReadTimeout:
                if deadline - loop.time() > 0:
                    raise
                raise FirstByteTimeout(f"no response head in {first_byte:g} s") from None

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        self._idle_count = 0

    # -- internals ------------------------------------------------------------------------
    async def _acquire(self) -> None:
        """One of `max_connections` slots; PoolTimeout after `pool_timeout` seconds. A free
        slot is taken without an await or a call (asyncio.Semaphore costs three Python calls
        and a generator a request); waiters are served first come, first served."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            async with asyncio.timeout(self.limits.pool_timeout):  # not wait_for: see _connect
                await fut
        except BaseException as exc:
            if fut.done() and not fut.cancelled():
                self._release_slot()  # handed a slot as the wait ended: pass it on
            elif fut in self._waiters:
                self._waiters.remove(fut)
            if isinstance(exc, TimeoutError):
                raise PoolTimeout(f"no free connection in {self.limits.pool_timeout:g} s") from None
            raise

    def _release_slot(self) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to the first waiter still waiting
                return
        self._free += 1

    def _take_idle(self, origin: Origin) -> Http1Connection | None:
        conns = self._idle.get(origin)
        oldest = self._clock() - self.limits.keepalive_expiry
        while conns:
            conn = conns.pop()  # most recently used: least likely to be timing out
            self._idle_count -= 1
            if conn.lost or conn.idle_since < oldest:
                conn.close()
                continue
            return conn
        return None

    async def _connect(self, origin: Origin) -> Http1Connection:
        loop = asyncio.get_running_loop()
        ctx = None
        if origin.scheme == "https":
            ctx = self._ssl = self._ssl or ssl.create_default_context()
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
        # that arrives as the connection attempt fails (seen: a refused connect), and the
        # cancelled health loop then ran on and blocked the gateway's shutdown.
        try:
            async with asyncio.timeout(self.limits.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: Http1Connection(loop), origin.host, origin.port, ssl=ctx
                )
        except TimeoutError:
            limit = self.limits.connect_timeout
            raise ConnectTimeout(f"connect timed out after {limit:g} s") from None
        except OSError as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from None
        return conn

    def _release(self, origin: Origin, conn: Http1Connection) -> None:
        self._release_slot()
        if self._closed or not conn.reusable() or self._idle_count >= self.limits.max_keepalive:
            conn.close()
            return
        conn.recycle(self._clock())
        self._idle.setdefault(origin, []).append(conn)
        self._idle_count += 1


def _request_head(method: str, target: str, host: bytes, headers: Headers, length: int) -> bytes:
    first = f"{method} {target} HTTP/1.1\r\n".encode("latin-1")
    fixed = b"host: " + host + b"\r\ncontent-length: %d\r\n" % length
    lines = [first, fixed]
    for name, value in headers:
        lines += (name, b": ", value, b"\r\n")
    lines.append(b"\r\n")
    head = b"".join(lines)
    # A line break in a header's name or value: more CRs or LFs after the fixed lines than
    # one per header line and the blank line. Counted once over the block, not per header
    # (`b"\r" in value` costs ~2k instructions on Python 3.11: bytes.__contains__ tries
    # the operand as an int first, raising and clearing a TypeError).
    start, lines_after = len(first) + len(fixed), len(headers) + 1
    if head.count(b"\r", start) != lines_after or head.count(b"\n", start) != lines_after:
        raise RemoteProtocolError("refusing a header with a line break")
    return head
