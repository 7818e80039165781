"""The port of `kvgate serve --workers N`: one listening socket per worker, SO_REUSEPORT.

Each worker binds its own socket to the same address with SO_REUSEPORT, and the kernel spreads
incoming connections over the group's listening sockets by a hash of each connection's
addresses (on Linux; elsewhere SO_REUSEPORT may not balance). The master first `reserve`s the
port: bound once without SO_REUSEPORT (`kvgate.cli.listen.check_can_listen`), so a port another
program holds fails the start, then held by a socket bound with SO_REUSEPORT that never listens
(port 0 becomes a real port every worker then binds; only listening sockets get connections).
Why not one shared listener: docs/decisions/0016-workers.md.
"""

from __future__ import annotations

import socket

BACKLOG = 2048  # uvicorn's default


def _bind(address_info: tuple[object, ...], port: int) -> socket.socket:
    family, kind, proto, _, address = address_info
    sock = socket.socket(family, kind, proto)  # type: ignore[arg-type]
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address[0], port, *address[2:]))  # type: ignore[index]
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_all(host: str, port: int) -> list[socket.socket]:
    """One socket per address of `host` (port 0: the first one's port for the others)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for info in infos:
            sockets.append(_bind(info, port))
            port = port or sockets[0].getsockname()[1]
    except BaseException:
        for s in sockets:
            s.close()
        raise
    return sockets


def reserve(host: str, port: int) -> tuple[int, list[socket.socket]]:
    """Hold `host`:`port` for the workers; the port (a free one for 0) and the sockets that
    hold it (close them when the workers are gone). OSError if it cannot be bound."""
    sockets = _bind_all(host, port)
    return int(sockets[0].getsockname()[1]), sockets


def listening_sockets(host: str, port: int, backlog: int = BACKLOG) -> list[socket.socket]:
    """A worker's own listening sockets on `host`:`port`, non-blocking, for uvicorn."""
    sockets = _bind_all(host, port)
    for s in sockets:
        s.listen(backlog)
        s.setblocking(False)
    return sockets
