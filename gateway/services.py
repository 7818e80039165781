"""A runtime's background work, for whichever entry point runs it (front door or picker).

`start`: the recorder's file, a first probe round and metric scrape (the first request is
routed on real health and metrics). `loops()`: the supervised loops — probes, scrapes, the
recorder, admission, backend changes, trace export, config reload, pod discovery (and the
pool's InferenceObjectives and rewrites), KV events, shared state, sibling workers, the
tuner beside the gateway — for the caller to run and cancel. `ready()`: the probe loop
runs and the shared state has caught up. `stop`: flush and close, after the loops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway import tuning
from gateway.health_settings import probe_settings, scrape_settings
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.http.fetcher import CappedFetcher
from gateway.runtime import Runtime
from gateway.supervisor import Supervisor
from gateway.tuner_child import local_address
from gateway.workers.peers import SIBLINGS_LOOP
from health.discovery.inference_objects import ObjectWatch
from health.discovery.informer import WatchSettings
from health.discovery.kube_api import KubeClient, KubeConnection, resolve_connection
from health.prober import Prober
from health.scraper import Scraper
from routing.config.tuning import published_profile_key

log = logging.getLogger(__name__)
PROBE_LOOP = "health-probes"  # while it is not running, the gateway is not ready
TUNING_LOOP = "tuning-follow"
TUNER_LOOP = "tuner"


class Services:
    """Starts, runs and stops a runtime's background work (see the module docstring)."""

    def __init__(self, runtime: Runtime, on_down: Callable[[str], None] | None = None) -> None:
        self._rt = runtime
        self._on_down = on_down  # a backend declared down, after its cache is forgotten
        self._kube: KubeConnection | None = None
        self._probe_client: CappedFetcher | None = None
        self._prober: Prober | None = None
        self._scraper: Scraper | None = None

    async def start(self) -> None:
        """Open the recorder (an unwritable path fails the start), find the Kubernetes API
        if pods are discovered, then probe every backend and scrape its metrics once."""
        rt = self._rt
        cfg = rt.config
        if rt.recorder is not None:
            rt.recorder.open()
        if cfg.discovery.pool:  # nowhere to find the Kubernetes API fails the start too
            self._kube = resolve_connection(cfg.discovery.kube_api)
        h = cfg.health
        probe_limits = ClientLimits(
            connect_timeout=h.probe_timeout_s,
            read_timeout=h.probe_timeout_s,
            write_timeout=h.probe_timeout_s,
            pool_timeout=h.probe_timeout_s,
            max_connections=64,
            max_keepalive=64,
            keepalive_expiry=cfg.upstream.keepalive_expiry_s,
        )
        client = self._probe_client = CappedFetcher(UpstreamClient(probe_limits))
        prober = self._prober = Prober(
            rt.pool, client, probe_settings(h), on_down=self._backend_down
        )
        await prober.initial_round()
        scraper = self._scraper = Scraper(rt.pool, client, scrape_settings(h))
        async with asyncio.TaskGroup() as tg:  # first metrics before the first request
            for backend in scraper.polled():
                tg.create_task(scraper.scrape_once(backend))

    def loops(self) -> Supervisor:
        """The supervised background loops (after `start`); the caller runs the supervisor."""
        rt = self._rt
        assert self._prober is not None and self._scraper is not None, "start() first"
        loops = rt.loops = Supervisor()
        loops.add(PROBE_LOOP, self._prober.run)
        loops.add("metrics-scrapes", self._scraper.run)
        if rt.recorder is not None:
            loops.add("trace-recorder", rt.recorder.run)
        loops.add("admission", rt.admission.run)  # wakes queued requests, expires deadlines
        loops.add("backend-changes", rt.backends.run)  # drained backends leave when idle
        if rt.tracing is not None:
            loops.add("trace-export", rt.tracing.run)
        rt.live.watch_health(self._prober, self._scraper)
        if rt.reloader is not None:
            loops.add("config-reload", rt.reloader.run)
        if (kube := self._kube) is not None:
            discovery = rt.config.discovery
            loops.add("pod-discovery", lambda: rt.pod_backends.run(kube, discovery))
            if discovery.objects_api:
                loops.add("inference-objects", lambda: _watch_objects(rt, kube))
        rt.kv_loops.attach(loops)  # configured publishers now, discovered ones as they come
        rt.shared.attach(loops)
        if (link := rt.shared.link) is not None:  # the pool's tuned profile, in mode apply
            key = published_profile_key(rt.config.state.namespace, rt.config.discovery.pool)
            loops.add(TUNING_LOOP, lambda: tuning.follow(link, rt.tuning, key))
        if rt.peers is not None:
            loops.add(SIBLINGS_LOOP, rt.peers.siblings.serve)
        if (tuner := rt.tuner) is not None:  # `kvgate tune` beside the gateway
            loops.add(TUNER_LOOP, lambda: tuner.run(lambda: admin_url(rt)))
        return loops

    def ready(self) -> bool:
        """The probe loop runs (else health would be frozen) and the shared state's mirror
        has caught up (`state:`; memory: at once)."""
        loops = self._rt.loops
        return loops is not None and loops.running(PROBE_LOOP) and self._rt.shared.settled

    async def stop(self) -> None:
        """After the loops: the recorder's last lines, the spans still queued, then every
        client and channel closed."""
        rt = self._rt
        if rt.recorder is not None:
            rt.recorder.close()
        if rt.tracing is not None:
            await rt.tracing.close()
        if self._probe_client is not None:
            await self._probe_client.aclose()
        await rt.tokenizers.aclose()
        await rt.shared.aclose()

    def _backend_down(self, backend_id: str) -> None:
        """Probes found a backend down: its cache may be gone."""
        self._rt.ledger.forget(backend_id)
        if self._on_down is not None:
            self._on_down(backend_id)


def admin_url(rt: Runtime) -> str | None:
    """Where this gateway's admin API answers, from this machine: the admin listener's
    port, else the API port once bound (None until then)."""
    server = rt.config.server
    if (listener := rt.access.listener) is not None:
        return local_address(server.admin_host or server.host, listener.port)
    if rt.api_port is None:
        return None
    scheme = "https" if server.tls_cert_file else "http"
    return local_address(server.host, rt.api_port, scheme)


async def _watch_objects(rt: Runtime, conn: KubeConnection) -> None:
    """The pool's InferenceObjectives and InferenceModelRewrites, into the runtime's tables."""
    section = rt.config.discovery
    assert section.pool is not None and section.objects_api is not None
    client = KubeClient(conn)
    settings = WatchSettings(
        watch_timeout_s=section.watch_timeout_s, backoff_max_s=section.backoff_max_s
    )
    try:
        await ObjectWatch(
            client, section.objects_api, section.namespace, section.pool,
            on_objectives=rt.objectives.watched, on_rewrites=rt.rewrites.watched,
            settings=settings,
        ).run()  # fmt: skip
    finally:
        await client.aclose()
