"""The gateway's KV-event subscribers, one per backend that publishes, kept while it runs.

`KvEventLoops.subscribers` is the map the metrics collector and `/admin/backends` read (the
app's `kv_events`): configured backends' subscribers are in it from the start, discovered
ones join and leave with their pods. `attach(supervisor)` runs every subscriber as the
supervised loop `kv-events:ID` (restarted with backoff if it crashes, shown in `/ready`);
`follow(id, settings)` adds one later, started at once when a supervisor is attached, and
replaces one whose settings changed; `forget(id)` cancels its loop, drops it from the map
(so from the metrics and the loop report) and drops what the precise index held for it.
"""

from __future__ import annotations

import logging

from gateway.supervisor import Supervisor
from health.discovery.endpoints import KvEventsSource
from health.kv_events import KvEventsSettings, KvEventSubscriber, OnBatch
from scoring.state.precise_index import PreciseIndex

log = logging.getLogger(__name__)


def loop_name(backend_id: str) -> str:
    return f"kv-events:{backend_id}"


def source_settings(source: KvEventsSource) -> KvEventsSettings:
    """Subscriber settings for a discovered source (default timings, as configured ones)."""
    return KvEventsSettings(endpoint=source.endpoint, replay=source.replay, topic=source.topic)


class KvEventLoops:
    """The subscriber map, feeding `precise` through `on_batch`."""

    def __init__(
        self,
        subscribers: dict[str, KvEventSubscriber],
        precise: PreciseIndex,
        on_batch: OnBatch,
    ) -> None:
        self.subscribers = subscribers  # mutated in place: others hold the same map
        self._precise = precise
        self._on_batch = on_batch
        self._supervisor: Supervisor | None = None

    def attach(self, supervisor: Supervisor) -> None:
        """Supervise every subscriber, now and later, in `supervisor` (before its `run`)."""
        self._supervisor = supervisor
        for backend_id, subscriber in self.subscribers.items():
            supervisor.add(loop_name(backend_id), subscriber.run)

    def follow(self, backend_id: str, settings: KvEventsSettings) -> None:
        """Subscribe to `backend_id`'s publisher (a no-op if already, with these settings)."""
        current = self.subscribers.get(backend_id)
        if current is not None and current.settings == settings:
            return
        if current is not None:
            self.forget(backend_id)  # moved publisher: what it told may be another cache
        subscriber = KvEventSubscriber(
            backend_id, settings, self._on_batch, on_lost=self._precise.reset
        )
        self.subscribers[backend_id] = subscriber
        if self._supervisor is not None:
            self._supervisor.add(loop_name(backend_id), subscriber.run)
        log.info("following the KV events of %s at %s", backend_id, settings.endpoint)

    def forget(self, backend_id: str) -> None:
        """Stop following `backend_id` and forget the cache its events described."""
        if self.subscribers.pop(backend_id, None) is not None:
            if self._supervisor is not None:
                self._supervisor.remove(loop_name(backend_id))
            log.info("stopped following the KV events of %s", backend_id)
        self._precise.remove_backend(backend_id)
