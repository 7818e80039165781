"""The endpoint picker's gRPC health (`grpc.health.v1`), by service name, as the reference's.

`liveness`: SERVING while the process runs, draining included (no restart mid-drain).
`readiness`, `""` (what load balancers ask), `envoy.service.ext_proc.v3.ExternalProcessor`
(what gateways ask) and `inference-extension` (the conformance picker's name): SERVING while
`ready()` holds (the pool is synced: pod discovery, when configured, has found the
InferencePool and listed its pods; the probe loop runs; shared state has caught up) and until
draining starts; whether some backend is healthy does not matter (with none, requests get
503). Any other name: NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from gateway.runtime import Runtime

LIVENESS = "liveness"
READY_SERVICES = (
    "readiness",
    "",
    "envoy.service.ext_proc.v3.ExternalProcessor",
    "inference-extension",
)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_EVERY_S = 0.5


def pool_synced(runtime: Runtime) -> bool:
    """The backends are known: static ones at start, discovered ones once the InferencePool
    and its pods have been listed."""
    return not runtime.config.discovery.pool or runtime.pod_backends.synced


class PickerHealth:
    """Keeps `checks` (grpc's health servicer) as the module docstring says."""

    def __init__(self, checks: health_aio.HealthServicer, ready: Callable[[], bool]) -> None:
        self._checks = checks
        self._ready = ready
        self._draining = False

    async def start(self) -> None:
        """Live, not ready yet: before the servers start."""
        await self._checks.set(LIVENESS, SERVING)
        await self._set_ready(False)

    async def run(self) -> None:
        """The ready services' status every half second; forever."""
        while True:
            await self._set_ready(self._ready() and not self._draining)
            await asyncio.sleep(_EVERY_S)

    async def drain(self) -> None:
        """NOT_SERVING from now on, but for liveness."""
        self._draining = True
        await self._set_ready(False)

    async def _set_ready(self, ready: bool) -> None:
        for service in READY_SERVICES:
            await self._checks.set(service, SERVING if ready else NOT_SERVING)
