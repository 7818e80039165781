"""Relative errors and their percentiles (nearest rank, `routing.percentile`), as the calibration
report states them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from routing.percentile import percentile


def relative_error(predicted: float, measured: float) -> float:
    """(predicted − measured) / measured; positive when the model is too slow."""
    if measured <= 0:
        raise ValueError(f"measured value must be positive, got {measured}")
    return (predicted - measured) / measured


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    """Percentiles of |relative error| over n comparisons, plus the signed median (bias)."""

    n: int
    median_abs: float
    p90_abs: float
    median_signed: float

    @classmethod
    def of(cls, rel_errors: Sequence[float]) -> ErrorSummary:
        if not rel_errors:
            return cls(0, math.nan, math.nan, math.nan)
        absolute = [abs(e) for e in rel_errors]
        return cls(
            n=len(rel_errors),
            median_abs=percentile(absolute, 50),
            p90_abs=percentile(absolute, 90),
            median_signed=percentile(rel_errors, 50),
        )

    def to_json(self) -> dict[str, float]:
        return {
            "n": self.n,
            "median_abs": self.median_abs,
            "p90_abs": self.p90_abs,
            "median_signed": self.median_signed,
        }
