"""Per-backend health and KV-event figures as Prometheus metrics, read when `/metrics` is scraped.

- `kvgate_backend_scrape_errors_total{backend}`: failed `/metrics` scrapes of the engine.
- `kvgate_backend_metrics_age_seconds{backend}`: age of the engine metrics routing sees
  (absent until the first scrape succeeds).
- `kvgate_prefix_index_blocks{backend}`, `kvgate_prefix_index_capacity_blocks{backend}` and
  `kvgate_prefix_index_memory_bytes{backend}`: the approximate prefix index's entries for the
  backend, its LRU bound (in base blocks) and their estimated memory.
- `kvgate_kv_events_*{backend}` for backends with `kv_events`: batches, events, gaps, replayed
  and missed batches, decode errors, reconnects, and the last sequence number.
- `kvgate_precise_index_blocks{backend}` and `kvgate_precise_index_memory_bytes{backend}`: the
  blocks the precise index holds for the backend and their estimated memory;
  `kvgate_precise_predictions_total{backend,outcome}`: its predictions of a request's cached
  prompt tokens graded by the engine's answer (`exact`, `over`, `under`).
Labels are backend ids, bounded by the pool; a backend that leaves it leaves the page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.cache_ledger import PreciseHits
from health.kv_events import KvEventSubscriber
from health.pool import BackendPool
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_index import PrefixIndex

_KV_COUNTERS = (
    ("batches", "KV-event batches delivered (replayed ones included)"),
    ("events", "KV events delivered"),
    ("gaps", "Times a KV-event batch number was skipped"),
    ("replayed", "KV-event batches recovered through the replay socket"),
    ("missed", "KV-event batches lost for good"),
    ("decode_errors", "KV-event messages that could not be decoded"),
    ("reconnects", "KV-event sockets opened again after an error"),
)


class BackendHealthCollector(Collector):
    """The figures of the module docstring, from the pool and the KV-event subscribers."""

    def __init__(
        self,
        pool: BackendPool,
        kv_events: Mapping[str, KvEventSubscriber],
        clock: Callable[[], float],
        *,
        precise: PreciseIndex | None = None,
        precise_hits: Mapping[str, PreciseHits] | None = None,
        index: PrefixIndex | None = None,
    ) -> None:
        self._pool = pool
        self._index = index
        self._kv_events = kv_events
        self._clock = clock
        self._precise = precise
        self._precise_hits = precise_hits or {}

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        errors = CounterMetricFamily(
            "kvgate_backend_scrape_errors", "Failed engine metric scrapes", labels=["backend"]
        )
        age = GaugeMetricFamily(
            "kvgate_backend_metrics_age_seconds",
            "Age of the engine metrics routing sees",
            labels=["backend"],
        )
        for b in self._pool:
            errors.add_metric([b.id], (b.parent or b).scrape_errors)  # a rank's: its engine's
            metrics = b.metrics
            if metrics is not None:
                age.add_metric([b.id], max(0.0, now - metrics.scraped_at))
        yield errors
        yield age
        yield from self._index_metrics()
        yield from self._kv_metrics()

    def _index_metrics(self) -> Iterator[Metric]:
        index = self._index
        if index is None:
            return
        families = (
            ("blocks", "Blocks the approximate prefix index tracks for the backend", index.blocks),
            (
                "capacity_blocks",
                "The index's bound for the backend, in base blocks",
                index.capacity,
            ),
            ("memory_bytes", "Estimated memory of the backend's index entries", index.memory_bytes),
        )
        for name, text, read in families:
            family = GaugeMetricFamily(f"kvgate_prefix_index_{name}", text, labels=["backend"])
            for b in self._pool:
                family.add_metric([b.id], read(b.id))
            yield family

    def _kv_metrics(self) -> Iterator[Metric]:
        if not self._kv_events:
            return
        families = {
            name: CounterMetricFamily(f"kvgate_kv_events_{name}", text, labels=["backend"])
            for name, text in _KV_COUNTERS
        }
        last = GaugeMetricFamily(
            "kvgate_kv_events_last_seq", "Last KV-event batch number seen", labels=["backend"]
        )
        for backend_id, subscriber in self._kv_events.items():
            c = subscriber.counters
            for name, family in families.items():
                family.add_metric([backend_id], getattr(c, name))
            if c.last_seq is not None:
                last.add_metric([backend_id], c.last_seq)
        yield from families.values()
        yield last
        yield from self._precise_metrics()

    def _precise_metrics(self) -> Iterator[Metric]:
        if self._precise is None:
            return
        blocks = GaugeMetricFamily(
            "kvgate_precise_index_blocks",
            "Blocks the precise index holds for the backend (from its KV-cache events)",
            labels=["backend"],
        )
        memory = GaugeMetricFamily(
            "kvgate_precise_index_memory_bytes",
            "Estimated memory of the precise index's entries for the backend",
            labels=["backend"],
        )
        graded = CounterMetricFamily(
            "kvgate_precise_predictions",
            "Precise predictions of cached prompt tokens, graded by the engine's answer",
            labels=["backend", "outcome"],
        )
        for backend_id in self._kv_events:
            blocks.add_metric([backend_id], self._precise.blocks(backend_id))
            memory.add_metric([backend_id], self._precise.memory_bytes(backend_id))
            h = self._precise_hits.get(backend_id) or PreciseHits()
            for outcome in ("exact", "over", "under"):
                graded.add_metric([backend_id, outcome], getattr(h, outcome))
        yield blocks
        yield memory
        yield graded
