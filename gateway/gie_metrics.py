"""The Gateway API Inference Extension's metric names, worked out from kvgate's when scraped.

Each series means what the endpoint picker's (EPP's) series of the same name means, computed at
`/metrics` from what kvgate already counts (nothing more on the request path):
- `inference_extension_scheduler_e2e_duration_seconds` (histogram, no labels):
  `kvgate_routing_decision_duration_seconds{policy}` summed over policies, at the EPP's bucket
  bounds (a subset of kvgate's, so the counts are exact).
- `inference_pool_ready_pods{name}`: routable backends; `inference_pool_average_queue_size{name}`
  and `inference_pool_average_kv_cache_utilization{name}`: the mean waiting requests and KV usage
  (0–1) over the routable backends that reported them (absent while none did);
  `inference_pool_per_pod_queue_size{model_server_pod, name}`: each one's queue, by backend id.
- `inference_objective_request_total{model_name, target_model_name}`: `kvgate_requests_total`
  summed over backends and statuses, for a model named (kvgate rewrites none: target = model).
`name` is the discovered InferencePool (`discovery.pool`), else "default". All but the last
also under llm-d's current names (`CURRENT`); `kvgate epp` adds `gateway.epp.request_metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.metrics import GatewayMetrics
from health.pool import BackendPool

# The EPP's scheduler buckets (pkg/epp/metrics: SchedulerE2ELatency).
GIE_SCHEDULER_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
_BOUNDS = (*map(repr, GIE_SCHEDULER_BUCKETS), "+Inf")  # as prometheus_client writes `le`
# llm-d's current names for the series (it emits both, as here).
CURRENT = {
    "inference_extension_scheduler_e2e_duration_seconds": (
        "llm_d_epp_scheduler_e2e_duration_seconds"
    ),
    "inference_pool_ready_pods": "llm_d_epp_ready_endpoints",
    "inference_pool_average_queue_size": "llm_d_epp_average_queue_size",
    "inference_pool_average_kv_cache_utilization": "llm_d_epp_average_kv_cache_utilization",
    "inference_pool_per_pod_queue_size": "llm_d_epp_per_endpoint_queue_size",
}
_CURRENT_LABELS = {"model_server_pod": "model_server_endpoint"}


class InferenceExtensionCollector(Collector):
    """The series of the module docstring, from the pool and the gateway's own metrics."""

    def __init__(self, pool: BackendPool, metrics: GatewayMetrics, pool_name: str) -> None:
        self._pool = pool
        self._metrics = metrics
        self._name = pool_name

    def collect(self) -> Iterator[Metric]:
        latency = _scheduler_latency(self._metrics.decision_duration)
        for family in (latency, *self._pool_gauges(), self._objective_requests()):
            yield family
            if (current := CURRENT.get(family.name)) is not None:
                yield _renamed(family, current)

    def _pool_gauges(self) -> Iterator[Metric]:
        name = self._name
        ready = [s for s in self._pool.snapshots() if s.healthy]
        queues = [(s.id, w) for s in ready if s.metrics and (w := s.metrics.waiting) is not None]
        usages = [u for s in ready if s.metrics and (u := s.metrics.kv_usage) is not None]
        pods = GaugeMetricFamily(
            "inference_pool_ready_pods",
            "The number of ready pods (routable backends) in the inference server pool",
            labels=["name"],
        )
        pods.add_metric([name], len(ready))
        avg_queue = GaugeMetricFamily(
            "inference_pool_average_queue_size",
            "The average number of requests pending in the model server queue",
            labels=["name"],
        )
        avg_kv = GaugeMetricFamily(
            "inference_pool_average_kv_cache_utilization",
            "The average kv cache utilization for an inference server pool",
            labels=["name"],
        )
        per_pod = GaugeMetricFamily(
            "inference_pool_per_pod_queue_size",
            "The total number of queue for each model server pod under the inference pool",
            labels=["model_server_pod", "name"],
        )
        if queues:
            avg_queue.add_metric([name], sum(w for _, w in queues) / len(queues))
        if usages:
            avg_kv.add_metric([name], sum(usages) / len(usages))
        for backend_id, waiting in queues:
            per_pod.add_metric([backend_id, name], waiting)
        yield from (pods, avg_queue, avg_kv, per_pod)

    def _objective_requests(self) -> Metric:
        by_model: dict[str, float] = {}
        for family in self._metrics.requests.collect():
            for sample in family.samples:
                model = sample.labels["model"]
                if sample.name.endswith("_total") and model:  # not a refusal, an admin call
                    by_model[model] = by_model.get(model, 0.0) + sample.value
        family = CounterMetricFamily(
            "inference_objective_request_total",
            "Counter of inference objective requests broken out for each model and target model",
            labels=["model_name", "target_model_name"],
        )
        for model, count in sorted(by_model.items()):
            family.add_metric([model, model], count)
        return family


def _scheduler_latency(histogram: Histogram) -> Metric:
    """kvgate's decision histogram summed over policies, at the EPP's bucket bounds."""
    counts = dict.fromkeys(_BOUNDS, 0.0)
    total = 0.0
    for family in histogram.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                le = sample.labels["le"]
                if le in counts:
                    counts[le] += sample.value
            elif sample.name.endswith("_sum"):
                total += sample.value
    family = HistogramMetricFamily(
        "inference_extension_scheduler_e2e_duration_seconds",
        "End-to-end scheduling latency distribution in seconds",
    )
    family.add_metric([], list(counts.items()), sum_value=total)
    return family


def _renamed(family: Metric, name: str) -> Metric:
    """`family` under `name` (its samples' suffixes kept), labels renamed to llm-d's."""
    twin = Metric(name, family.documentation, family.type)
    twin.samples = [
        sample._replace(
            name=name + sample.name[len(family.name) :],
            labels={_CURRENT_LABELS.get(k, k): v for k, v in sample.labels.items()},
        )
        for sample in family.samples
    ]
    return twin
