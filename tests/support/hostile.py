"""Hostile clients on raw sockets: bytes no HTTP library would send, and connections that
never finish a request.

`send_raw` writes exactly the given bytes and reads what comes back until the server closes
or the time is up. `IdleSockets` holds many connections open at once (non-blocking connects,
so a server that stops accepting does not stall the test) and counts the ones the server
has closed.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time

HOST = "127.0.0.1"


def send_raw(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` and return what the server sent back before closing or ``timeout``."""
    received = bytearray()
    deadline = time.monotonic() + timeout
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        # In 64 KB pieces, stopping once the server answers (as curl does): a server that
        # answers early and closes resets the connection, and the reset would lose the answer.
        for at in range(0, len(data), 1 << 16):
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(data[at : at + (1 << 16)])
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                part = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not part:
                break
            received += part
    return bytes(received)


def status_of(response: bytes) -> int | None:
    """The status code of the first response in ``response``, None if there is none."""
    if not response.startswith(b"HTTP/1."):
        return None
    try:
        return int(response.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


class IdleSockets:
    """``count`` connections to ``port`` that send ``payload`` (maybe nothing) and then wait."""

    def __init__(self, port: int, count: int, payload: bytes = b"") -> None:
        self.port, self.count, self.payload = port, count, payload
        self.socks: list[socket.socket] = []
        self.live: list[socket.socket] = []  # the ones that connected

    def open(self, within: float = 30.0) -> IdleSockets:
        poller = select.poll()
        pending: dict[int, socket.socket] = {}
        for _ in range(self.count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            self.socks.append(sock)
            if sock.connect_ex((HOST, self.port)) in (0, errno.EINPROGRESS):
                pending[sock.fileno()] = sock
                poller.register(sock, select.POLLOUT)
        deadline = time.monotonic() + within
        while pending and time.monotonic() < deadline:
            for fd, _event in poller.poll(200):
                sock = pending.pop(fd)
                poller.unregister(fd)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    self.live.append(sock)
                    if self.payload:
                        with contextlib.suppress(OSError):
                            sock.send(self.payload)
        return self

    def closed_by_server(self) -> int:
        """How many of the connected sockets the server has closed (or reset) by now."""
        closed = 0
        for sock in self.live:
            try:
                while True:
                    part = sock.recv(65536)
                    if not part:
                        closed += 1
                        break
            except BlockingIOError:
                continue  # still open
            except OSError:
                closed += 1  # reset
        return closed

    @property
    def connected(self) -> int:
        return len(self.live)

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks.clear()
        self.live.clear()

    def __enter__(self) -> IdleSockets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
