from __future__ import annotations

from pathlib import Path

from adapters.trtllm import TRTLLM
from routing.types import EngineMetrics

# Synthesised from the documented names, not captured (see tests/fixtures/README.md).
PAGE = Path(__file__).resolve().parents[2] / "fixtures" / "trtllm-synthetic" / "metrics.txt"


def test_adapter_identity() -> None:
    # trtllm-serve's /metrics is JSON iteration stats; Prometheus text is mounted here.
    assert (TRTLLM.engine, TRTLLM.metrics_path) == ("trtllm", "/prometheus/metrics")


def test_synthesised_page() -> None:
    assert TRTLLM.parse_metrics(PAGE.read_text(), 9.0) == EngineMetrics(
        scraped_at=9.0, waiting=5, running=12, kv_usage=0.75, block_size=32, num_blocks=4096
    )


def test_dynamo_prefix_is_a_fallback() -> None:
    text = (
        'trtllm:num_requests_waiting{model_name="m"} 2\n'
        'trtllm:num_requests_running{model_name="m"} 1\n'
        'trtllm:kv_cache_utilization{model_name="m"} 0.5\n'
        'trtllm:kv_cache_tokens_per_block{model_name="m"} 64\n'
        'trtllm:kv_cache_max_blocks{model_name="m"} 100\n'
    )
    assert TRTLLM.parse_metrics(text, 0.0) == EngineMetrics(
        scraped_at=0.0, waiting=2, running=1, kv_usage=0.5, block_size=64, num_blocks=100
    )
