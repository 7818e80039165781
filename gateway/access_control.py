"""Who may call what on the API port: the `security:` section put together.

`AccessControl.admit(scope)` runs before every handler and returns the caller's `Principal`
(the app stores it in `scope["kvgate.principal"]`), or raises:

| path            | admin_port set | admin key set | API keys only | nothing set                |
|-----------------|----------------|---------------|---------------|----------------------------|
| /health, /ready | open           | open          | open          | open                       |
| /admin/*        | 404            | admin key     | 404           | loopback clients, else 403 |
| /metrics        | 404            | admin key     | 404           | open (read-only)           |
| everything else | API key if any configured, else anonymous                          |

A loopback client is a loopback TCP peer whose request has no forwarding header (a proxy on
this host relays others'); `X-Forwarded-For` never makes one. The admin key is
`security.admin_key_sha256` or env `KVGATE_ADMIN_KEY`, sent as `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from gateway.asgi import Scope
from gateway.auth import (
    ADMIN_KEY_ENV,
    ANONYMOUS,
    KeyStore,
    Principal,
    admin_access,
    authenticate,
    build_key_store,
)
from gateway.errors import AuthenticationError, ForbiddenError, NotFoundError
from gateway.header_policy import HeaderPolicy, build_header_policy, client_address
from routing.config.schema import ConfigError, GatewayConfig

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/health", "/ready"})
ADMIN = Principal("admin", "admin")
# A proxy on this host adds one of these: its request is not from this machine's clients.
FORWARDING_HEADERS = frozenset({b"x-forwarded-for", b"forwarded", b"x-real-ip"})


def is_admin_path(path: str) -> bool:
    return path in {"/metrics", "/admin"} or path.startswith("/admin/")


def is_loopback(host: str | None) -> bool:
    """Whether `host` (an address, as the ASGI scope's `client` gives it) is a loopback
    address: 127.0.0.0/8, ::1, or ::ffff:127.x.y.z. None (a Unix socket, unknown) is not."""
    if host is None:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def is_local_client(scope: Scope) -> bool:
    """The request comes from this machine: a loopback peer (the TCP peer, never a header's
    claim) and no forwarding header, which a proxy relaying another host's request adds."""
    if not is_loopback(client_address(scope)):
        return False
    return not any(name.lower() in FORWARDING_HEADERS for name, _ in scope["headers"])


def bearer_from_scope(scope: Scope) -> str | None:
    """The token of the request's `Authorization: Bearer` header (the last one wins)."""
    value = b""
    for name, v in scope["headers"]:
        if name.lower() == b"authorization":
            value = v
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class Listener(Protocol):
    """The admin listener (`gateway.admin_app.AdminListener`), as opened here."""

    @property
    def port(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class AccessControl:
    """Authentication and header policy for one gateway (see the module docstring)."""

    def __init__(
        self,
        config: GatewayConfig,
        environ: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self._on_refused = on_refused  # counts each 401 and 403 by reason
        try:
            self.keys: KeyStore = build_key_store(config.security, environ, clock)
            self.headers: HeaderPolicy = build_header_policy(
                config.security, self.keys.enabled, environ
            )
            self.admin = admin_access(config, environ)
        except ValueError as exc:
            raise ConfigError(f"security: {exc}") from None
        self.admin_port = config.server.admin_port
        self._admin_host = config.server.admin_host or config.server.host
        # Admin on the API port: behind the admin key, else open unless client keys exist.
        self._admin_here = self.admin_port is None and (
            self.admin.digest is not None or not self.keys.enabled
        )
        self.listener: Listener | None = None  # while open, with admin_port
        self._sighup = False
        self._on_sighup: Callable[[], None] | None = None

    async def open(
        self, listener: Listener | None = None, on_sighup: Callable[[], None] | None = None
    ) -> None:
        """At start-up: warn about what is open, start the admin `listener` (the caller's, for
        `server.admin_port`; OSError if it cannot bind), and on SIGHUP (main thread) re-read
        the keys file and call `on_sighup` (the config reload)."""
        self.log_start_up()
        self._on_sighup = on_sighup
        if self.keys.reloadable or on_sighup is not None:
            # Signals reach only the main thread's loop; elsewhere (tests) the mtime check does.
            loop = asyncio.get_running_loop()
            with contextlib.suppress(ValueError, RuntimeError):
                loop.add_signal_handler(signal.SIGHUP, self._sighup_received)
                self._sighup = True
        if listener is not None:
            self.listener = listener
            await listener.start()

    def _sighup_received(self) -> None:
        if self.keys.reloadable:
            self.keys.request_reload()
        if self._on_sighup is not None:
            self._on_sighup()

    async def close(self) -> None:
        if self._sighup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._sighup = False
        if self.listener is not None:
            await self.listener.stop()
            self.listener = None

    def admit(self, scope: Scope) -> Principal:
        path = scope["path"]
        if path in PROBE_PATHS:
            return ANONYMOUS
        token = bearer_from_scope(scope)
        if not is_admin_path(path):
            try:
                return authenticate(self.keys, token)
            except AuthenticationError:
                self._on_refused("missing_key" if token is None else "invalid_key")
                raise
        if not self._admin_here:
            raise NotFoundError(f"no route for {scope['method']} {path}")
        try:
            self.admin.check(token)
        except AuthenticationError:
            self._on_refused("admin_key")
            raise
        if self.admin.digest is None and path != "/metrics" and not is_local_client(scope):
            self._on_refused("admin_not_local")
            raise ForbiddenError(
                "without an admin key the admin API answers only clients on this machine: set "
                f"security.admin_key_sha256 (or {ADMIN_KEY_ENV}) or server.admin_port"
            )
        return ADMIN

    def log_start_up(self) -> None:
        """One line on what is open: operators should not learn it from a scan."""
        if self.admin_port is not None:
            if self.admin.digest is None and not _local(self._admin_host):
                log.warning(
                    "the admin listener on %s answers any client that reaches it: set an admin "
                    "key (security.admin_key_sha256, %s) or server.admin_host: 127.0.0.1",
                    self._admin_host,
                    ADMIN_KEY_ENV,
                )
            return
        if not self._admin_here:
            log.warning(
                "API keys are set but neither server.admin_port nor an admin key "
                "(security.admin_key_sha256, %s): /admin/* and /metrics are disabled",
                ADMIN_KEY_ENV,
            )
        elif self.admin.digest is None:
            log.warning(
                "no admin key: /admin/* on the API port answers clients on this machine only "
                "(others get 403) and /metrics answers anyone; set an admin key "
                "(security.admin_key_sha256, %s) or server.admin_port",
                ADMIN_KEY_ENV,
            )


def _local(host: str) -> bool:
    """A listening address only this machine can reach (a name is taken at its word)."""
    return host == "localhost" or is_loopback(host)
