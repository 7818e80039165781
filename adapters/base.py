"""The interface every engine adapter provides."""

from __future__ import annotations

from typing import Protocol

from routing.types import EngineMetrics


class EngineAdapter(Protocol):
    """Knows one engine's metrics endpoint and how to read it.

    `metrics_path` is None for an engine that exports no metrics (it is not polled).
    `parse_metrics` turns the endpoint's body into metrics stamped `scraped_at` (a reading
    of the caller's clock); it raises `ValueError` on a body it cannot read.
    """

    @property
    def engine(self) -> str: ...

    @property
    def metrics_path(self) -> str | None: ...

    def parse_metrics(self, text: str, scraped_at: float) -> EngineMetrics: ...

    def dp_size_of(self, text: str) -> int:
        """How many data-parallel ranks the page shows series of (1: none apart)."""
        ...

    def rank_metrics(self, text: str, scraped_at: float, dp_size: int) -> list[EngineMetrics]:
        """The page read apart per rank, ranks 0 .. `dp_size` - 1."""
        ...
