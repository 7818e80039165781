from __future__ import annotations

import asyncio
import logging

import pytest

from health import per_backend
from health.per_backend import run_per_backend
from health.pool import Backend, BackendPool, BackendSpec
from health.state import HealthPolicy
from tests.unit.health.conftest import FakeClock


async def test_a_crashing_loop_is_restarted_and_the_others_keep_running(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(per_backend, "_FIRST_RESTART_S", 0.0)
    pool = BackendPool(
        (BackendSpec(url="http://a:1"), BackendSpec(url="http://b:1")), HealthPolicy(), clock
    )
    calls = {"a:1": 0, "b:1": 0}

    async def loop(backend: Backend) -> None:
        while True:
            calls[backend.id] += 1
            if backend.id == "a:1":
                raise RuntimeError("bug")
            await asyncio.sleep(0)

    task = asyncio.create_task(run_per_backend(pool, loop))
    for _ in range(200):
        await asyncio.sleep(0)
    assert not task.done()
    assert calls["a:1"] >= 3  # restarted
    assert calls["b:1"] >= 20  # undisturbed
    crashes = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert crashes[0].exc_info is not None  # the first crash with its traceback ...
    assert not any(r.exc_info for r in crashes[1:])  # ... later ones in one line
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
