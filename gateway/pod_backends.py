"""Backends from pod discovery: the pool's discovered members, kept equal to the endpoints.

`PodBackends.apply(specs)` makes the discovered backends exactly `specs`: new ones join the
pool (probed and scraped like configured ones); gone ones leave it (requests in flight finish
on the object they hold, new ones never see it) and `on_removed` is told (the prefix index and
the metrics forget them); a backend whose spec changed (engine relabelled) leaves and joins
again. Configured backends are never touched, and an endpoint that is also configured stays as
configured. `run` watches the InferencePool and applies what it reports; `synced` says it has
found the pool and listed its pods.

KV events: a discovered backend whose pod annotates a publisher (`kvgate.dev/kv-events-port`)
is followed by `kv_loops` while it is in the pool; its loop stops when it leaves, or when
the annotation goes (a changed one restarts it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from gateway.kv_event_loops import KvEventLoops, source_settings
from health.discovery.endpoints import Endpoint
from health.discovery.informer import WatchSettings
from health.discovery.kube_api import KubeClient, KubeConnection
from health.discovery.pool_watch import PoolDiscovery
from health.kv_events import KvEventsSettings
from health.pool import BackendPool, BackendSpec, target_ids
from routing.config.schema import DiscoverySection

log = logging.getLogger(__name__)


class PodBackends:
    """The backends that pod discovery added to `pool`."""

    def __init__(
        self,
        pool: BackendPool,
        on_removed: Callable[[str], None],
        kv_loops: KvEventLoops | None = None,
    ) -> None:
        self._pool = pool
        self._on_removed = on_removed
        self._kv_loops = kv_loops
        self._ids: set[str] = set()
        self._discovery: PoolDiscovery | None = None

    @property
    def synced(self) -> bool:
        """`run` has found the InferencePool and listed its pods (False while it is not running)."""
        return self._discovery is not None and self._discovery.synced

    def owns(self, backend_id: str) -> bool:
        """Whether discovery added the backend (and so decides when it leaves)."""
        return backend_id in self._ids

    async def run(self, conn: KubeConnection, section: DiscoverySection) -> None:
        """Watch the pool of `section` forever; cancel to stop."""
        assert section.pool is not None
        client = KubeClient(conn)
        settings = WatchSettings(
            watch_timeout_s=section.watch_timeout_s, backoff_max_s=section.backoff_max_s
        )
        discovery = PoolDiscovery(
            client, section.namespace, section.pool, self._endpoints, settings
        )
        self._discovery = discovery
        try:
            await discovery.run()
        finally:
            self._discovery = None
            await client.aclose()

    def _endpoints(self, endpoints: frozenset[Endpoint]) -> None:
        specs = {
            e: BackendSpec(
                url=e.url,
                engine=e.engine,
                role=e.role,
                bootstrap_port=e.bootstrap_port,
                dp_size=e.dp_size,
            )
            for e in endpoints
        }
        kv = {s.id: source_settings(e.kv_events) for e, s in specs.items() if e.kv_events}
        self.apply(specs.values(), kv)

    def apply(
        self, specs: Iterable[BackendSpec], kv_events: Mapping[str, KvEventsSettings] | None = None
    ) -> None:
        """Make the discovered backends `specs`; those in `kv_events` followed by `kv_loops`."""
        wanted, kv_events = {s.id: s for s in specs}, kv_events or {}
        changed = {i for i in self._ids & wanted.keys() if self._pool.get(i).spec != wanted[i]}
        for backend_id in sorted((self._ids - wanted.keys()) | changed):
            self._ids.discard(backend_id)
            removed = self._pool.remove(backend_id)
            for target in target_ids(removed) if removed is not None else [backend_id]:
                self._on_removed(target)
            if self._kv_loops is not None:
                self._kv_loops.forget(backend_id)  # its loop and the precise index's view
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
        for backend_id in sorted(self._ids):
            self._follow(backend_id, kv_events.get(backend_id))

    def _follow(self, backend_id: str, settings: KvEventsSettings | None) -> None:
        if self._kv_loops is None:
            return
        if settings is not None:
            self._kv_loops.follow(backend_id, settings)
        elif backend_id in self._kv_loops.subscribers:  # the annotation went
            self._kv_loops.forget(backend_id)
