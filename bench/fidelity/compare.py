"""The arithmetic of the fidelity check: what a run measured, and how far two runs differ.

Both sides are reduced the same way: mean and 90th percentile (nearest rank) of the
requests' TTFTs, and the prefix-cache hit rate as the engines count it (hit tokens over
looked-up tokens, summed over the replicas). The relative error of a figure is
|sim − live| / live; for the hit rate the absolute difference in percentage points is
given too, since a relative error of a small hit rate says little. Several runs of one
side (a case's repetitions) are compared as one: the mean over the runs of each run's
figure (`averaged`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from routing.percentile import percentile


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """The figures compared: TTFT mean and p90 (seconds) and hit rate (0–1)."""

    requests: int  # with a TTFT
    ttft_mean_s: float
    ttft_p90_s: float
    hit_rate: float

    @classmethod
    def of(cls, ttfts_s: Sequence[float], hits: int, queries: int) -> RunMetrics:
        ordered = sorted(ttfts_s)
        return cls(
            requests=len(ordered),
            ttft_mean_s=sum(ordered) / len(ordered) if ordered else math.nan,
            ttft_p90_s=percentile(ordered, 90),
            hit_rate=hits / queries if queries else math.nan,
        )


def averaged(runs: Sequence[RunMetrics]) -> RunMetrics:
    """Runs as one: the mean over `runs` of each run's mean TTFT, p90 TTFT and hit rate
    (`requests`: their total). Not the figures of the pooled TTFTs: a p90 of pooled runs
    would weigh a long run more, and each run's p90 is what one run is judged on."""
    if not runs:
        return RunMetrics(0, math.nan, math.nan, math.nan)
    n = len(runs)
    return RunMetrics(
        requests=sum(r.requests for r in runs),
        ttft_mean_s=sum(r.ttft_mean_s for r in runs) / n,
        ttft_p90_s=sum(r.ttft_p90_s for r in runs) / n,
        hit_rate=sum(r.hit_rate for r in runs) / n,
    )


@dataclass(frozen=True, slots=True)
class Errors:
    """Simulated against live: relative errors, and the hit rate's difference in points."""

    ttft_mean: float
    ttft_p90: float
    hit_rate: float
    hit_rate_points: float  # |sim − live| × 100

    @property
    def worst(self) -> float:
        """The largest of the three relative errors (NaN if any is NaN)."""
        values = (self.ttft_mean, self.ttft_p90, self.hit_rate)
        return math.nan if any(math.isnan(v) for v in values) else max(values)


def relative_error(sim: float, live: float) -> float:
    """|sim − live| / |live|; NaN when live is 0 or either is NaN (no scale to compare to)."""
    if math.isnan(sim) or math.isnan(live) or live == 0:
        return math.nan
    return abs(sim - live) / abs(live)


def compare(live: RunMetrics, sim: RunMetrics) -> Errors:
    return Errors(
        ttft_mean=relative_error(sim.ttft_mean_s, live.ttft_mean_s),
        ttft_p90=relative_error(sim.ttft_p90_s, live.ttft_p90_s),
        hit_rate=relative_error(sim.hit_rate, live.hit_rate),
        hit_rate_points=abs(sim.hit_rate - live.hit_rate) * 100,
    )


@dataclass(frozen=True, slots=True)
class ArrivalJitter:
    """How much later than at best requests reached the gateway, against the schedule.

    Per request, offset = observed arrival − scheduled arrival; the jitter is each offset
    minus the smallest one (a constant shift of the clocks is not jitter), in seconds."""

    mean_s: float
    p99_s: float
    max_s: float


def arrival_jitter(scheduled_s: Sequence[float], observed_s: Sequence[float]) -> ArrivalJitter:
    """Jitter of the observed arrivals (the recording's) around the scheduled ones (the
    trace's), paired in arrival order; both lists sorted, of the same length."""
    if len(scheduled_s) != len(observed_s):
        raise ValueError(f"{len(observed_s)} observed arrivals for {len(scheduled_s)} scheduled")
    if not scheduled_s:
        return ArrivalJitter(math.nan, math.nan, math.nan)
    offsets = [o - s for s, o in zip(scheduled_s, observed_s, strict=True)]
    least = min(offsets)
    jitter = sorted(x - least for x in offsets)
    return ArrivalJitter(sum(jitter) / len(jitter), percentile(jitter, 99), jitter[-1])
