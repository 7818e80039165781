"""vLLM (v1 engine): Prometheus metrics at `/metrics`, names prefixed `vllm:`.

Block size and block count are labels of the info gauge `vllm:cache_config_info`
(`num_gpu_blocks` reads `"None"` until the engine has profiled memory). The v0 name
`vllm:gpu_cache_usage_perc` is kept as a fallback for KV usage: older servers still run.
A data-parallel server labels each rank's series `engine="<rank>"`.
"""

from __future__ import annotations

from adapters.metric_map import MetricMap, MetricMapAdapter, Source

CACHE_CONFIG = "vllm:cache_config_info"

VLLM_METRICS = MetricMap(
    waiting=(Source("vllm:num_requests_waiting"),),
    running=(Source("vllm:num_requests_running"),),
    kv_usage=(Source("vllm:kv_cache_usage_perc"), Source("vllm:gpu_cache_usage_perc")),
    block_size=(Source(CACHE_CONFIG, "block_size"),),
    num_blocks=(Source(CACHE_CONFIG, "num_gpu_blocks"),),
    lora_info=("vllm:lora_requests_info",),
)

VLLM = MetricMapAdapter(engine="vllm", names=VLLM_METRICS, rank_labels=("engine",))
