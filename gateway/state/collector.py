"""Prometheus metrics of the shared state: whether Redis answers, and the placement counts.

`kvgate_state_redis_up` (1 up, 0 down; absent with `state.backend: memory`) and the counters
`kvgate_state_placements_{published,dropped,received,applied,skipped}_total`, read at scrape
time from the replicator's own counters, and `kvgate_state_remote_in_flight{backend}`: the
requests the other gateways have in flight on each backend, as their leases last said.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.state.shared import SharedState

_COUNTERS = {
    "published": "local placements written to the shared stream",
    "dropped": "local placements lost to a full queue while Redis was slow or down",
    "received": "other gateways' placements read from the shared stream",
    "applied": "of those, recorded into the local prefix index",
    "skipped": "of those, unusable here (unknown backend, other block size, bad entry)",
}


class SharedStateCollector(Collector):
    def __init__(self, shared: SharedState) -> None:
        self._shared = shared

    def collect(self) -> Iterator[Metric]:
        link, placements = self._shared.link, self._shared.placements
        if link is None or placements is None:
            return
        up = GaugeMetricFamily(
            "kvgate_state_redis_up", "1 while the shared-state Redis answers, else 0"
        )
        up.add_metric([], 1.0 if link.up else 0.0)
        yield up
        for name, doc in _COUNTERS.items():
            family = CounterMetricFamily(f"kvgate_state_placements_{name}", doc)
            family.add_metric([], float(getattr(placements.counters, name)))
            yield family
        remote = GaugeMetricFamily(
            "kvgate_state_remote_in_flight",
            "requests the other gateways have in flight on the backend (their leases)",
            labels=["backend"],
        )
        for backend, n in sorted(self._shared.remote_in_flight().items()):
            remote.add_metric([backend], float(n))
        yield remote
