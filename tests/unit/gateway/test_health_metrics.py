"""The per-backend health collector: scrape errors, metric age, KV-event counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gateway.health_metrics import BackendHealthCollector
from health.kv_events import KvEventsSettings, KvEventSubscriber
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy
from routing.kv_events import BlockStored
from routing.types import EngineMetrics
from scoring.state.precise_index import ENTRY_BYTES as PRECISE_ENTRY_BYTES
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_index import ENTRY_BYTES, PrefixIndex


def _page(pool: BackendPool, kv: dict[str, KvEventSubscriber], now: float) -> str:
    registry = CollectorRegistry()
    registry.register(BackendHealthCollector(pool, kv, lambda: now))
    return generate_latest(registry).decode()


def test_scrape_errors_and_metric_age_per_backend() -> None:
    specs = (BackendSpec(url="http://a:1", id="a"), BackendSpec(url="http://b:1", id="b"))
    pool = BackendPool(specs, HealthPolicy(), lambda: 10.0)
    a, b = pool.get("a"), pool.get("b")
    a.scrape_errors = 3
    a.metrics = EngineMetrics(scraped_at=9.5, waiting=0)
    page = _page(pool, {}, now=10.0)
    assert 'kvgate_backend_scrape_errors_total{backend="a"} 3.0' in page
    assert 'kvgate_backend_scrape_errors_total{backend="b"} 0.0' in page
    assert 'kvgate_backend_metrics_age_seconds{backend="a"} 0.5' in page
    assert 'kvgate_backend_metrics_age_seconds{backend="b"}' not in page  # never scraped
    assert "kvgate_kv_events" not in page
    assert b.metrics is None


def test_kv_event_counters_of_the_subscribed_backends() -> None:
    pool = BackendPool((BackendSpec(url="http://a:1", id="a"),), HealthPolicy(), lambda: 0.0)
    sub = KvEventSubscriber("a", KvEventsSettings(endpoint="tcp://a:5557"), lambda *_: None)
    sub.counters.batches, sub.counters.gaps, sub.counters.last_seq = 7, 1, 41
    page = _page(pool, {"a": sub}, now=0.0)
    assert 'kvgate_kv_events_batches_total{backend="a"} 7.0' in page
    assert 'kvgate_kv_events_gaps_total{backend="a"} 1.0' in page
    assert 'kvgate_kv_events_last_seq{backend="a"} 41.0' in page


def test_prefix_index_size_and_memory_per_backend() -> None:
    specs = (BackendSpec(url="http://a:1", id="a"), BackendSpec(url="http://b:1", id="b"))
    pool = BackendPool(specs, HealthPolicy(), lambda: 0.0)
    index = PrefixIndex(default_capacity_blocks=1000)
    index.set_capacity("a", 500)
    index.record("a", tuple(range(40)))
    registry = CollectorRegistry()
    registry.register(BackendHealthCollector(pool, {}, lambda: 0.0, index=index))
    page = generate_latest(registry).decode()
    assert 'kvgate_prefix_index_blocks{backend="a"} 40.0' in page
    assert 'kvgate_prefix_index_blocks{backend="b"} 0.0' in page
    assert 'kvgate_prefix_index_capacity_blocks{backend="a"} 500.0' in page
    assert 'kvgate_prefix_index_capacity_blocks{backend="b"} 1000.0' in page
    assert f'kvgate_prefix_index_memory_bytes{{backend="a"}} {40.0 * ENTRY_BYTES}' in page
    assert 'kvgate_prefix_index_memory_bytes{backend="b"} 0.0' in page


def test_precise_index_blocks_and_memory_of_the_subscribed_backends() -> None:
    pool = BackendPool((BackendSpec(url="http://a:1", id="a"),), HealthPolicy(), lambda: 0.0)
    sub = KvEventSubscriber("a", KvEventsSettings(endpoint="tcp://a:5557"), lambda *_: None)
    precise = PreciseIndex()
    precise.apply("a", [BlockStored((11, 12, 13), None, tuple(range(48)), 16)])
    registry = CollectorRegistry()
    registry.register(BackendHealthCollector(pool, {"a": sub}, lambda: 0.0, precise=precise))
    page = generate_latest(registry).decode()
    assert 'kvgate_precise_index_blocks{backend="a"} 3.0' in page
    memory = 3.0 * PRECISE_ENTRY_BYTES
    assert f'kvgate_precise_index_memory_bytes{{backend="a"}} {memory}' in page
    assert 'kvgate_precise_predictions_total{backend="a",outcome="exact"} 0.0' in page
