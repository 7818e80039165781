"""One upstream HTTP/1.1 connection: an asyncio protocol around httptools' response parser.

Its exceptions, named like httpx's so log lines keep their meaning:
    HttpClientError
    ├── ConnectError            connection refused or reset while connecting
    │   └── ConnectTimeout
    ├── Timeout
    │   ├── ReadTimeout         no byte from the backend for `read_timeout` seconds
    │   │   └── FirstByteTimeout  no response head within `first_byte_timeout` seconds
    │   │       └── HeadAbandoned  no response head, and the backend was declared down
    │   └── WriteTimeout        the request could not be written in time
    ├── PoolTimeout             no connection slot free in time: the gateway's own overload
    └── ProtocolError
        ├── RemoteProtocolError  closed before the response finished, or unparsable
        └── ReadError            the socket failed mid-response
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import cast

import httptools

# Stop reading from the socket while this many body chunks wait for the client.
_HIGH_WATER = 64


class HttpClientError(Exception):
    """A failure talking to the backend; `gateway.upstream` maps it to a gateway error."""


class ConnectError(HttpClientError):
    pass


class ConnectTimeout(ConnectError):
    pass


class Timeout(HttpClientError):
    pass


class ReadTimeout(Timeout):
    pass


class WriteTimeout(Timeout):
    pass


class FirstByteTimeout(ReadTimeout):
    pass


class HeadAbandoned(FirstByteTimeout):
    """The backend was declared down (health probes) while this request waited for its
    response head: the wait is given up, as after a first-byte timeout."""


class PoolTimeout(HttpClientError):
    pass


class ProtocolError(HttpClientError):
    pass


class RemoteProtocolError(ProtocolError):
    pass


class ReadError(ProtocolError):
    pass


class Http1Connection(asyncio.Protocol):
    """Parses one response at a time; body chunks queue up until the reader takes them.

    Bytes after a complete response, or on an idle connection, are an unsolicited answer
    (nothing asked for them): they are never parsed into the current response nor taken as
    the next request's, and the connection is closed (`unsolicited`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.unsolicited = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._write_waiter: asyncio.Future[None] | None = None
        # Read timeout: one lazily re-armed timer per connection, not one per wait (a timer
        # costs ~4 us to arm and cancel; a request waits two or three times).
        self._read_deadline = 0.0
        self._read_limit = 0.0
        self._read_timer: asyncio.TimerHandle | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        # The parser is kept: after a complete keep-alive response it parses the next one
        # (a new parser per response looks up its ten callbacks again).
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.error: HttpClientError | None = None
        self.received = False  # any byte of this response arrived
        self._to_eof = False  # no length, not chunked: the body ends when the socket closes
        self._reading_paused = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.complete:  # also while idle: `recycle` leaves `complete` set
            self._unsolicited()
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.complete:  # garbage after the end: the response itself is whole
                self._unsolicited()
                return
            self._fail(RemoteProtocolError(f"malformed response: {exc}"))
            return
        if self.unsolicited:
            self.close()
            return
        if len(self.chunks) > _HIGH_WATER and self.transport and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._read_timer is not None:
            self._read_timer.cancel()  # else it would hold the connection until it fires
            self._read_timer = None
        if self.headers_done and self._to_eof and not self.complete and exc is None:
            self.complete = True
        elif not self.complete and self.error is None:
            reason = f": {exc}" if exc else ""
            cls = ReadError if exc else RemoteProtocolError
            self.error = cls(f"backend closed the connection before the response ended{reason}")
        self._wake()
        if self._write_waiter is not None and not self._write_waiter.done():
            self._write_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._write_waiter = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._write_waiter is not None and not self._write_waiter.done():
            self._write_waiter.set_result(None)
        self._write_waiter = None

    # -- httptools callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same read: stop taking its parts
            self.unsolicited = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.unsolicited:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.unsolicited:
            return
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:
            return  # an interim response (100 Continue, 103 Early Hints): the real one follows
        self.headers_done = True
        self._to_eof = self.status not in (204, 304) and not _has_length(self.headers)
        self._wake()

    def on_body(self, body: bytes) -> None:
        if not self.unsolicited:
            self.chunks.append(body)
            self._wake()

    def on_message_complete(self) -> None:
        if self.unsolicited:
            return
        if not self.headers_done:  # the end of an interim response
            self.headers.clear()
            return
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        self._wake()

    # -- used by the client ---------------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _unsolicited(self) -> None:
        self.unsolicited = True
        self.close()

    def abandon_head(self, reason: str) -> None:
        """Give up waiting for the response head (the backend was declared down)."""
        if not self.headers_done and self.error is None:
            self._fail(HeadAbandoned(reason))

    def _fail(self, error: HttpClientError) -> None:
        self.error = error
        self._wake()
        self.close()

    async def write(self, data: bytes, limit_s: float) -> None:
        if self.transport is None or self.lost or self.transport.is_closing():
            raise RemoteProtocolError("backend closed the connection before the request")
        self.transport.write(data)
        if self._write_waiter is not None:
            await self._wait(self._write_waiter, limit_s, WriteTimeout)

    async def wait_for_data(self, limit_s: float) -> None:
        """Wait until something happens (headers, a chunk, the end, an error); ReadTimeout
        after `limit_s` seconds without."""
        self._waiter = self._loop.create_future()
        self._read_limit = limit_s
        self._read_deadline = deadline = self._loop.time() + limit_s
        timer = self._read_timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._read_timer = self._loop.call_at(deadline, self._read_timer_fired)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _read_timer_fired(self) -> None:
        self._read_timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waiting: the next wait arms the timer again
        if self._loop.time() >= self._read_deadline:
            waiter.set_exception(ReadTimeout(f"no progress in {self._read_limit:g} s"))
        else:  # the wait began after the timer was armed: wait out its own deadline
            self._read_timer = self._loop.call_at(self._read_deadline, self._read_timer_fired)

    async def _wait(self, fut: asyncio.Future[None], limit_s: float, error: type[Timeout]) -> None:
        def expire() -> None:
            if not fut.done():
                fut.set_exception(error(f"no progress in {limit_s:g} s"))

        # A timer handle rather than asyncio.wait_for: no wrapper task per chunk.
        timer = self._loop.call_later(limit_s, expire)
        try:
            await fut
        finally:
            timer.cancel()

    def take_body(self) -> bytes:
        """All queued body bytes, joined (one relay send for what arrived together)."""
        data = self.chunks.popleft() if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        if self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return (
            self.complete
            and self.keep_alive
            and not self.lost
            and not self.unsolicited
            and self.error is None
        )

    def recycle(self, now: float) -> None:
        """Idle until `begin`: any byte that arrives meanwhile closes the connection."""
        self.idle_since = now

    def begin(self) -> None:
        """Ready to read the answer to the request about to be written."""
        if self.complete:
            self._reset()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def _has_length(headers: list[tuple[bytes, bytes]]) -> bool:
    """A Content-Length or Transfer-Encoding header is present: the body's end is framed."""
    for name, _ in headers:
        if len(name) in (14, 17) and name.lower() in (b"content-length", b"transfer-encoding"):
            return True
    return False
