"""The server side without sockets: coalesced writes, the disconnect signal, and the choice
of protocol when uvicorn's internals are missing."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl

import gateway.http
from gateway.http.server import CoalescingTransport, DisconnectSignal, server_protocol
from gateway.http.uvicorn_protocol import GatewayHttpProtocol


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


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
    t = _wrap(RecordingTransport())
    assert t.get_extra_info("peername") == "info:peername"
    assert not t.is_closing()


def test_disconnect_signal_fires_once() -> None:
    calls: list[str] = []
    signal = DisconnectSignal()
    signal.fire()  # nobody listening yet: remembered
    assert signal.disconnected
    signal.callback = lambda: calls.append("x")
    signal.fire()
    assert calls == []  # fired already


# -- choosing the protocol at start-up ------------------------------------------------------


def test_the_gateway_protocol_is_served_when_uvicorn_has_its_internals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        protocol = server_protocol()
        assert isinstance(protocol, type) and issubclass(protocol, GatewayHttpProtocol)
    assert caplog.records == []


def _without_httptools_impl(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if uvicorn had no `protocols.http.httptools_impl` (and ours was not imported yet)."""
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    monkeypatch.delitem(sys.modules, "gateway.http.uvicorn_protocol")
    monkeypatch.delattr(gateway.http, "uvicorn_protocol")


def _without_on_message_begin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "on_message_begin")


def _without_cycle_disconnected(monkeypatch: pytest.MonkeyPatch) -> None:
    def init(self: object, *args: object, **kwargs: object) -> None:
        pass  # a cycle that no longer tracks `disconnected` (or its scope)

    monkeypatch.setattr(httptools_impl.RequestResponseCycle, "__init__", init)


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        (_without_httptools_impl, "import of uvicorn.protocols.http.httptools_impl halted"),
        (_without_on_message_begin, "HttpToolsProtocol.on_message_begin"),
        (_without_cycle_disconnected, "RequestResponseCycle.disconnected"),
    ],
)
def test_missing_internals_fall_back_to_uvicorns_protocol_with_one_warning(
    remove: Any, named: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    remove(monkeypatch)
    with caplog.at_level(logging.WARNING):
        assert server_protocol() == "auto"
    [record] = caplog.records
    assert (record.name, record.levelno) == ("gateway.http.server", logging.WARNING)
    assert named in record.getMessage()
    assert "serving with uvicorn's stock protocol" in record.getMessage()
