"""The one percentile rule of kvgate's reports: nearest rank.

The p-th percentile of n values is the smallest value such that at least p % of the values
are at most it: the value of rank k = ⌈p/100 · n⌉ (1-based, clamped to 1..n) in ascending
order. No interpolation, so it is always one of the values; for 1..10 the p90 is 9 and the
median (p50) is 5. `kvgate sim`, `kvgate demo`, the benchmarks, the fidelity check and the
calibration report all use it. (The simulator's inter-token-latency histogram approximates
the same rule bucket by bucket: `sim.replay.outcomes.LatencyHistogram`.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float:
    """The p-th percentile (0 ≤ p ≤ 100) of `values`, by nearest rank; NaN if empty."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[k]
