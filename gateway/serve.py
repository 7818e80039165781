"""`kvgate serve`'s server: uvicorn with the gateway's protocol, limits, TLS and drain.

uvicorn's `Server` is run directly (not `uvicorn.run`) so that SIGTERM drains
(`gateway.lifecycle`) and the TLS context can be one that reloads its certificate
(`gateway.http.tls`); the HTTP protocol carries the limits (`gateway.http.limits`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import socket
import ssl
from collections.abc import Callable

import uvicorn

from gateway.app import GatewayApp
from gateway.http.limits import ServerEvents, ServerLimits
from gateway.http.server import server_protocol
from gateway.http.server_metrics import ServerEventsCollector
from gateway.http.tls import ReloadingTls
from gateway.lifecycle import GatewayServer
from routing.config.schema import ConfigError, ServerSection

log = logging.getLogger(__name__)


def run_gateway(
    app: GatewayApp,
    server: ServerSection,
    log_level: str,
    *,
    sockets: list[socket.socket] | None = None,
    on_started: Callable[[], None] | None = None,
) -> int:
    """Serve `app` until a signal ends it; the process exit status. `sockets`: listening
    sockets to serve on instead of binding `server.host`/`port` (a worker's own, bound with
    SO_REUSEPORT); `on_started` is called once the server serves."""
    tls = _tls(server)
    events = ServerEvents()
    limits = ServerLimits.from_config(server, app.runtime.config.upstream)
    log.info("client connections capped at %d (server.max_connections)", limits.max_connections)
    protocol = server_protocol(limits, events)
    app.runtime.metrics.registry.register(ServerEventsCollector(events))
    config = uvicorn.Config(
        app,
        host=server.host,
        port=server.port,
        loop="uvloop",
        http=protocol,
        # No X-Forwarded-* rewriting: the client address is the peer's (the app appends it
        # to X-Forwarded-For), and the middleware would add a coroutine frame per request.
        proxy_headers=False,
        lifespan="on",
        access_log=False,
        server_header=False,
        log_level=log_level,
        log_config=None,
        # Annotated int, used as float seconds (loop.call_later).
        timeout_keep_alive=server.idle_timeout_s,  # type: ignore[arg-type]
        # The gateway's protocol refuses connections over the cap itself; uvicorn's stock
        # protocol (the fallback) can only answer 503 past it.
        limit_concurrency=limits.max_connections if protocol == "auto" else None,
        ssl_certfile=server.tls_cert_file,
        ssl_keyfile=server.tls_key_file,
    )
    config.load()
    if tls is not None:
        config.ssl = tls.listener  # uvicorn's own context cannot be reloaded

    def started() -> None:
        # The port bound (the real one when the config said 0), for the tuner beside it.
        app.runtime.api_port = gateway_server.servers[0].sockets[0].getsockname()[1]
        if on_started is not None:
            on_started()

    gateway_server = GatewayServer(
        config, app.drain, server.drain_delay_s, server.shutdown_grace_s, started
    )
    # Start-up objects live as long as the process: out of GC passes (docs/decisions/0004).
    gc.collect()
    gc.freeze()
    # SIGINT is re-raised by uvicorn after its graceful shutdown; a failed start-up exits 3.
    with contextlib.suppress(KeyboardInterrupt):
        gateway_server.run(sockets=sockets)
    return 0


def _tls(server: ServerSection) -> ReloadingTls | None:
    if server.tls_cert_file is None or server.tls_key_file is None:
        return None
    try:
        return ReloadingTls(server.tls_cert_file, server.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"server.tls_cert_file / tls_key_file: {exc}") from None
