"""Who may call what on the API port: the `security:` section put together.

`AccessControl.admit(scope)` runs before every handler and returns the caller's `Principal`
(stored by the app in `scope["kvgate.principal"]`), or raises:

| path                      | admin_port set | admin key set | API keys only | nothing set |
|---------------------------|----------------|---------------|---------------|-------------|
| /health, /ready           | open           | open          | open          | open        |
| /admin/*, /metrics        | 404            | admin key     | 404           | open (+warning) |
| everything else (/v1/...) | API key if any configured, else anonymous                   |

With API keys but no admin credential and no admin port, admin and metrics are closed rather
than left open: a front door with keys must not let anyone read its backends or dry-run
routes. The admin key is `security.admin_key_sha256`, or env `KVGATE_ADMIN_KEY` (plaintext,
hashed here), sent as `Authorization: Bearer <key>`; the admin listener asks for it too.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from gateway.errors import AuthenticationError, NotFoundError
from gateway.header_policy import HeaderPolicy, build_header_policy
from routing.config.schema import ConfigError, GatewayConfig

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/health", "/ready"})
ADMIN = Principal("admin", "admin")


def is_admin_path(path: str) -> bool:
    return path in {"/metrics", "/admin"} or path.startswith("/admin/")


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
        self._on_refused = on_refused  # counts each 401 by reason
        try:
            self.keys: KeyStore = build_key_store(config.security, environ, clock)
            self.headers: HeaderPolicy = build_header_policy(
                config.security, self.keys.enabled, environ
            )
            self.admin = admin_access(config, environ)
        except ValueError as exc:
            raise ConfigError(f"security: {exc}") from None
        self.admin_port = config.server.admin_port
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
        return ADMIN

    def log_start_up(self) -> None:
        """One line on what is open: operators should not learn it from a scan."""
        if self.admin_port is not None:
            return
        if not self._admin_here:
            log.warning(
                "API keys are set but neither server.admin_port nor an admin key "
                "(security.admin_key_sha256, %s): /admin/* and /metrics are disabled",
                ADMIN_KEY_ENV,
            )
        elif self.admin.digest is None:
            log.warning(
                "/admin/* and /metrics are open on the API port: set server.admin_port "
                "or an admin key (security.admin_key_sha256, %s)",
                ADMIN_KEY_ENV,
            )
