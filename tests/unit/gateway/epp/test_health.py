"""The picker's gRPC health: the reference's service names; ready means synced, not healthy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gateway.compose import build_runtime
from gateway.epp.health import (
    LIVENESS,
    NOT_SERVING,
    READY_SERVICES,
    SERVING,
    PickerHealth,
    pool_synced,
)
from gateway.services import PROBE_LOOP, Services
from gateway.supervisor import Supervisor
from routing.config.schema import parse_config

BACKENDS = {"backends": [{"url": "http://a:1", "models": ["m"]}]}


class _Checks:
    """Records the status set for each service (stands in for grpc's HealthServicer)."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.set_once = asyncio.Event()

    async def set(self, service: str, status: int) -> None:
        self.status[service] = status
        self.set_once.set()


async def _reported(ready: Callable[[], bool]) -> _Checks:
    """The statuses after `start` and the first round of `run`."""
    checks = _Checks()
    health = PickerHealth(checks, ready)  # type: ignore[arg-type]
    await health.start()
    checks.set_once.clear()
    task = asyncio.create_task(health.run())
    await asyncio.wait_for(checks.set_once.wait(), 5)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return checks


async def test_the_reference_names_follow_readiness_and_liveness_stays() -> None:
    assert set(READY_SERVICES) == {
        "readiness",
        "",
        "envoy.service.ext_proc.v3.ExternalProcessor",
        "inference-extension",
    }
    ready = await _reported(lambda: True)
    assert ready.status == {LIVENESS: SERVING, **dict.fromkeys(READY_SERVICES, SERVING)}
    not_ready = await _reported(lambda: False)
    assert not_ready.status == {LIVENESS: SERVING, **dict.fromkeys(READY_SERVICES, NOT_SERVING)}


async def test_draining_is_not_ready_but_live() -> None:
    checks = _Checks()
    health = PickerHealth(checks, lambda: True)  # type: ignore[arg-type]
    await health.start()
    await health.drain()
    task = asyncio.create_task(health.run())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert checks.status == {LIVENESS: SERVING, **dict.fromkeys(READY_SERVICES, NOT_SERVING)}


async def _services_ready(probe_loop: object, healthy: bool) -> bool:
    runtime = build_runtime(parse_config(BACKENDS))
    runtime.pool.get("a:1").state.record_probe(healthy, 0.0)
    runtime.loops = Supervisor(first_backoff_s=3600.0)
    runtime.loops.add(PROBE_LOOP, probe_loop)  # type: ignore[arg-type]
    loops = asyncio.create_task(runtime.loops.run())
    await asyncio.sleep(0.01)
    ready = pool_synced(runtime) and Services(runtime).ready()
    loops.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loops
    return ready


async def test_ready_while_the_probe_loop_runs_with_no_healthy_backend() -> None:
    assert await _services_ready(lambda: asyncio.Event().wait(), healthy=False)


async def test_not_ready_while_the_probe_loop_is_down() -> None:
    async def crash() -> None:
        raise RuntimeError("a bug in the probe loop")

    assert not await _services_ready(crash, healthy=True)


def test_a_discovered_pool_is_synced_once_listed() -> None:
    assert pool_synced(build_runtime(parse_config(BACKENDS)))
    discovered = build_runtime(parse_config({"discovery": {"pool": "llm"}}))
    assert not pool_synced(discovered)  # discovery has not listed the pool yet
