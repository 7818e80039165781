"""The EPP's gRPC readiness follows the probe loop as well as the backends' health."""

from __future__ import annotations

import asyncio

import pytest
from grpc_health.v1 import health_pb2

from gateway.compose import build_runtime
from gateway.epp.server import _report_readiness
from gateway.services import PROBE_LOOP, Services
from gateway.supervisor import Supervisor
from routing.config.schema import parse_config

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class _Checks:
    """Records the status set for each service (stands in for grpc's HealthServicer)."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.set_once = asyncio.Event()

    async def set(self, service: str, status: int) -> None:
        self.status[service] = status
        self.set_once.set()


async def _readiness(probe_loop: object) -> int:
    runtime = build_runtime(parse_config({"backends": [{"url": "http://a:1", "models": ["m"]}]}))
    runtime.pool.get("a:1").state.record_probe(True, 0.0)
    runtime.loops = Supervisor(first_backoff_s=3600.0)
    runtime.loops.add(PROBE_LOOP, probe_loop)  # type: ignore[arg-type]
    loops = asyncio.create_task(runtime.loops.run())
    await asyncio.sleep(0)
    checks = _Checks()
    services = Services(runtime)
    task = asyncio.create_task(_report_readiness(runtime, services, checks))  # type: ignore[arg-type]
    await asyncio.wait_for(checks.set_once.wait(), 5)
    for t in (task, loops):
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
    assert checks.status[""] == checks.status["readiness"]
    return checks.status["readiness"]


async def test_serving_while_the_probe_loop_runs() -> None:
    assert await _readiness(lambda: asyncio.Event().wait()) == SERVING


async def test_not_serving_while_the_probe_loop_is_down() -> None:
    async def crash() -> None:
        raise RuntimeError("a bug in the probe loop")

    assert await _readiness(crash) == NOT_SERVING
