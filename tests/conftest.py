"""Fixtures shared by every test directory: fake engines and apps on real servers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.asgi_types import ASGIApp
from tests.support.fake_engine import FakeEngine
from tests.support.fixture_types import ServeApp, StartEngines
from tests.support.servers import Lifespan, ServerThread


def _stop_all(servers: list[ServerThread]) -> None:
    """Stop every server even if some fail to; then raise the first failure."""
    errors: list[Exception] = []
    for server in reversed(servers):
        try:
            server.stop()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def fake_engines() -> Iterator[StartEngines]:
    """Factory: ``start_engines(n, **kw) -> [(FakeEngine, ServerThread), ...]``.

    ``kw`` goes to every ``FakeEngine`` (models, tokens, token_delay, ttft_delay); engines
    are named e1, e2, ... in start order across calls. All are stopped after the test,
    also when it fails.
    """
    servers: list[ServerThread] = []
    numbers = itertools.count(1)

    def start_engines(n: int = 1, /, **kwargs: Any) -> list[tuple[FakeEngine, ServerThread]]:
        started: list[tuple[FakeEngine, ServerThread]] = []
        for _ in range(n):
            engine = FakeEngine(name=f"e{next(numbers)}", **kwargs)
            server = ServerThread(engine.app)
            servers.append(server)  # before start(): a half-started server is cleaned too
            server.start()
            started.append((engine, server))
        return started

    try:
        yield start_engines
    finally:
        _stop_all(servers)


@pytest.fixture
def serve_app() -> Iterator[ServeApp]:
    """Factory: ``serve_app(app, lifespan="auto") -> ServerThread``, started; stopped after."""
    servers: list[ServerThread] = []

    def serve(app: ASGIApp, /, *, lifespan: Lifespan = "auto") -> ServerThread:
        server = ServerThread(app, lifespan=lifespan)
        servers.append(server)
        return server.start()

    try:
        yield serve
    finally:
        _stop_all(servers)
