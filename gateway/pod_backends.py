"""Backends from pod discovery: the pool's discovered members, kept equal to the endpoints.

`PodBackends.apply(specs)` makes the discovered backends exactly `specs`: new ones join the
pool (probed and scraped like configured ones); gone ones leave it (requests in flight finish
on the object they hold, new ones never see it) and `on_removed` is told (the prefix index
and the metrics forget them); a
backend whose spec changed (engine relabelled) leaves and joins again. Configured backends
are never touched, and an endpoint that is also configured stays as configured. `run`
watches the InferencePool and applies what it reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gateway.config import DiscoverySection
from health.discovery.endpoints import Endpoint
from health.discovery.informer import WatchSettings
from health.discovery.kube_api import KubeClient, KubeConnection
from health.discovery.pool_watch import PoolDiscovery
from health.pool import BackendPool, BackendSpec

log = logging.getLogger(__name__)


class PodBackends:
    """The backends that pod discovery added to `pool`."""

    def __init__(self, pool: BackendPool, on_removed: Callable[[str], None]) -> None:
        self._pool = pool
        self._on_removed = on_removed
        self._ids: set[str] = set()

    async def run(self, conn: KubeConnection, section: DiscoverySection) -> None:
        """Watch the pool of `section` forever; cancel to stop."""
        assert section.pool is not None
        client = KubeClient(conn)
        settings = WatchSettings(
            watch_timeout_s=section.watch_timeout_s, backoff_max_s=section.backoff_max_s
        )
        try:
            await PoolDiscovery(
                client, section.namespace, section.pool, self._endpoints, settings
            ).run()
        finally:
            await client.aclose()

    def _endpoints(self, endpoints: frozenset[Endpoint]) -> None:
        self.apply(BackendSpec(url=e.url, engine=e.engine) for e in endpoints)

    def apply(self, specs: Iterable[BackendSpec]) -> None:
        wanted = {s.id: s for s in specs}
        changed = {i for i in self._ids & wanted.keys() if self._pool.get(i).spec != wanted[i]}
        for backend_id in sorted((self._ids - wanted.keys()) | changed):
            self._ids.discard(backend_id)
            self._pool.remove(backend_id)
            self._on_removed(backend_id)
            log.info("backend %s removed (pod gone or not ready)", backend_id)
        for backend_id, spec in sorted(wanted.items()):
            if backend_id in self._ids:
                continue
            if self._pool.find(backend_id) is not None:
                log.warning("discovered %s is a configured backend: kept as configured", spec.url)
                continue
            self._pool.add(spec)
            self._ids.add(backend_id)
            log.info("backend %s added (engine %s)", backend_id, spec.engine)
