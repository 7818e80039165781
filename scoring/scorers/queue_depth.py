"""`queue-depth-scorer`: prefer the endpoints with the fewest requests waiting in the engine.

Formula (GIE's queue scorer): with w the candidate's `metrics.waiting` and min/max taken over
the candidates whose `waiting` is known,

    score = (max - w) / (max - min),   or 1.0 for every known candidate when max == min.

Unlike the gateway's in-flight count, `waiting` includes traffic from other routers and
clients, but it is only as fresh as the last scrape. Unknown `waiting` (or `metrics` None):
the worst known score, or 0.5 if none is known (`scoring.scorers.unknown_metrics`).

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext
from scoring.scorers.unknown_metrics import fill_unknown


def inverse_min_max(values: Mapping[str, float]) -> dict[str, float]:
    """(max - x) / (max - min) per key, or 1.0 for every key when all values are equal."""
    if not values:
        return {}
    high, low = max(values.values()), min(values.values())
    if high == low:
        return dict.fromkeys(values, 1.0)
    return {key: (high - x) / (high - low) for key, x in values.items()}


class QueueDepthScorer:
    """Min-max normalised inverse of each candidate's engine waiting queue."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        waiting = {
            e.id: float(e.metrics.waiting)
            for e in endpoints
            if e.metrics is not None and e.metrics.waiting is not None
        }
        scores = inverse_min_max(waiting)
        if len(scores) == len(endpoints):  # all known (ids are unique): nothing to fill
            return scores
        return fill_unknown(endpoints, scores)
