"""What a replay keeps: a few numbers per finished request, an ITL histogram, a timeline, and
the `ReplayResult` that holds them with the fleet's counts.

Memory stays proportional to the requests' summary numbers alone: a finished request leaves
three floats and a replica index in typed arrays (~26 bytes), inter-token latencies go to a
histogram of log-spaced buckets (0.1 % wide, so percentiles are within ±0.05 %; at most a
few thousand buckets whatever the trace length), and the timeline has a fixed number of
points.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from sim.replay.disaggregation import PdSummary

_RATIO = 1.001
_LOG_RATIO = math.log(_RATIO)
_FLOOR_S = 1e-9


def _bucket(x: float) -> int:
    return math.floor(math.log(max(x, _FLOOR_S)) / _LOG_RATIO)


class LatencyHistogram:
    """Latencies counted in buckets [r^u, r^(u+1)), r = 1.001."""

    __slots__ = ("_counts", "count", "total_s")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self.total_s = 0.0

    def add(self, x: float, weight: int = 1) -> None:
        u = _bucket(x)
        self._counts[u] = self._counts.get(u, 0) + weight
        self.count += weight
        self.total_s += x * weight

    def add_linear(self, a: float, b: float, first: int, stop: int, weight: int) -> None:
        """Add a + b·i for i in [first, stop), each `weight` times, a bucket at a time."""
        if stop <= first:
            return
        n = stop - first
        self.count += n * weight
        self.total_s += weight * (a * n + b * (first + stop - 1) * n / 2)
        counts = self._counts
        i = first
        while i < stop:
            u = _bucket(a + b * i)
            if b > 0:
                upper = _RATIO ** (u + 1)
                nxt = min(stop, max(i + 1, math.ceil((upper - a) / b)))
            else:
                nxt = stop
            counts[u] = counts.get(u, 0) + (nxt - i) * weight
            i = nxt

    def percentile(self, p: float) -> float:
        """The p-th percentile (0 < p ≤ 100), as its bucket's geometric middle; NaN if empty."""
        if not self.count:
            return math.nan
        rank = p / 100 * self.count
        seen = 0
        for u in sorted(self._counts):
            seen += self._counts[u]
            if seen >= rank:
                return float(_RATIO ** (u + 0.5))
        return float(_RATIO ** (max(self._counts) + 0.5))

    @property
    def buckets(self) -> int:
        return len(self._counts)


@dataclass(slots=True)
class RequestLog:
    """Per finished request: TTFT, end-to-end latency, mean ITL (NaN for one token), replica."""

    ttft_s: array[float] = field(default_factory=lambda: array("d"))
    e2e_s: array[float] = field(default_factory=lambda: array("d"))
    itl_mean_s: array[float] = field(default_factory=lambda: array("d"))
    replica: array[int] = field(default_factory=lambda: array("H"))

    def add(self, ttft_s: float, e2e_s: float, itl_mean_s: float, replica: int) -> None:
        self.ttft_s.append(ttft_s)
        self.e2e_s.append(e2e_s)
        self.itl_mean_s.append(itl_mean_s)
        self.replica.append(replica)

    def __len__(self) -> int:
        return len(self.ttft_s)


@dataclass(slots=True)
class Timeline:
    """Per-replica samples at fixed virtual times: hit rate so far, load."""

    times_s: array[float] = field(default_factory=lambda: array("d"))
    hit_rate: list[array[float]] = field(default_factory=list)  # per replica, cumulative
    load: list[array[int]] = field(default_factory=list)  # running + waiting, per replica


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Everything one replay measured (summarised by `sim.replay.report`)."""

    policy: str
    replica_ids: tuple[str, ...]
    requests: int  # finished
    rejected: int  # could never fit an engine
    log: RequestLog
    itl: LatencyHistogram
    timeline: Timeline
    dispatched: tuple[int, ...]
    prefix_queries: int  # tokens looked up, summed over the engines
    prefix_hits: int
    preemptions: int
    makespan_s: float  # virtual time of the last token
    segments: int  # engine steps and decode runs simulated
    steps: int  # engine steps they stand for
    pd: PdSummary | None = None  # a P/D pool's splits, transfers and busy shares
