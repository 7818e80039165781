"""Graceful shutdown: SIGTERM drains the gateway instead of cutting it off.

1. SIGTERM: `Drain.draining` turns true, so `/ready` answers 503 `"draining": true`, and every
   request is still served for `server.drain_delay_s`, marked `Connection: close`.
2. The listener closes; idle keep-alive connections close, busy ones after their response.
3. In-flight responses get `server.shutdown_grace_s` to finish.
4. `Drain.end_responses` cancels what is left, each ending well-formed: an SSE stream at an
   event boundary gets one `data: {"error": ...}` event and its end, a response not started
   503 `gateway_shutting_down`; a body cut mid-way is dropped with the connection.
5. The app's lifespan shutdown runs; the process exits 0.

A second SIGTERM skips the rest of the delay; SIGINT goes straight to step 2, a second one
forces the exit. `GatewayServer` is `uvicorn.Server` with its signal handling and task wait
adapted (the delay checked on its 0.1 s tick, no timer set from a signal handler); the master of
`--workers N` passes each signal on to every worker (docs/architecture.md, on SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import TypeVar

import orjson
import uvicorn

from gateway.asgi import Message, Send, TrackedSend, send_bytes
from gateway.errors import ShuttingDownError
from gateway.proxy import BrokenBodyError

log = logging.getLogger(__name__)
T = TypeVar("T")
# After the grace: how long the ended responses get to flush before uvicorn cancels tasks.
_END_S = 5.0


class Drain:
    """Shutdown state shared by the server (which starts it) and the app (whose `/ready`
    reports it and whose in-flight responses run under `run`)."""

    def __init__(self) -> None:
        self.draining = False
        self._in_flight: set[asyncio.Task[object]] = set()
        self._ending: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        self.draining = True

    def send_for(self, send: Send) -> Send:
        """`send`, adding `Connection: close` to the response while draining."""
        if not self.draining:
            return send

        def closing(message: Message) -> Awaitable[None]:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"connection", b"close")]
                message = {**message, "headers": headers}
            return send(message)

        return closing

    async def run(self, work: Awaitable[T], send: TrackedSend) -> T | None:
        """`work` (the relaying of one response) in the calling task; None if
        `end_responses` ended it (the response was then ended as the module says)."""
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            return await work
        except asyncio.CancelledError:
            if task not in self._ending or task.uncancel() > 0:
                raise
        finally:
            self._in_flight.discard(task)
            self._ending.discard(task)
        await end_response(send)
        return None

    def end_responses(self) -> int:
        """Cancel every response still running under `run`; how many."""
        for task in self._in_flight:
            if task not in self._ending:
                self._ending.add(task)
                task.cancel()
        return len(self._ending)


async def end_response(send: TrackedSend) -> None:
    """End a response the shutdown cut short, well-formed where the protocol allows."""
    error = ShuttingDownError("the gateway is shutting down")
    if not send.started:
        headers = [*error.headers(), (b"connection", b"close")]
        await send_bytes(send, error.status, error.body(), headers=headers)
    elif send.finished:
        return
    elif send.sse and send.at_event_boundary:
        event = b"data: " + orjson.dumps({"error": orjson.loads(error.body())["error"]})
        await send({"type": "http.response.body", "body": event + b"\n\n", "more_body": False})
    else:
        raise BrokenBodyError(error.message)  # the app drops the connection


class GatewayServer(uvicorn.Server):
    """uvicorn's server with the drain sequence of this module."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Drain,
        drain_delay_s: float,
        grace_s: float,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        # uvicorn's own deadline is the backstop; the grace is kept here.
        config.timeout_graceful_shutdown = int(grace_s + _END_S + 1)
        super().__init__(config)
        self.drain = drain
        self.drain_delay_s = drain_delay_s
        self.grace_s = grace_s
        self._drain_since: float | None = None
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        if sockets is not None:  # uvicorn says where it listens only for sockets it bound
            self._log_started_message(sockets)
        if self._on_started is not None:
            self._on_started()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM:
            super().handle_exit(sig, frame)
        elif self._drain_since is None and not self.should_exit:
            self.drain.start()
            self._drain_since = time.monotonic()
            # A fresh context: the signal may interrupt a request, whose id is not this line's.
            contextvars.Context().run(
                log.info, "SIGTERM: not ready, serving %g s more before closing", self.drain_delay_s
            )
        else:
            # Not re-raised after the shutdown (uvicorn does that), so the exit status is 0.
            self.should_exit = True

    async def on_tick(self, counter: int) -> bool:
        since = self._drain_since
        if since is not None and time.monotonic() - since >= self.drain_delay_s:
            return True
        return await super().on_tick(counter)

    async def _wait_tasks_to_complete(self) -> None:
        try:
            await asyncio.wait_for(super()._wait_tasks_to_complete(), self.grace_s)
        except TimeoutError:
            ended = self.drain.end_responses()
            log.warning("shutdown grace of %g s over: ending %d response(s)", self.grace_s, ended)
            await super()._wait_tasks_to_complete()
