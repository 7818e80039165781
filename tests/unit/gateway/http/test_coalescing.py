"""Coalesced writes without sockets: one write per loop step, flushed on close."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.http.coalescing import CoalescingTransport


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: object = None) -> str:
        return f"info:{name}"

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def _wrap(inner: RecordingTransport) -> CoalescingTransport:
    transport: Any = inner
    return CoalescingTransport(transport, asyncio.get_running_loop())


async def test_writes_of_one_step_leave_in_one_write() -> None:
    inner = RecordingTransport()
    t = _wrap(inner)
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(b"body")
    assert inner.writes == []
    assert t.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nbody")
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    t.write(b"next")  # a later step: its own write
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"next"]


async def test_close_flushes_first_and_later_writes_are_dropped() -> None:
    inner = RecordingTransport()
    t = _wrap(inner)
    t.write(b"last")
    t.close()
    assert (inner.writes, inner.closed) == ([b"last"], True)
    t.write(b"too late")
    await asyncio.sleep(0)
    assert inner.writes == [b"last"]


async def test_other_calls_pass_through() -> None:
    inner = RecordingTransport()
    t = _wrap(inner)
    assert t.get_extra_info("peername") == "info:peername"
    assert not t.is_closing()
    t.pause_reading()
    assert not inner.reading
    t.resume_reading()
    assert inner.reading


def test_it_passes_through_the_whole_transport_interface() -> None:
    public = {
        name
        for cls in (asyncio.ReadTransport, asyncio.WriteTransport)
        for name in vars(cls)
        if not name.startswith("_")
    }
    assert public <= set(vars(CoalescingTransport))
