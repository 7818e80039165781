"""Call signatures of the factory fixtures in ``tests/conftest.py``, for annotations."""

from __future__ import annotations

from typing import Any, Protocol

from tests.support.asgi_types import ASGIApp
from tests.support.fake_engine import FakeEngine
from tests.support.servers import Lifespan, ServerThread


class StartEngines(Protocol):
    """``start_engines(n, **FakeEngine kwargs)``: n engines named e1, e2, ... (per test)."""

    def __call__(self, n: int = 1, /, **kwargs: Any) -> list[tuple[FakeEngine, ServerThread]]: ...


class ServeApp(Protocol):
    """``serve_app(app, lifespan=...)``: any ASGI app, started, stopped after the test."""

    def __call__(self, app: ASGIApp, /, *, lifespan: Lifespan = "auto") -> ServerThread: ...
