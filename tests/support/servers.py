"""Real uvicorn servers on 127.0.0.1, port 0, each in a background thread with its own loop.

The style guide rules out threads with private event loops in product code; here they are
the point: the server under test and the test's clients must not share a loop, or a test
that blocks (a sync httpx or openai client) would deadlock the server it talks to.

``ServerThread`` can be stopped gracefully (``stop``), killed abruptly (``kill``: listener
closed and every connection reset at once, like a crashed engine) and started again on the
same port (``start`` after either), so failover tests can take a backend down and back up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import uvicorn

from sim.live.processes import free_port
from tests.support.asgi_types import ASGIApp

HOST = "127.0.0.1"
Lifespan = Literal["auto", "on", "off"]


class _Server(uvicorn.Server):
    """A uvicorn server that reports start-up and leaves no socket open behind it."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # After a forced exit or the graceful timeout, connections may still be open; the
        # loop is about to close, and an unclosed transport would be a ResourceWarning.
        self.abort_connections()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run

    def abort_connections(self) -> None:
        """Close the listeners and reset every connection. Runs on the server's loop."""
        for listener in getattr(self, "servers", []):
            listener.close()
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()

    def kill(self) -> None:
        # Clients see a crash; the app still gets its lifespan shutdown, so it can release
        # what it owns (clients, tasks) instead of leaking it into the next test.
        self.abort_connections()
        self.should_exit = True


class ServerThread:
    """Runs an ASGI app under a real uvicorn server on ``127.0.0.1`` in a daemon thread.

    Use as a context manager, or call ``start()`` / ``stop()``. The first start binds port 0;
    ``.port`` and ``.url`` give the real port. A later ``start()`` rebinds that same port
    (SO_REUSEADDR is set), which fails only if another process grabbed it meanwhile.
    An exception that ended the server thread is re-raised by ``stop()``/``kill()``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        lifespan: Lifespan = "auto",
        graceful_timeout: float = 1.0,
        startup_timeout: float = 10.0,
    ) -> None:
        self.app = app
        self.lifespan = lifespan
        self.graceful_timeout = graceful_timeout
        self.startup_timeout = startup_timeout
        self._port: int | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("server was never started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> ServerThread:
        if self._thread is not None:
            raise RuntimeError("server is already running")
        config = uvicorn.Config(
            self.app,
            host=HOST,
            port=self._port or 0,
            loop="asyncio",
            http="httptools",
            ws="none",
            lifespan=self.lifespan,
            interface="asgi3",
            proxy_headers=False,  # as `kvgate serve`: the scope's client is the peer
            log_config=None,  # leave the test process's logging alone
            access_log=False,
            # Annotated int, but only ever passed to asyncio.wait_for: seconds as float work.
            timeout_graceful_shutdown=self.graceful_timeout,  # type: ignore[arg-type]
        )
        ready = threading.Event()
        self._server = server = _Server(config, ready)
        self._error = None
        self._thread = threading.Thread(
            target=self._run, args=(server,), name=f"uvicorn-{HOST}:{self._port or 0}", daemon=True
        )
        self._thread.start()
        if not ready.wait(self.startup_timeout) or not server.started:
            server.should_exit = True
            error = self._join_thread(force_after=0.0)
            raise RuntimeError("uvicorn did not start") from error
        self._port = server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Graceful stop: in-flight responses get ``graceful_timeout`` s, then are cut."""
        if self._server is None:
            return
        self._server.should_exit = True
        self._join(force_after=timeout)

    def kill(self) -> None:
        """Abrupt stop: refuse new connections and reset open ones at once."""
        if self._server is None:
            return
        self._call_in_loop(self._server.kill)
        self._join(force_after=5.0)

    def __enter__(self) -> ServerThread:
        if self._thread is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ServerThread {HOST}:{self._port} {state}>"

    def _run(self, server: _Server) -> None:
        try:
            server.run()
        except BaseException as exc:  # SystemExit on start-up failure, or a crash
            self._error = exc
        finally:
            server.ready.set()

    def _call_in_loop(self, callback: Callable[[], None]) -> None:
        server = self._server
        if server is None or server.loop is None:
            return
        # RuntimeError: the loop already closed, so the server is gone anyway.
        with contextlib.suppress(RuntimeError):
            server.loop.call_soon_threadsafe(callback)

    def _join(self, force_after: float) -> None:
        error = self._join_thread(force_after)
        if error is not None:
            raise RuntimeError(f"{self!r}: server thread failed") from error

    def _join_thread(self, force_after: float) -> BaseException | None:
        """Wait for the thread, forcing the exit after ``force_after`` s; its error if any."""
        thread, server = self._thread, self._server
        if thread is None or server is None:
            return None
        thread.join(force_after)
        if thread.is_alive():
            server.force_exit = True
            self._call_in_loop(server.kill)
            thread.join(5.0)
        if thread.is_alive():
            raise RuntimeError(f"{self!r}: server thread did not exit")
        self._thread = self._server = None
        error, self._error = self._error, None
        return error


def dead_url() -> str:
    """``http://127.0.0.1:P`` where nothing listens (connection refused): a port that was
    free a moment ago (``sim.live.processes.free_port``; racy, so never start a server on it,
    servers bind port 0)."""
    return f"http://{HOST}:{free_port()}"
