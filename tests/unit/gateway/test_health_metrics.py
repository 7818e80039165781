"""The per-backend health collector: scrape errors, metric age, KV-event counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gateway.health_metrics import BackendHealthCollector
from health.kv_events import KvEventsSettings, KvEventSubscriber
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy
from routing.types import EngineMetrics


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
