"""The choice of the server's protocol at start-up, and the fallback when uvicorn's internals
are missing."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl

import gateway.http
from gateway.http.server import server_protocol
from gateway.http.uvicorn_protocol import GatewayHttpProtocol


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
