"""`load-imbalance-filter`: when load is badly skewed, drop the hot spots.

Load: load(e) = e.in_flight + e.remote_in_flight + e.metrics.waiting (the last 0 when
unknown): requests sent to e by this gateway and by the others (shared state), plus the
engine's queue, where a queued request of ours counts twice, on purpose. SGLang's cache_aware
balance gate, per candidate: with min_load the lowest load of the candidates, e is a hot spot if

    load - min_load > abs_threshold   and   load > min_load × rel_threshold

The filter drops the hot spots and keeps the rest in input order; the least-loaded candidate
is never one, so the output is never empty. Unlike SGLang it keeps the whole band, so a prefix
scorer still chooses among it (docs/decisions/0002-default-profile-tuning.md).

Parameters: `abs_threshold` (number ≥ 0, default 64; lower it for engines that batch few
requests) and `rel_threshold` (number ≥ 1, default 1.5; 1 disables it), SGLang's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext
from routing.params import Bounds


def load(endpoint: EndpointSnapshot) -> int:
    """Requests in flight from the gateways plus the engine's reported waiting queue."""
    m = endpoint.metrics
    waiting = m.waiting if m is not None and m.waiting is not None else 0
    return endpoint.in_flight + endpoint.remote_in_flight + waiting


class LoadImbalanceFilter:
    """Drops candidates loaded far above the least-loaded one (SGLang's balance gate)."""

    @dataclass(frozen=True, slots=True)
    class Params:
        """A `load-imbalance-filter`'s config `params` (stated in the module docstring)."""

        abs_threshold: Annotated[float, Bounds(ge=0.0)] = 64.0
        rel_threshold: Annotated[float, Bounds(ge=1.0)] = 1.5

    def __init__(self, name: str, params: Params = Params()) -> None:
        self.name = name
        self.abs_threshold = params.abs_threshold
        self.rel_threshold = params.rel_threshold

    def filter(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Sequence[EndpointSnapshot]:
        if not endpoints:
            return []
        # `load(e)` inlined: this runs for every candidate of every request.
        loads = [
            e.in_flight
            + e.remote_in_flight
            + (0 if (m := e.metrics) is None or (w := m.waiting) is None else w)
            for e in endpoints
        ]
        distinct = set(loads)  # few distinct values: min and max over those
        low = min(distinct)
        if max(distinct) - low <= self.abs_threshold:  # the usual case: nobody can be a hot spot
            return endpoints
        # `_hot(x, low)` inlined: the filter acts on many requests when the pool is skewed.
        excess, above = self.abs_threshold, low * self.rel_threshold
        return [
            e for e, x in zip(endpoints, loads, strict=True) if not (x - low > excess and x > above)
        ]

    def _hot(self, x: int, low: int) -> bool:
        return x - low > self.abs_threshold and x > low * self.rel_threshold
