"""The start-up check of the uvicorn internals that `GatewayHttpProtocol` extends."""

from __future__ import annotations

import pytest
from uvicorn.protocols.http import httptools_impl

from gateway.http.uvicorn_protocol import missing_internals


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
    ]
