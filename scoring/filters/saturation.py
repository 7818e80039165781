"""`saturation-filter`: drop endpoints whose engine reports a long queue or a nearly full cache.

Formula: a candidate is saturated when its engine metrics are known and

    metrics.waiting > queue_threshold   or   metrics.kv_usage > kv_threshold

(a field the engine does not report is not evidence). The filter keeps the unsaturated
candidates in input order. Comparisons are strict, as in GIE's saturation detector: up to 5
waiting and 80 % KV usage still count as capacity; `kv_threshold: 1.0` disables the cache
check. Fails open: if every candidate is saturated, all are returned (holding or shedding is
admission control's job; the scorers still rank them). Unknown metrics (`metrics` None) are
not saturation: a filter's verdict is final, so only evidence removes an endpoint (GIE, which
decides whether to admit at all, is pessimistic); the load scorers price the doubt.

Parameters: `queue_threshold` (number ≥ 0, default 5), `kv_threshold` (in [0, 1], default 0.8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext
from routing.params import Bounds


class SaturationFilter:
    """Removes endpoints whose waiting queue or KV usage is over its threshold."""

    @dataclass(frozen=True, slots=True)
    class Params:
        """A `saturation-filter`'s config `params` (stated in the module docstring)."""

        queue_threshold: Annotated[float, Bounds(ge=0.0)] = 5.0
        kv_threshold: Annotated[float, Bounds(ge=0.0, le=1.0)] = 0.8

    def __init__(self, name: str, params: Params = Params()) -> None:
        self.name = name
        self.queue_threshold = params.queue_threshold
        self.kv_threshold = params.kv_threshold

    def filter(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Sequence[EndpointSnapshot]:
        queue, kv = self.queue_threshold, self.kv_threshold
        # `saturated` inlined: this runs for every candidate of every request.
        kept = [
            e
            for e in endpoints
            if (m := e.metrics) is None
            or not (
                (m.waiting is not None and m.waiting > queue)
                or (m.kv_usage is not None and m.kv_usage > kv)
            )
        ]
        return kept if 0 < len(kept) < len(endpoints) else endpoints  # all or none: as it is

    def saturated(self, endpoint: EndpointSnapshot) -> bool:
        """Whether the endpoint's known metrics put it over either threshold."""
        m = endpoint.metrics
        if m is None:
            return False
        queue_full = m.waiting is not None and m.waiting > self.queue_threshold
        cache_full = m.kv_usage is not None and m.kv_usage > self.kv_threshold  # NaN: False
        return queue_full or cache_full
