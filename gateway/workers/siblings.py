"""The channel between the workers of one `kvgate serve --workers N`: Unix stream sockets.

Each worker listens on its own socket in the master's private directory
(`WorkerContext.socket_path`) and keeps one connection open to each sibling for state frames
(`broadcast`: `gateway.state.local`'s events and load reports; nothing comes back). A request
(`ask`: a metrics page, an admin change to repeat) opens a connection of its own and waits for
the answer frame. A connection opens with a hello frame naming the sender; a starting worker
waits (a few seconds at most) for `joined`, every sibling connected both ways, before it serves.

Frame: a kind byte (`h` hello, `s` state, `q` request, `r` answer), the payload's length (4
bytes, big-endian), the payload (msgpack for requests and answers). A state frame is lost, and
counted in `dropped`, when no connection exists yet or `max_buffer` bytes already wait for a
sibling that stops reading: the sender never blocks. Why stream sockets, not datagrams:
docs/decisions/0016-workers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack  # type: ignore[import-untyped]

from gateway.workers.context import WorkerContext

log = logging.getLogger(__name__)

FRAME = struct.Struct(">cI")
MAX_FRAME = 256 * 1024 * 1024
OnRequest = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Siblings:
    """This worker's end of the channel: the listener, the connections out, requests."""

    def __init__(
        self,
        ctx: WorkerContext,
        on_state: Callable[[bytes], None],
        on_request: OnRequest,
        *,
        max_buffer: int = 8 * 1024 * 1024,
        retry_s: float = 0.1,
    ) -> None:
        self.ctx = ctx
        self.on_state = on_state
        self.on_request = on_request
        self._max_buffer = max_buffer
        self._retry_s = retry_s
        self._out: dict[int, asyncio.StreamWriter] = {}
        self._in: set[asyncio.StreamWriter] = set()  # the siblings' connections to this one
        self._heard: dict[asyncio.StreamWriter, int] = {}  # of those, state ones: sender
        self._retry_at: dict[int, float] = {}
        self.sent = 0  # state frames written, summed over siblings
        self.dropped = 0  # state frames not written: sibling not connected or not reading
        self.listening = False

    @property
    def connected(self) -> list[int]:
        return sorted(j for j, w in self._out.items() if not w.is_closing())

    @property
    def joined(self) -> bool:
        """Whether every sibling is connected both ways."""
        siblings = set(self.ctx.siblings)
        return set(self.connected) == siblings and set(self._heard.values()) == siblings

    async def wait_joined(self, timeout_s: float) -> bool:
        """Until `joined`, or False after `timeout_s` (a sibling not up: go on without it)."""
        deadline = time.monotonic() + timeout_s
        while not self.joined:
            if time.monotonic() > deadline:
                return False
            await self.connect()
            await asyncio.sleep(0.02)
        return True

    async def serve(self) -> None:
        """Runs until cancelled: the listener for the siblings' connections."""
        path = self.ctx.socket_path(self.ctx.index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a crashed predecessor's
        server = await asyncio.start_unix_server(self._handle, path=path)
        self.listening = True
        try:
            async with server:
                await server.serve_forever()
        finally:
            self.listening = False
            # Closed here, their handlers end on EOF rather than being cancelled at exit.
            for writer in (*self._out.values(), *self._in):
                writer.close()
            self._out.clear()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    async def connect(self) -> None:
        """Connect to the siblings this worker has no connection to (each at most every
        `retry_s`: one that is starting or restarting is not listening yet)."""
        now = time.monotonic()
        for j in self.ctx.siblings:
            writer = self._out.get(j)
            if (writer is not None and not writer.is_closing()) or now < self._retry_at.get(j, 0):
                continue
            try:
                async with asyncio.timeout(1.0):
                    _, writer = await asyncio.open_unix_connection(self.ctx.socket_path(j))
            except (OSError, TimeoutError):
                self._retry_at[j] = now + self._retry_s
                self._out.pop(j, None)
                continue
            hello = str(self.ctx.index).encode()
            writer.write(FRAME.pack(b"h", len(hello)) + hello)
            self._out[j] = writer

    def broadcast(self, payload: bytes) -> None:
        """A state frame to every connected sibling (no waiting)."""
        frame = FRAME.pack(b"s", len(payload)) + payload
        for j in self.ctx.siblings:
            writer = self._out.get(j)
            if writer is None or writer.is_closing():
                self.dropped += 1
                continue
            if writer.transport.get_write_buffer_size() > self._max_buffer:
                self.dropped += 1
                continue
            writer.write(frame)
            self.sent += 1

    async def ask(self, j: int, request: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
        """Sibling `j`'s answer to `request`; OSError, TimeoutError or EOFError if none."""
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_unix_connection(self.ctx.socket_path(j))
            try:
                payload = msgpack.packb(request)
                writer.write(FRAME.pack(b"q", len(payload)) + payload)
                kind, answer = await _read_frame(reader)
            finally:
                writer.close()
        if kind != b"r":
            raise EOFError(f"worker {j} answered a {kind!r} frame")
        result: dict[str, Any] = msgpack.unpackb(answer)
        return result

    async def ask_all(
        self, request: dict[str, Any], timeout_s: float = 5.0
    ) -> dict[int, dict[str, Any]]:
        """Every sibling's answer; `{"error": ...}` for one that gave none."""
        siblings = self.ctx.siblings
        results = await asyncio.gather(
            *(self.ask(j, request, timeout_s) for j in siblings), return_exceptions=True
        )
        answers: dict[int, dict[str, Any]] = {}
        for j, r in zip(siblings, results, strict=True):
            if isinstance(r, asyncio.CancelledError):
                raise r
            if isinstance(r, BaseException):
                answers[j] = {"error": f"{type(r).__name__}: {r}"}
            else:
                answers[j] = r
        return answers

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection from a sibling: state frames, or one request to answer."""
        self._in.add(writer)
        try:
            while True:
                kind, payload = await _read_frame(reader)
                if kind == b"s":
                    self._take_state(payload)
                elif kind == b"h":
                    self._heard[writer] = int(payload)
                elif kind == b"q":
                    answer = await self._answer(payload)
                    writer.write(FRAME.pack(b"r", len(answer)) + answer)
                    await writer.drain()
        except (EOFError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._in.discard(writer)
            self._heard.pop(writer, None)
            writer.close()

    def _take_state(self, payload: bytes) -> None:
        try:
            self.on_state(payload)
        except Exception:  # one bad frame must not end the connection
            log.exception("worker %d: a sibling's state frame failed", self.ctx.index)

    async def _answer(self, payload: bytes) -> bytes:
        try:
            answer = await self.on_request(msgpack.unpackb(payload))
        except Exception as exc:
            log.exception("worker %d: a sibling's request failed", self.ctx.index)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        return bytes(msgpack.packb(answer))


async def _read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    kind, length = FRAME.unpack(await reader.readexactly(FRAME.size))
    if length > MAX_FRAME:
        raise EOFError(f"frame of {length} bytes")
    return kind, await reader.readexactly(length)
