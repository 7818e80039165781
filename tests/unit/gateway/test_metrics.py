from __future__ import annotations

from dataclasses import replace

from gateway.metrics import GatewayMetrics
from routing.types import Decision


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


def test_model_labels_are_bounded_to_the_served_models() -> None:
    # Issue 15, defect 3: every client-chosen model name became a permanent series.
    m = GatewayMetrics(models=lambda: frozenset({"llama"}))
    m.requests_by("llama", "b1", "200").inc()
    for i in range(100):
        m.requests_by(f"{'x' * 1000}{i}", "none", "404").inc()
        m.duration_by(f"made-up-{i}", "b1").observe(0.1)
        m.ttft_by(f"made-up-{i}", "b1").observe(0.1)
        m.itl_by(f"made-up-{i}", "b1").observe(0.1)
    m.requests_by("", "none", "400").inc()  # no model in the body: kept empty
    text = m.render().decode()
    assert 'kvgate_requests_total{backend="b1",model="llama",status="200"} 1.0' in text
    assert 'kvgate_requests_total{backend="none",model="other",status="404"} 100.0' in text
    assert 'kvgate_requests_total{backend="none",model="",status="400"} 1.0' in text
    assert "xxx" not in text and "made-up" not in text
    assert 'kvgate_time_to_first_token_seconds_count{backend="b1",model="other"} 100.0' in text
    assert len(m.requests_by._cache) == 3  # the memo is bounded too


def test_a_decision_counts_its_policy_backend_reason_and_duration() -> None:
    m = GatewayMetrics()
    decision = Decision(profile="prefix-aware", ranked=("b1", "b2"), scores=())
    m.count_decision(decision, "prefix", 0.00004)
    m.count_decision(decision, "prefix", 0.0003)
    m.count_decision(replace(decision, profile="session"), "session", 0.00004)
    text = m.render().decode()
    labels = 'backend="b1",policy="prefix-aware",reason="prefix"'
    assert f"kvgate_routing_decisions_total{{{labels}}} 2.0" in text
    bucket = "kvgate_routing_decision_duration_seconds_bucket"
    assert f'{bucket}{{le="5e-05",policy="prefix-aware"}} 1.0' in text
    assert f'{bucket}{{le="0.0005",policy="prefix-aware"}} 2.0' in text
    assert 'kvgate_routing_decision_duration_seconds_count{policy="session"} 1.0' in text
