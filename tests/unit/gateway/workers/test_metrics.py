"""Two workers' expositions merged into the whole gateway's page."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import GatewayMetrics
from gateway.workers.metrics import merge_pages


def _page(requests: int, in_flight: int, seconds: list[float]) -> bytes:
    r = CollectorRegistry()
    Counter("kvgate_requests_total", "requests", ["backend"], registry=r).labels("b1").inc(requests)
    Gauge("kvgate_in_flight_requests", "in flight", ["backend"], registry=r).labels("b1").set(
        in_flight
    )
    h = Histogram("kvgate_request_duration_seconds", "d", buckets=(0.1, 1.0), registry=r)
    for s in seconds:
        h.observe(s)
    return generate_latest(r)


def _samples(page: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(page.decode())
        for s in f.samples
    }


def test_counters_and_histograms_add_up_and_gauges_stay_per_worker() -> None:
    merged = _samples(merge_pages({0: _page(3, 2, [0.05]), 1: _page(4, 5, [0.5, 2.0])}, 2))
    assert merged[("kvgate_requests_total", (("backend", "b1"),))] == 7
    assert merged[("kvgate_request_duration_seconds_count", ())] == 3
    assert merged[("kvgate_request_duration_seconds_bucket", (("le", "0.1"),))] == 1
    assert merged[("kvgate_request_duration_seconds_bucket", (("le", "1.0"),))] == 2
    assert merged[("kvgate_request_duration_seconds_sum", ())] == 2.55
    gauge = "kvgate_in_flight_requests"
    assert merged[(gauge, (("backend", "b1"), ("worker", "0")))] == 2
    assert merged[(gauge, (("backend", "b1"), ("worker", "1")))] == 5
    assert merged[("kvgate_workers_scraped", ())] == 2


def test_a_missing_worker_is_told() -> None:
    merged = _samples(merge_pages({1: _page(1, 0, []), 0: _page(1, 0, [])}, 3))
    assert merged[("kvgate_requests_total", (("backend", "b1"),))] == 2
    assert merged[("kvgate_workers_scraped", ())] == 2  # of 3: one did not answer


def test_each_workers_process_counts_once() -> None:
    pages = {0: GatewayMetrics().render(), 1: GatewayMetrics().render()}
    own = [_samples(page) for page in pages.values()]
    merged = _samples(merge_pages(pages, 2))
    cpu = ("process_cpu_seconds_total", ())
    assert merged[cpu] == own[0][cpu] + own[1][cpu]  # the workers' CPU together
    # What is not a count stays one series per worker.
    memory = {labels for name, labels in merged if name == "process_resident_memory_bytes"}
    assert memory == {(("worker", "0"),), (("worker", "1"),)}
    info = [labels for name, labels in merged if name == "kvgate_build_info"]
    assert [dict(labels)["worker"] for labels in sorted(info)] == ["0", "1"]
    assert not [name for name, _ in merged if name.endswith("_created")]
