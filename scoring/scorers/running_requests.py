"""`running-requests-scorer`: prefer the endpoints running the fewest requests.

Formula: with r the candidate's `metrics.running` (requests in the engine's running batch) and
min/max taken over the candidates whose `running` is known,

    score = (max - r) / (max - min),   or 1.0 for every known candidate when max == min.

A smaller batch means faster decode steps; pair this with `queue-depth-scorer`, since a full
batch shows its overload in `waiting`, not here. Unknown `running` (or `metrics` None): the
worst known score, or 0.5 if none is known (`scoring.scorers.unknown_metrics`).

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext
from scoring.scorers.queue_depth import inverse_min_max
from scoring.scorers.unknown_metrics import fill_unknown


class RunningRequestsScorer:
    """Min-max normalised inverse of each candidate's engine running batch size."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        running = {
            e.id: float(e.metrics.running)
            for e in endpoints
            if e.metrics is not None and e.metrics.running is not None
        }
        return fill_unknown(endpoints, inverse_min_max(running))
