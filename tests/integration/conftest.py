"""The gateway under a real uvicorn server, in front of fake engines."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import pytest

from gateway.app import GatewayApp, build_app
from routing.config.schema import parse_config
from tests.support.fixture_types import ServeApp
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerThread

StartGateway = Callable[..., tuple[GatewayApp, ServerThread]]

# Fast probes so health tests take a fraction of a second.
FAST_HEALTH = {
    "probe_interval_s": 0.05,
    "probe_timeout_s": 0.5,
    "fail_threshold": 2,
    "success_threshold": 2,
    "passive_fail_threshold": 2,
    "ejection_base_s": 0.3,
    "ejection_max_s": 1.0,
}


@pytest.fixture
def start_gateway(serve_app: ServeApp) -> StartGateway:
    """``start_gateway(urls, policy=..., **sections) -> (app, server)`` on 127.0.0.1, port 0.

    ``sections`` are config sections (``server``, ``upstream``, ``health``, ``routing``) as
    dicts; health defaults to fast probes.
    """

    def start(
        urls: Sequence[str], policy: str = "round-robin", **sections: Any
    ) -> tuple[GatewayApp, ServerThread]:
        raw: dict[str, Any] = {
            "backends": [{"url": u} if isinstance(u, str) else u for u in urls],
            "health": {**FAST_HEALTH, **sections.pop("health", {})},
            "routing": {"policy": policy, **sections.pop("routing", {})},
            "server": {"access_log": False, **sections.pop("server", {})},
            **sections,
        }
        app = build_app(parse_config(raw))
        return app, serve_app(app, lifespan="on")

    return start


@pytest.fixture
def client() -> Iterator[Callable[[ServerThread], httpx.Client]]:
    clients: list[httpx.Client] = []

    def make(server: ServerThread, **kw: Any) -> httpx.Client:
        c = httpx.Client(base_url=server.url, timeout=kw.pop("timeout", 10.0), **kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free 127.0.0.1 port (no persistence), stopped by its pid
    after the test; skipped where redis-server is not installed, except in CI (`CI` set),
    where .ci/run installs it and its absence fails the tests."""
    try:
        server = RedisServer()
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    try:
        yield server.start()
    finally:
        server.stop()
