from __future__ import annotations

from adapters.openai import OPENAI
from routing.types import EngineMetrics


def test_nothing_to_poll() -> None:
    assert (OPENAI.engine, OPENAI.metrics_path) == ("openai", None)


def test_every_metric_is_unknown() -> None:
    text = "vllm:num_requests_waiting 3\n"
    assert OPENAI.parse_metrics(text, 5.0) == EngineMetrics(scraped_at=5.0)
