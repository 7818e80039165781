from __future__ import annotations

from pathlib import Path

import pytest

from adapters.base import EngineAdapter
from adapters.registry import ADAPTERS, detect_engine, get_adapter

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_one_adapter_per_configurable_engine() -> None:
    assert sorted(ADAPTERS) == ["openai", "sglang", "trtllm", "vllm"]
    for name, adapter in ADAPTERS.items():
        assert adapter.engine == name


def test_get_adapter() -> None:
    adapter: EngineAdapter = get_adapter("vllm")
    assert adapter is ADAPTERS["vllm"]
    with pytest.raises(ValueError, match=r"unknown engine 'tgi' \(known: openai, sglang"):
        get_adapter("tgi")


@pytest.mark.parametrize(
    ("page", "engine"),
    [
        ("vllm-0.32/metrics_after.txt", "vllm"),
        ("vllm-0.32/metrics_8102_lora.txt", "vllm"),
        ("sglang-synthetic/metrics.txt", "sglang"),
        ("trtllm-synthetic/metrics.txt", "trtllm"),
    ],
)
def test_detect_engine_from_fixture_pages(page: str, engine: str) -> None:
    assert detect_engine((FIXTURES / page).read_text()) == engine


@pytest.mark.parametrize(
    ("text", "engine"),
    [
        ("vllm:num_requests_waiting 1\n", "vllm"),
        ("process_open_fds 3\nsglang:token_usage 0.1\n", "sglang"),
        ('trtllm_kv_cache_utilization{model_name="m"} 0.62\n', "trtllm"),
        ("trtllm:num_requests_waiting 0\n", "trtllm"),
        ("", "openai"),
        ("process_open_fds 3\nhttp_requests_total 5\n", "openai"),
        ("# HELP vllm:num_requests_waiting only a comment\n", "openai"),
        ("my_vllm:thing 1\n", "openai"),
    ],
)
def test_detect_engine_by_sample_prefix(text: str, engine: str) -> None:
    assert detect_engine(text) == engine
