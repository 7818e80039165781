from __future__ import annotations

from pathlib import Path

from adapters.sglang import SGLANG
from routing.types import EngineMetrics

# Synthesised from the documented names, not captured (see tests/fixtures/README.md).
PAGE = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-synthetic" / "metrics.txt"


def test_adapter_identity() -> None:
    assert (SGLANG.engine, SGLANG.metrics_path) == ("sglang", "/metrics")


def test_synthesised_page() -> None:
    assert SGLANG.parse_metrics(PAGE.read_text(), 4.0) == EngineMetrics(
        scraped_at=4.0, waiting=3, running=7, kv_usage=0.4, block_size=16, num_blocks=8192
    )


def test_data_parallel_ranks_are_combined() -> None:
    text = (
        'sglang:num_queue_reqs{model_name="m",dp_rank="0"} 2\n'
        'sglang:num_queue_reqs{model_name="m",dp_rank="1"} 0\n'
        'sglang:num_running_reqs{model_name="m",dp_rank="0"} 8\n'
        'sglang:num_running_reqs{model_name="m",dp_rank="1"} 6\n'
        'sglang:token_usage{model_name="m",dp_rank="0"} 0.9\n'
        'sglang:token_usage{model_name="m",dp_rank="1"} 0.5\n'
    )
    metrics = SGLANG.parse_metrics(text, 0.0)
    assert (metrics.waiting, metrics.running) == (2, 14)
    assert metrics.kv_usage is not None
    assert abs(metrics.kv_usage - 0.7) < 1e-12


def test_vllm_names_are_not_read() -> None:
    text = "vllm:num_requests_waiting 3\nvllm:kv_cache_usage_perc 0.5\n"
    assert SGLANG.parse_metrics(text, 0.0) == EngineMetrics(scraped_at=0.0)
