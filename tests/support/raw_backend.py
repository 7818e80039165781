"""A backend that writes raw bytes on a real socket: for faults no well-behaved server makes.

uvicorn (under ``FakeEngine``) always frames its responses; a test of the gateway's upstream
client needs a backend that cuts an event in half, answers twice, or closes a kept-alive
connection without answering. ``RawBackend`` speaks just enough HTTP/1.1 for the gateway's
health probes (``GET /health`` 200, ``GET /v1/models`` listing ``m1``, anything else 404),
and answers each POST with what ``script(conn, n)`` returns: ``conn`` numbers the
connections that carried a POST (from 0, in the order of their first POST), ``n`` the
POSTs on that connection (from 0).

Blocking sockets, one daemon thread per connection; ``close()`` shuts everything down.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.servers import HOST

_MODELS = b'{"object":"list","data":[{"id":"m1","object":"model","owned_by":"raw"}]}'


@dataclass(frozen=True, slots=True)
class Reply:
    """Bytes to write for one POST, then: keep the connection, or close it after `pause_s`."""

    data: bytes
    close: bool = False
    pause_s: float = 0.0  # before closing, or before writing `later`
    later: bytes = b""  # written `pause_s` after `data` (an answer nobody asked for)


def response(
    body: bytes, status: str = "200 OK", content_type: bytes = b"application/json"
) -> bytes:
    """A complete keep-alive response with a Content-Length."""
    head = b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (status.encode(), content_type, len(body)) + body


def chunked_head(content_type: bytes = b"text/event-stream") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n" % (
        content_type
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class RawBackend:
    """See the module docstring. ``posts`` counts the POSTs seen, ``connections`` the
    connections that carried one."""

    def __init__(self, script: Callable[[int, int], Reply]) -> None:
        self.script = script
        self.posts = 0
        self.connections = 0
        self._listener = socket.create_server((HOST, 0))
        self._conns: list[socket.socket] = []
        self._closed = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                conn.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        posts = 0
        number = -1
        try:
            while True:
                request, buf = _read_request(conn, buf)
                if request is None:
                    return
                if not request.startswith(b"POST "):
                    conn.sendall(_get(request))
                    continue
                with self._lock:
                    self.posts += 1
                    if number < 0:
                        number = self.connections
                        self.connections += 1
                reply = self.script(number, posts)
                posts += 1
                conn.sendall(reply.data)
                if reply.later:
                    time.sleep(reply.pause_s)
                    conn.sendall(reply.later)
                if reply.close:
                    time.sleep(reply.pause_s)
                    return
        except OSError:
            return
        finally:
            conn.close()


def _get(request: bytes) -> bytes:
    path = request.split(b" ", 2)[1]
    if path == b"/health":
        return response(b"", content_type=b"text/plain")
    if path == b"/v1/models":
        return response(_MODELS)
    return response(b'{"detail":"Not Found"}', "404 Not Found")


def _read_request(conn: socket.socket, buf: bytes) -> tuple[bytes | None, bytes]:
    """One request (head and Content-Length body) off `conn`; None at EOF."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None, b""
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None, b""
        rest += data
    return head, rest[length:]
