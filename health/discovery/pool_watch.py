"""Discovery for one `InferencePool`: watch the pool and the pods it selects.

Two informers: one on the pool object (`fieldSelector=metadata.name=NAME`), one on the
namespace's pods filtered by the pool's `labelSelector`. When the pool's selector changes,
the pod informer is replaced by one with the new selector; a change of target ports only
recomputes the endpoints. `on_endpoints` is called with the full endpoint set whenever it
differs from the last one told (first call after the first lists, possibly empty). `synced`:
the pool is found and its pods have been listed. A pod's invalid annotation is logged at most
once a minute per pod (`health.log_limit`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from health.discovery.endpoints import (
    Endpoint,
    PoolSpec,
    PoolSpecError,
    label_selector,
    parse_pool,
    pool_endpoints,
)
from health.discovery.informer import Informer, Objects, WatchSettings
from health.discovery.kube_api import KubeClient
from health.log_limit import LogLimit

log = logging.getLogger(__name__)
POOL_API = "/apis/inference.networking.k8s.io/v1"


class PoolDiscovery:
    """Tells `on_endpoints` the endpoints of pool `name` in `namespace`, kept current."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        on_endpoints: Callable[[frozenset[Endpoint]], None],
        settings: WatchSettings | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._name = name
        self._on_endpoints = on_endpoints
        self._settings = settings or WatchSettings()
        self._pool: PoolSpec | None = None
        self._pods: Objects = {}
        self._pods_listed = False
        self._told: frozenset[Endpoint] | None = None
        self._selector_changed = asyncio.Event()
        self._pod_warnings = LogLimit(log, time.monotonic)
        self.pools = Informer(
            client,
            f"{POOL_API}/namespaces/{namespace}/inferencepools",
            {"fieldSelector": f"metadata.name={name}"},
            self._pool_changed,
            settings,
        )

    @property
    def synced(self) -> bool:
        """The pool object is found and the pods it selects have been listed (at least once)."""
        return self._pool is not None and (not self._pool.selector or self._pods_listed)

    async def run(self) -> None:
        """Run forever; cancel to stop."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.pools.run(), name=f"watch-pool-{self._name}")
            while True:
                pods = self._pod_informer()
                task = tg.create_task(pods.run(), name="watch-pods") if pods else None
                await self._selector_changed.wait()
                self._selector_changed.clear()
                if task is not None:
                    task.cancel()  # its pods stay until the new informer's list replaces them

    def _pod_informer(self) -> Informer | None:
        if self._pool is None or not self._pool.selector:
            return None
        return Informer(
            self._client,
            f"/api/v1/namespaces/{self._namespace}/pods",
            {"labelSelector": label_selector(self._pool)},
            self._pods_changed,
            self._settings,
        )

    def _pool_changed(self, objects: Objects) -> None:
        pool: PoolSpec | None = None
        for obj in objects.values():
            try:
                pool = parse_pool(obj)
            except PoolSpecError as exc:
                log.warning("InferencePool %s/%s: %s", self._namespace, self._name, exc)
        if pool is None and self._pool is not None:
            log.warning("InferencePool %s/%s is gone: no endpoints", self._namespace, self._name)
        old, self._pool = self._pool, pool
        if (old.selector if old else None) != (pool.selector if pool else None):
            self._selector_changed.set()
        self._tell()

    def _pods_changed(self, objects: Objects) -> None:
        self._pods, self._pods_listed = objects, True
        self._tell()

    def _tell(self) -> None:
        endpoints = pool_endpoints(self._pool, self._pods.values(), self._warn_pod)
        if endpoints != self._told:
            self._told = endpoints
            log.info(
                "InferencePool %s/%s: %d endpoints", self._namespace, self._name, len(endpoints)
            )
            self._on_endpoints(endpoints)

    def _warn_pod(self, pod: str, problem: str) -> None:
        key = f"{pod} {problem.partition(':')[0]}"  # per pod and annotation
        self._pod_warnings.warn(key, "pod %s/%s: %s", self._namespace, pod, problem)
