"""A generic OpenAI-compatible server: it exports no metrics, so it is never scraped."""

from __future__ import annotations

from dataclasses import dataclass

from routing.types import EngineMetrics


@dataclass(frozen=True, slots=True)
class OpenAIAdapter:
    """An `EngineAdapter` that knows nothing: every metric stays unknown."""

    engine: str = "openai"
    metrics_path: str | None = None

    def parse_metrics(self, text: str, scraped_at: float) -> EngineMetrics:
        del text  # nothing to read
        return EngineMetrics(scraped_at=scraped_at)

    def dp_size_of(self, text: str) -> int:
        del text
        return 1

    def rank_metrics(self, text: str, scraped_at: float, dp_size: int) -> list[EngineMetrics]:
        return [self.parse_metrics(text, scraped_at)] * dp_size


OPENAI = OpenAIAdapter()
