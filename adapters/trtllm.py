"""TensorRT-LLM `trtllm-serve`: Prometheus metrics at `/prometheus/metrics`, prefix `trtllm_`.

Block size and count are plain gauges here, not labels. Dynamo re-exports the same
metrics with a `trtllm:` prefix; those names are the fallbacks. No LoRA state is reported.
"""

from __future__ import annotations

from adapters.metric_map import MetricMap, MetricMapAdapter, Source


def _names(suffix: str) -> tuple[Source, ...]:
    return (Source("trtllm_" + suffix), Source("trtllm:" + suffix))


TRTLLM_METRICS = MetricMap(
    waiting=_names("num_requests_waiting"),
    running=_names("num_requests_running"),
    kv_usage=_names("kv_cache_utilization"),
    block_size=_names("kv_cache_tokens_per_block"),
    num_blocks=_names("kv_cache_max_blocks"),
)

TRTLLM = MetricMapAdapter(engine="trtllm", names=TRTLLM_METRICS, metrics_path="/prometheus/metrics")
