"""The start-up check of the uvicorn internals that `GatewayHttpProtocol` extends, and its
`GatewayCycle` writing what uvicorn's own cycle writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.http.uvicorn_protocol import GatewayCycle, missing_internals


def test_the_installed_uvicorn_has_every_internal() -> None:
    assert missing_internals() == []


def test_missing_methods_and_attributes_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def init(self: object, *args: object, **kwargs: object) -> None:
        pass  # sets nothing

    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "connection_lost")
    monkeypatch.setattr(httptools_impl.RequestResponseCycle, "__init__", init)
    assert missing_internals() == [
        "HttpToolsProtocol.connection_lost",
        "RequestResponseCycle.disconnected",
        "RequestResponseCycle.scope",
        "RequestResponseCycle.message_event",
        "RequestResponseCycle.keep_alive",
        "RequestResponseCycle.response_started",
        "RequestResponseCycle.response_complete",
        "RequestResponseCycle.default_headers",
        "RequestResponseCycle.flow",
        "RequestResponseCycle.access_log",
        "RequestResponseCycle.waiting_for_100_continue",
        "RequestResponseCycle.chunked_encoding",
        "RequestResponseCycle.expected_content_length",
        "RequestResponseCycle.on_response",
        "RequestResponseCycle.__init__ arguments",
    ]


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Flow:
    write_paused = False


_Outcome = tuple[list[bytes], bool, list[bool], str | None, tuple[bool, bool, bool]]


def _run(
    cls: type[RequestResponseCycle], method: str, keep_alive: bool, messages: list[Any]
) -> _Outcome:
    transport, done = _Transport(), []
    args: list[Any] = [
        {"method": method, "type": "http"},  # scope
        transport,
        _Flow(),
        None,  # logger, access logger: unused without an error in the app
        None,
        False,  # access log
        [(b"date", b"Mon, 07 Dec 2026 05:00:00 GMT")],  # default headers
        asyncio.Event(),
        False,  # expect 100-continue
        keep_alive,
        lambda: done.append(True),
    ]
    cycle = cls(*args)
    error = None
    try:
        for message in messages:
            asyncio.run(cycle.send(message))
    except RuntimeError as exc:
        error = str(exc)
    state = (cycle.response_started, cycle.response_complete, cycle.keep_alive)
    return transport.written, transport.closed, done, error, state


def _start(status: int, *headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": list(headers)}


def _body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


JSON = (b"content-type", b"application/json")
CASES = [
    ("POST", True, [_start(200, JSON, (b"content-length", b"2")), _body(b"{}")]),
    ("POST", False, [_start(200, JSON, (b"Content-Length", b"2")), _body(b"{}")]),
    (
        "POST",
        True,
        [
            _start(200, (b"content-type", b"text/event-stream")),
            _body(b"a", True),
            _body(b""),
        ],
    ),
    (
        "POST",
        True,
        [_start(200, (b"transfer-encoding", b"chunked")), _body(b"ab", True), _body(b"c")],
    ),
    ("POST", True, [_start(200, (b"connection", b"keep-alive, Close")), _body(b"")]),
    ("HEAD", True, [_start(200, (b"content-length", b"9")), _body(b"")]),
    ("GET", True, [_start(204), _body(b"")]),
    ("GET", True, [_start(304), _body(b"")]),
    ("POST", True, [_start(200, (b"content-length", b"1")), _body(b"xy")]),
    ("POST", True, [_start(200, (b"content-length", b"3")), _body(b"xy")]),
    ("POST", True, [_start(200, (b"x-ok", b"1"), (b"bad name", b"1"))]),
    ("POST", True, [_start(200, (b"x-a", b"bad\nvalue"), (b"bad:name", b"1"))]),
    ("POST", True, [_start(200, (b"x-a", b"tab\tis fine"), (b"content-length", b"0")), _body(b"")]),
    ("POST", True, [_start(200, (b"x-a", b"del\x7f"))]),
    ("POST", True, [_start(200, (b"x(y)", b"1"))]),
    (
        "POST",
        True,
        [_start(200, (b"x-a", "caf\u00e9".encode()), (b"content-length", b"0")), _body(b"")],
    ),
    ("POST", True, [_body(b"before the start")]),
    ("POST", True, [_start(200, (b"content-length", b"0")), _body(b""), _body(b"after")]),
]


@pytest.mark.parametrize(("method", "keep_alive", "messages"), CASES)
def test_gateway_cycle_writes_what_uvicorns_writes(
    method: str, keep_alive: bool, messages: list[Any]
) -> None:
    assert _run(GatewayCycle, method, keep_alive, messages) == _run(
        RequestResponseCycle, method, keep_alive, messages
    )
