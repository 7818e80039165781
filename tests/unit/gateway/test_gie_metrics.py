"""The Inference Extension's metric names, worked out at scrape time from kvgate's own."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.gie_metrics import GIE_SCHEDULER_BUCKETS, InferenceExtensionCollector
from gateway.metrics import DECISION_BUCKETS, GatewayMetrics
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy
from routing.types import Decision, EngineMetrics


def _pool() -> BackendPool:
    specs = [BackendSpec(url=f"http://{b}:1", id=b) for b in ("a", "b", "c")]
    pool = BackendPool(specs, HealthPolicy(), lambda: 10.0)
    for backend_id, up in (("a", True), ("b", True), ("c", False)):  # a first probe decides
        pool.get(backend_id).state.record_probe(up, 0.0)
    pool.get("a").metrics = EngineMetrics(scraped_at=10.0, waiting=4, kv_usage=0.5)
    pool.get("b").metrics = EngineMetrics(scraped_at=10.0, waiting=2, kv_usage=0.25)
    pool.get("c").metrics = EngineMetrics(
        scraped_at=10.0, waiting=100, kv_usage=1.0
    )  # down: left out
    return pool


def _samples(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _metrics(pool: BackendPool) -> GatewayMetrics:
    metrics = GatewayMetrics()
    metrics.registry.register(InferenceExtensionCollector(pool, metrics, "llama-pool"))
    return metrics


def test_the_epp_scheduler_buckets_are_among_kvgates() -> None:
    assert set(GIE_SCHEDULER_BUCKETS) <= set(DECISION_BUCKETS)


def test_scheduler_latency_sums_every_policy_at_the_epp_bounds() -> None:
    metrics = _metrics(_pool())
    for profile, seconds in (("prefix-aware", 0.00003), ("prefix-aware", 0.0004), ("rr", 0.03)):
        metrics.count_decision(Decision(profile, ("a",), ()), "load", seconds)
    got = _samples(metrics)
    name = "inference_extension_scheduler_e2e_duration_seconds"
    assert got[(f"{name}_bucket", (("le", "0.0001"),))] == 1.0  # 30 µs, below the EPP's first
    assert got[(f"{name}_bucket", (("le", "0.0005"),))] == 2.0
    assert got[(f"{name}_bucket", (("le", "0.02"),))] == 2.0
    assert got[(f"{name}_bucket", (("le", "0.05"),))] == 3.0
    assert got[(f"{name}_bucket", (("le", "+Inf"),))] == 3.0
    assert got[(f"{name}_count", ())] == 3.0
    assert abs(got[(f"{name}_sum", ())] - 0.03043) < 1e-9
    assert not any(k[0] == f"{name}_bucket" and k[1] == (("le", "5e-05"),) for k in got)


def test_pool_gauges_average_the_routable_backends() -> None:
    got = _samples(_metrics(_pool()))
    pool = (("name", "llama-pool"),)
    assert got[("inference_pool_ready_pods", pool)] == 2.0
    assert got[("inference_pool_average_queue_size", pool)] == 3.0
    assert got[("inference_pool_average_kv_cache_utilization", pool)] == 0.375
    per_pod = "inference_pool_per_pod_queue_size"
    assert got[(per_pod, (("model_server_pod", "a"), ("name", "llama-pool")))] == 4.0
    assert not any(k[0] == per_pod and ("model_server_pod", "c") in k[1] for k in got)


def test_no_engine_figures_no_averages() -> None:
    pool = BackendPool([BackendSpec(url="http://a:1", id="a")], HealthPolicy(), lambda: 0.0)
    got = _samples(_metrics(pool))
    assert not any(k[0].startswith("inference_pool_average") for k in got)


def test_objective_requests_by_model_over_backends_and_statuses() -> None:
    metrics = _metrics(_pool())
    metrics.requests_by("llama", "a", "200").inc(3)
    metrics.requests_by("llama", "b", "503").inc()
    metrics.requests_by("qwen", "a", "200").inc()
    metrics.requests_by("", "none", "401").inc()  # refused before its body was read
    got = _samples(metrics)
    name = "inference_objective_request_total"
    assert got[(name, (("model_name", "llama"), ("target_model_name", "llama")))] == 4.0
    assert got[(name, (("model_name", "qwen"), ("target_model_name", "qwen")))] == 1.0
    assert not [k for k in got if k[0] == name and ("model_name", "") in k[1]]


def test_each_series_also_under_llm_ds_current_name() -> None:
    metrics = _metrics(_pool())
    metrics.count_decision(Decision("prefix-aware", ("a",), ()), "load", 0.0004)
    got = _samples(metrics)
    pool = (("name", "llama-pool"),)
    assert got[("llm_d_epp_ready_endpoints", pool)] == got[("inference_pool_ready_pods", pool)]
    for gauge in ("average_queue_size", "average_kv_cache_utilization"):
        assert got[(f"llm_d_epp_{gauge}", pool)] == got[(f"inference_pool_{gauge}", pool)]
    endpoint = (("model_server_endpoint", "a"), ("name", "llama-pool"))
    assert got[("llm_d_epp_per_endpoint_queue_size", endpoint)] == 4.0
    old, new = (
        "inference_extension_scheduler_e2e_duration_seconds",
        "llm_d_epp_scheduler_e2e_duration_seconds",
    )
    assert {k[1]: v for k, v in got.items() if k[0] == f"{new}_bucket"} == {
        k[1]: v for k, v in got.items() if k[0] == f"{old}_bucket"
    }
    assert got[(f"{new}_count", ())] == 1.0
    assert not any(k[0].startswith("llm_d_epp_request_total") for k in got)  # the picker's own
