from __future__ import annotations

from dataclasses import replace
from platform import python_version

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import MAX_TENANT_SERIES, GatewayMetrics
from gateway.request_record import RequestRecord
from gateway.usage import Usage
from gateway.version import installed_version
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


def _finished(
    model: str, usage: Usage | None, tenant: str | None, key: str | None = None
) -> RequestRecord:
    rec = RequestRecord("r", "POST", "/v1/chat/completions", 0.0, model=model, usage=usage)
    rec.tenant, rec.key = tenant, key
    return rec


def test_tokens_count_by_model_and_tenant() -> None:
    m = GatewayMetrics(models=lambda: frozenset({"llama"}))
    m.count_tokens(_finished("llama", Usage(100, 64, 5), "team-a", key="team-a"))
    m.count_tokens(_finished("llama", Usage(20, None, 3), "team-a", key="team-a"))
    m.count_tokens(_finished("made-up", Usage(10, 0, 1), None))
    m.count_tokens(_finished("llama", None, "team-b"))  # no usage reported: nothing
    text = m.render().decode()
    a = 'model="llama",tenant="team-a"'
    assert f"kvgate_prompt_tokens_total{{{a}}} 120.0" in text
    assert f"kvgate_cached_prompt_tokens_total{{{a}}} 64.0" in text
    assert f"kvgate_completion_tokens_total{{{a}}} 8.0" in text
    assert 'kvgate_prompt_tokens_total{model="other",tenant="anonymous"} 10.0' in text
    assert "team-b" not in text


def test_header_tenants_are_bounded_and_key_names_are_not() -> None:
    m = GatewayMetrics()
    for i in range(MAX_TENANT_SERIES + 50):
        m.count_tokens(_finished("m", Usage(1, 0, 1), f"header-{i}"))
    m.count_tokens(_finished("m", Usage(1, 0, 1), "a-key", key="a-key"))
    m.count_tokens(_finished("m", Usage(1, 0, 1), "header-0"))  # one seen before keeps its own
    text = m.render().decode()
    series = [line for line in text.splitlines() if line.startswith("kvgate_prompt_tokens_total")]
    assert len(series) == MAX_TENANT_SERIES + 2  # the first N, "other" and the key
    assert 'kvgate_prompt_tokens_total{model="m",tenant="other"} 50.0' in text
    assert 'kvgate_prompt_tokens_total{model="m",tenant="header-0"} 2.0' in text
    assert 'kvgate_prompt_tokens_total{model="m",tenant="a-key"} 1.0' in text


def test_the_page_has_build_info_and_process_metrics_and_no_created_series() -> None:
    m = GatewayMetrics()
    m.requests_by("m", "b1", "200").inc()
    m.duration_by("m", "b1").observe(0.1)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    [info] = families["kvgate_build_info"].samples
    assert info.labels == {"version": installed_version() or "unknown", "python": python_version()}
    assert info.value == 1
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info"} <= set(families)
    assert not [s.name for f in families.values() for s in f.samples if s.name.endswith("_created")]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, 0.001, 0.005, 0.05, 1.0, 60.0]),  # on the bounds
        ),
        max_size=30,
    ),
    st.lists(st.integers(min_value=0, max_value=10**9), max_size=10),
)
def test_fast_children_count_as_prometheus_client_does(
    observations: list[float], increments: list[int]
) -> None:
    fast, plain = GatewayMetrics(), GatewayMetrics()
    plain.ttft.labels("m", "b1"), plain.requests.labels("m", "b1", "200")  # series at 0 too
    for value in observations:
        fast.ttft_by("m", "b1").observe(value)
        plain.ttft.labels("m", "b1").observe(value)
    for n in increments:
        fast.requests_by("m", "b1", "200").inc(n)
        plain.requests.labels("m", "b1", "200").inc(n)
    assert type(fast.ttft_by("m", "b1")).__name__ == "_HistogramChild"  # the fast path ran
    assert type(fast.requests_by("m", "b1", "200")).__name__ == "_CounterChild"
    assert _series(fast) == _series(plain) and _series(plain)


def _series(m: GatewayMetrics) -> list[str]:
    names = ("kvgate_time_to_first_token_seconds", "kvgate_requests_total")
    return [line for line in m.render().decode().splitlines() if line.startswith(names)]


def test_fast_counters_refuse_negative_amounts() -> None:
    m = GatewayMetrics()
    with pytest.raises(ValueError, match="non-negative"):
        m.requests_by("m", "b1", "200").inc(-1)
