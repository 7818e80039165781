"""An SGLang-speaking replica's `/metrics`: SGLang's names, read by kvgate's sglang adapter."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from adapters.registry import detect_engine
from adapters.sglang import SGLANG
from sim.emulator.sglang_metrics import SglangMetrics
from sim.engine.types import EngineConfig, EngineStats

STATS = EngineStats(
    running=3,
    waiting=2,
    kv_usage=0.25,
    block_size=16,
    num_blocks=640,
    prefix_queries=1000,
    prefix_hits=600,
    preemptions=1,
    prompt_tokens=1000,
    generation_tokens=77,
)


def _metrics() -> SglangMetrics:
    return SglangMetrics('we"ird', EngineConfig(block_size=16, num_blocks=640), lambda: STATS)


def test_the_sglang_adapter_reads_the_page() -> None:
    text = _metrics().render().decode()
    assert detect_engine(text) == "sglang"
    m = SGLANG.parse_metrics(text, scraped_at=1.0)
    assert (m.waiting, m.running, m.kv_usage) == (2, 3, 0.25)
    assert (m.block_size, m.num_blocks) == (16, 640)


def test_names_and_values() -> None:
    m = _metrics()
    m.ttft.observe(0.03)
    m.e2e.observe(0.5)
    values = {
        s.name: s.value
        for family in text_string_to_metric_families(m.render().decode())
        for s in family.samples
        if not s.name.endswith(("_bucket", "_created"))
    }
    assert values["sglang:num_used_tokens"] == 0.25 * 640 * 16
    assert values["sglang:cache_hit_rate"] == 0.6
    assert values["sglang:max_total_num_tokens"] == 640 * 16
    assert values["sglang:prompt_tokens_total"] == 1000
    assert values["sglang:generation_tokens_total"] == 77
    assert values["sglang:cached_tokens_total"] == 600
    assert values["sglang:time_to_first_token_seconds_count"] == 1
    assert values["sglang:e2e_request_latency_seconds_sum"] == 0.5
    assert not any(name.startswith("vllm:") for name in values)
