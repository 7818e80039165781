"""Type stub of the compiled default-profile pass (`fused_native.pyx`)."""

from collections.abc import Callable, Sequence
from typing import Any, overload

TTFT: int
PREFIX: int
IN_FLIGHT: int
KV: int
HEADROOM: int

class Column(Sequence[float]):
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, key: int) -> float: ...
    @overload
    def __getitem__(self, key: slice) -> list[float]: ...

def column(values: Sequence[float]) -> Column: ...

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
        tie_tolerance: float,
    ) -> None: ...
    def gather(self, endpoints: list[Any]) -> tuple[list[Any], tuple[str, ...], bool] | None: ...
    def columns(
        self,
        ids: tuple[str, ...],
        depths: list[int] | None,
        lines: list[Any] | None,
        fills: list[float] | None,
        displaced: list[float] | None,
        terms: Callable[[int], tuple[float, float]],
    ) -> tuple[list[Column], Column, list[str] | None] | None: ...
