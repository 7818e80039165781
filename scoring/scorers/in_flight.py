"""`in-flight-scorer`: prefer the endpoints with the fewest requests in flight.

Formula: with x the candidate's `in_flight` (requests the gateway dispatched to it and has
not seen finish) plus its `remote_in_flight` (the other gateway replicas' requests there, as
their shared leases last said; 0 without `state:` redis) and min/max taken over the
candidates,

    score = (max - x) / (max - min),   or 1.0 for every candidate when max == min.

The least-loaded candidate scores 1.0 and the most-loaded 0.0. The count is the gateway's
own (the remote part at most a lease period old), so it is fresher than scraped engine
metrics.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids


class InFlightScorer:
    """Min-max normalised inverse of each candidate's in-flight request count."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        if not endpoints:
            return {}
        ids = endpoint_ids(endpoints)
        counts = [e.in_flight + e.remote_in_flight for e in endpoints]
        # Counts take few distinct values: min, max and each one's score once, then a lookup
        # per endpoint. (high − x) / (high − low) is in [0, 1] for low <= x <= high.
        distinct = set(counts)
        high, low = max(distinct), min(distinct)
        if high == low:
            return ScoreColumn(ids, [1.0] * len(ids), True)  # unit
        span = high - low
        score_of = {x: (high - x) / span for x in distinct}
        return ScoreColumn(ids, list(map(score_of.__getitem__, counts)), True)  # unit
