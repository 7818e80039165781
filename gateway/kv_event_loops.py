"""The gateway's KV-event subscribers, one per backend that publishes, kept while it runs.

`KvEventLoops.subscribers` is the map the metrics collector and `/admin/backends` read (the
app's `kv_events`): configured backends' subscribers are in it from the start, discovered
ones join and leave with their pods. `attach(supervisor)` runs every subscriber as the
supervised loop `kv-events:ID` (restarted with backoff if it crashes, shown in `/ready`);
`follow(id, settings)` adds one later, started at once when a supervisor is attached, and
replaces one whose settings changed; `forget(id)` cancels its loop, drops it from the map
(so from the metrics and the loop report) and drops what the precise index held for it.
A data-parallel engine has one subscriber per rank, `ID@r` at its endpoints' port + r (as
vLLM and SGLang publish), each batch applied to the rank it names (`dp_rank`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from adapters.kv_events import KvEventBatch
from gateway.supervisor import Supervisor
from health.discovery.endpoints import KvEventsSource
from health.kv_events import KvEventsSettings, KvEventSubscriber, OnBatch
from health.pool import Backend, BackendPool
from health.ranks import offset_endpoint, rank_id
from scoring.state.precise_index import PreciseIndex

log = logging.getLogger(__name__)


def loop_name(backend_id: str) -> str:
    return f"kv-events:{backend_id}"


def source_settings(source: KvEventsSource) -> KvEventsSettings:
    """Subscriber settings for a discovered source (default timings, as configured ones)."""
    return KvEventsSettings(endpoint=source.endpoint, replay=source.replay, topic=source.topic)


class KvEventLoops:
    """The subscriber map, feeding `precise` through `on_batch`; a data-parallel member of
    `pool` is followed per rank (see the module docstring)."""

    def __init__(
        self,
        subscribers: dict[str, KvEventSubscriber],
        precise: PreciseIndex,
        on_batch: OnBatch,
        pool: BackendPool | None = None,
    ) -> None:
        self.subscribers = subscribers  # mutated in place: others hold the same map
        self._precise = precise
        self._on_batch = on_batch
        self._pool = pool
        self._supervisor: Supervisor | None = None
        self._followed: dict[str, KvEventsSettings] = {}  # member id -> its settings
        self._keys: dict[str, list[str]] = {}  # member id -> its subscribers' keys

    def attach(self, supervisor: Supervisor) -> None:
        """Supervise every subscriber, now and later, in `supervisor` (before its `run`)."""
        self._supervisor = supervisor
        for backend_id, subscriber in self.subscribers.items():
            supervisor.add(loop_name(backend_id), subscriber.run)

    def follow(self, backend_id: str, settings: KvEventsSettings) -> None:
        """Subscribe to `backend_id`'s publisher (a no-op if already, with these settings);
        a data-parallel engine's rank r at the endpoints' port + r."""
        backend = self._pool.find(backend_id) if self._pool is not None else None
        ranks = backend.ranks if backend is not None else ()
        wanted = {
            r.id: replace(
                settings,
                endpoint=offset_endpoint(settings.endpoint, rank),
                replay=None if settings.replay is None else offset_endpoint(settings.replay, rank),
            )
            for r in ranks
            if (rank := r.spec.rank) is not None
        } or {backend_id: settings}
        for key in self._keys.get(backend_id, ()):
            if key not in wanted:
                self._drop(key)
        self._followed[backend_id], self._keys[backend_id] = settings, list(wanted)
        for key, key_settings in wanted.items():
            self._start(key, key_settings, backend_id if ranks else None, len(ranks))

    def ranks_changed(self, backend: Backend) -> None:
        """A followed member turned into ranks: each rank followed at its own port."""
        if (settings := self._followed.get(backend.id)) is not None:
            self.follow(backend.id, settings)

    def forget(self, backend_id: str) -> None:
        """Stop following `backend_id` (its ranks too) and forget the cache its events
        described."""
        self._followed.pop(backend_id, None)
        for key in self._keys.pop(backend_id, None) or [backend_id]:
            self._drop(key)

    def _start(self, key: str, settings: KvEventsSettings, member: str | None, ranks: int) -> None:
        current = self.subscribers.get(key)
        if current is not None and current.settings == settings:
            return
        if current is not None:
            self._drop(key)  # moved publisher: what it told may be another cache
        on_batch = self._on_batch
        if member is not None:
            on_batch = partial(self._rank_batch, member, ranks)
        subscriber = KvEventSubscriber(key, settings, on_batch, on_lost=self._precise.reset)
        self.subscribers[key] = subscriber
        if self._supervisor is not None:
            self._supervisor.add(loop_name(key), subscriber.run)
        log.info("following the KV events of %s at %s", key, settings.endpoint)

    def _rank_batch(self, member: str, ranks: int, key: str, batch: KvEventBatch) -> None:
        """A rank's batch goes to the rank it names (the engine's word), else the port's."""
        rank = batch.dp_rank
        self._on_batch(
            rank_id(member, rank) if rank is not None and 0 <= rank < ranks else key, batch
        )

    def _drop(self, key: str) -> None:
        if self.subscribers.pop(key, None) is not None:
            if self._supervisor is not None:
                self._supervisor.remove(loop_name(key))
            log.info("stopped following the KV events of %s", key)
        self._precise.remove_backend(key)
