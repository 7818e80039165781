"""`load-imbalance-filter`: when load is badly skewed, drop the hot spots.

Load: load(e) = e.in_flight + e.remote_in_flight + e.metrics.waiting, the last term 0 when
unknown. `in_flight` is the gateway's own, always fresh count of requests it sent to e,
`remote_in_flight` the other gateway replicas' (shared state; 0 without it); `waiting` adds
the queue built by other routers and clients. A request of ours still queued counts twice,
on purpose: queued requests are the load that hurts latency.

Rule (SGLang's cache_aware balance gate, applied per candidate): with min_load the lowest load
among the candidates, a candidate is a hot spot when

    load - min_load > abs_threshold   and   load > min_load × rel_threshold

and the filter drops the hot spots, keeping the rest in input order; equivalently it keeps

    load ≤ max(min_load + abs_threshold, min_load × rel_threshold).

Both conditions grow with load, so SGLang's gate (the same test on max_load) is off exactly
when no candidate is a hot spot, and then every candidate is kept. When the gate is on, SGLang
sends the request to the single least-loaded worker; this filter keeps every candidate inside
the band instead, so a prefix scorer can still pick the best-cached replica among those that
are not overloaded.

Why: pure prefix routing collapses onto one replica when many prompts share their first
blocks (a common system prompt): that replica matches best for all of them, its score stays
the highest, and load scorers of modest weight cannot outvote it. This filter bounds the
collapse whatever the scorers say: no request goes to an endpoint whose load exceeds both
min_load + abs_threshold and min_load × rel_threshold.

Never empty: the least-loaded candidate is never a hot spot (its excess over min_load is 0),
so a non-empty input always gives a non-empty output; the filter fails open by construction.

Unknown metrics (`metrics` None or `waiting` None): the load is the in-flight count alone,
which may make the endpoint look cooler than it is, but no endpoint is dropped for lack of
metrics (the load scorers price that doubt).

Parameters: `abs_threshold` (number ≥ 0, default 64) and `rel_threshold` (number ≥ 1, default
1.5; 1 disables the relative condition), SGLang's defaults, so side-by-side benchmarks compare
like with like. SGLang applies 64 to engines that batch hundreds of requests; with small
engines (CPU, a small `max_num_seqs`) lower it, or the filter will rarely act.
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
