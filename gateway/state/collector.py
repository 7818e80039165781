"""Prometheus metrics of the shared state: whether Redis answers, events and remote load.

`kvgate_state_redis_up` (1 up, 0 down; only with `state.backend: redis`), the counters
`kvgate_state_events_{published,dropped,received,applied,skipped}_total`, read at scrape
time from the shared state's own counters, and `kvgate_state_remote_in_flight{backend}` and
`kvgate_state_remote_pending_prefill_tokens{backend}`: what the other gateways (or sibling
workers) have in flight and queued for prefill on each backend, as their load reports last
said. Nothing is exported by a gateway that shares nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.state.shared import SharedState

_COUNTERS = {
    "published": "local routing-state events sent to the other gateways",
    "dropped": "local events lost to a full queue while the channel was slow or down",
    "received": "other gateways' routing-state events received",
    "applied": "of those, applied to the local mirror",
    "skipped": "of those, unusable here (unknown backend, other block size, bad entry)",
}


class SharedStateCollector(Collector):
    def __init__(self, shared: SharedState) -> None:
        self._shared = shared

    def collect(self) -> Iterator[Metric]:
        shared = self._shared
        if not shared.active:
            return
        if (link := shared.link) is not None:
            up = GaugeMetricFamily(
                "kvgate_state_redis_up", "1 while the shared-state Redis answers, else 0"
            )
            up.add_metric([], 1.0 if link.up else 0.0)
            yield up
        for name, doc in _COUNTERS.items():
            family = CounterMetricFamily(f"kvgate_state_events_{name}", doc)
            family.add_metric([], float(getattr(shared.counters, name)))
            yield family
        remote = shared.load.remote if shared.load is not None else {}
        in_flight = GaugeMetricFamily(
            "kvgate_state_remote_in_flight",
            "requests the other gateways have in flight on the backend (their load reports)",
            labels=["backend"],
        )
        pending = GaugeMetricFamily(
            "kvgate_state_remote_pending_prefill_tokens",
            "prompt tokens the other gateways sent to the backend and await a first token for",
            labels=["backend"],
        )
        for backend, (n, p) in sorted(remote.items()):
            in_flight.add_metric([backend], float(n))
            pending.add_metric([backend], float(p))
        yield in_flight
        yield pending
