from __future__ import annotations

from gateway.metrics import GatewayMetrics


def test_children_are_memoised_and_counted_in_the_registry() -> None:
    m = GatewayMetrics()
    first = m.requests_by("model-a", "b1", "200")
    assert m.requests_by("model-a", "b1", "200") is first
    first.inc()
    m.requests_by("model-a", "b1", "200").inc()
    m.requests_by("model-a", "b2", "502").inc()
    text = m.render().decode()
    assert 'kvgate_requests_total{backend="b1",model="model-a",status="200"} 2.0' in text
    assert 'kvgate_requests_total{backend="b2",model="model-a",status="502"} 1.0' in text


def test_histogram_children_observe() -> None:
    m = GatewayMetrics()
    m.ttft_by("m", "b1").observe(0.02)
    m.ttft_by("m", "b1").observe(0.2)
    text = m.render().decode()
    assert 'kvgate_time_to_first_token_seconds_count{backend="b1",model="m"} 2.0' in text
