"""Type stub of the compiled default-profile pass (`fused_native.pyx`)."""

from collections.abc import Callable
from typing import Any

TTFT: int
PREFIX: int
IN_FLIGHT: int
KV: int
HEADROOM: int

class Kernel:
    def __init__(
        self,
        snapshot_type: type,
        metrics_type: type,
        line_type: type,
        filtering: bool,
        abs_threshold: float,
        rel_threshold: float,
        kinds: list[int],
        weights: list[float],
        eviction_weight: float,
    ) -> None: ...
    def gather(self, endpoints: list[Any]) -> tuple[list[Any], tuple[str, ...], bool] | None: ...
    def columns(
        self,
        depths: list[int] | None,
        lines: list[Any] | None,
        fills: list[float] | None,
        displaced: list[float] | None,
        terms: Callable[[int], tuple[float, float]],
    ) -> tuple[list[list[float]], list[float]] | None: ...
