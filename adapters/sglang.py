"""SGLang: Prometheus metrics at `/metrics` (server started with `--enable-metrics`).

`sglang:token_usage` is the KV pool's occupancy, 0–1. Page size and page count are labels
of `sglang:cache_config_info`. SGLang reports no LoRA state in its metrics. With data
parallelism each scheduler's series carry its `dp_rank`.
"""

from __future__ import annotations

from adapters.metric_map import MetricMap, MetricMapAdapter, Source

CACHE_CONFIG = "sglang:cache_config_info"

SGLANG_METRICS = MetricMap(
    waiting=(Source("sglang:num_queue_reqs"),),
    running=(Source("sglang:num_running_reqs"),),
    kv_usage=(Source("sglang:token_usage"),),
    block_size=(Source(CACHE_CONFIG, "page_size"),),
    num_blocks=(Source(CACHE_CONFIG, "num_pages"),),
)

SGLANG = MetricMapAdapter(
    engine="sglang", names=SGLANG_METRICS, rank_labels=("dp_rank", "engine_rank")
)
