"""Prometheus export of the server limits' `ServerEvents` (`gateway.http.limits`), read at
scrape time from the counters the protocol keeps (nothing is done per request)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.http.limits import ServerEvents


class ServerEventsCollector(Collector):
    """`kvgate_server_*`: open connections and what the server limits refused."""

    def __init__(self, events: ServerEvents) -> None:
        self._events = events

    def collect(self) -> Iterator[Metric]:
        e = self._events
        yield GaugeMetricFamily(
            "kvgate_server_connections", "Open client connections", value=e.connections
        )
        counters = (
            ("connections_refused", "Connections closed on accept", e.refused),
            ("head_timeouts", "Connections closed for a slow request head", e.head_timeouts),
            ("body_timeouts", "Requests closed for a slow request body", e.body_timeouts),
            ("heads_too_large", "Request heads refused with 431", e.heads_too_large),
        )
        for name, text, value in counters:
            yield CounterMetricFamily(f"kvgate_server_{name}", text, value=value)
