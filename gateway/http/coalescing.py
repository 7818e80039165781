"""`CoalescingTransport`: the writes of one event-loop step leave in one `write()` system
call (`gateway.http.server` says why); the server's protocol wraps each connection in one."""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingTransport:
    """Wraps a transport: the writes of one loop step are joined and written once, at its
    end; the rest of `asyncio.Transport` is passed through (closing flushes first). Each
    method is spelled out: with a `__getattr__`, every attribute read on the instance, its
    own included, would go through the slower lookup that calls it."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if type(data) is not bytes:  # bytes(data) of bytes is itself, after a slot lookup
            data = bytes(data)
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self._flush)
        else:
            self._pending.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        pending = sum(map(len, self._pending)) if self._pending else 0
        return pending + self._transport.get_write_buffer_size()

    def abort(self) -> None:
        self._transport.abort()  # a flush still due then finds it closing: nothing written

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
