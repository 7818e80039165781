from __future__ import annotations

from pathlib import Path

import pytest

from adapters.vllm import VLLM
from routing.types import EngineMetrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32"
WAITING = 'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0'
RUNNING = 'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0'
KV_USAGE = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0'


@pytest.fixture(scope="module")
def after() -> str:
    return (FIXTURES / "metrics_after.txt").read_text()


@pytest.fixture(scope="module")
def lora() -> str:
    return (FIXTURES / "metrics_8102_lora.txt").read_text()


def test_adapter_identity() -> None:
    assert (VLLM.engine, VLLM.metrics_path) == ("vllm", "/metrics")


def test_real_page(after: str) -> None:
    assert VLLM.parse_metrics(after, 12.5) == EngineMetrics(
        scraped_at=12.5,
        waiting=0,
        running=0,
        kv_usage=0.0,
        block_size=128,
        num_blocks=64,
    )


def test_real_page_with_lora(lora: str) -> None:
    metrics = VLLM.parse_metrics(lora, 1.0)
    assert (metrics.block_size, metrics.num_blocks) == (32, 256)
    assert metrics.max_loras == 1
    assert metrics.running_loras == frozenset()
    assert metrics.waiting_loras == frozenset()


def test_real_page_with_load(after: str) -> None:
    text = (
        after.replace(WAITING, WAITING[:-3] + "4.0")
        .replace(RUNNING, RUNNING[:-3] + "2.0")
        .replace(KV_USAGE, KV_USAGE[:-3] + "0.375")
    )
    metrics = VLLM.parse_metrics(text, 1.0)
    assert (metrics.waiting, metrics.running, metrics.kv_usage) == (4, 2, 0.375)


def test_real_page_with_running_and_waiting_adapters(lora: str) -> None:
    newer = (
        'vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql-lora",'
        'waiting_lora_adapters="chat-lora,sql-lora"} 1.7959664e+09'
    )
    text = lora.replace(
        'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",'
        'waiting_lora_adapters=""} 1.7959663378574462e+09',
        "\n".join(
            [
                'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",'
                'waiting_lora_adapters=""} 1.7959663378574462e+09',
                newer,
            ]
        ),
    )
    metrics = VLLM.parse_metrics(text, 1.0)
    assert metrics.running_loras == frozenset({"sql-lora"})
    assert metrics.waiting_loras == frozenset({"chat-lora", "sql-lora"})
    assert metrics.max_loras == 1


def test_old_kv_usage_name_is_a_fallback(after: str) -> None:
    old = (
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="tiny"} 0.25\n'
    )
    only_old = after.replace(KV_USAGE, "").replace("vllm:kv_cache_usage_perc", "x")
    assert VLLM.parse_metrics(only_old + old, 1.0).kv_usage == 0.25
    # Both present (a transition release): the current name wins.
    assert VLLM.parse_metrics(after + old, 1.0).kv_usage == 0.0


def test_v0_style_page_without_engine_labels() -> None:
    text = (
        'vllm:num_requests_running{model_name="m"} 3.0\n'
        'vllm:num_requests_swapped{model_name="m"} 0.0\n'
        'vllm:num_requests_waiting{model_name="m"} 1.0\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
    )
    assert VLLM.parse_metrics(text, 2.0) == EngineMetrics(
        scraped_at=2.0, waiting=1, running=3, kv_usage=0.5
    )


def test_two_engines_are_combined() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 5.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25\n'
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0\n'
    )
    assert VLLM.parse_metrics(text, 0.0) == EngineMetrics(
        scraped_at=0.0, waiting=6, running=7, kv_usage=0.375, block_size=16, num_blocks=2000
    )


def test_blocks_unknown_before_profiling() -> None:
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    metrics = VLLM.parse_metrics(text, 0.0)
    assert (metrics.block_size, metrics.num_blocks) == (16, None)
