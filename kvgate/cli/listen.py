"""Listen checks made just before a server binds: a busy port or a foreign address costs
one line and exit status 1 (`ListenError`), not a server's traceback."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from routing.config.schema import GatewayConfig


class ListenError(Exception):
    """A server cannot listen where it was told to (port in use, address not local, ...)."""


def check_can_listen(host: str, ports: Iterable[int]) -> None:
    """Bind each (host, port) as the server is about to, then let go; ListenError names the
    first that fails."""
    for port in ports:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            addresses = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            for family, kind, proto, _, address in addresses:
                with socket.socket(family, kind, proto) as sock:
                    # As asyncio's create_server: a port in TIME_WAIT is free, IPv6 only v6.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
        except (OSError, OverflowError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ListenError(f"cannot listen on {shown}: {reason.lower()}") from None


def check_admin_port(cfg: GatewayConfig) -> None:
    """ListenError if the admin listener's port is taken (it binds in the app's start-up)."""
    server = cfg.server
    if server.admin_port:
        if server.admin_port == server.port and (server.admin_host or server.host) == server.host:
            raise ListenError(f"server.admin_port {server.admin_port} is server.port")
        check_can_listen(server.admin_host or server.host, [server.admin_port])
