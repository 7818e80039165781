"""`kv-utilization-scorer`: prefer the endpoints with the most free KV cache.

Formula: with u the candidate's `metrics.kv_usage` (fraction of KV blocks in use, clamped to
[0, 1]),

    score = 1 - u

Absolute, not min-max normalised: 10 % against 20 % usage scores as a small difference (as
GIE's KV scorer does). Unknown usage (`metrics` None, `kv_usage` None or NaN): the worst known
score, or 0.5 if none is known (`scoring.scorers.unknown_metrics`).

Parameters: none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids
from scoring.scorers.unknown_metrics import fill_unknown


class KvUtilizationScorer:
    """Scores each candidate by the fraction of its KV cache that is free."""

    def __init__(self, name: str) -> None:
        self.name = name

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        free = _free_shares(endpoints)
        if free is not None:  # the usual case: one pass over the endpoints, no dict
            return ScoreColumn(endpoint_ids(endpoints), free, True)  # unit
        known: dict[str, float] = {}
        for e in endpoints:
            usage = e.metrics.kv_usage if e.metrics is not None else None
            if usage is not None and not math.isnan(usage):
                known[e.id] = 1.0 - (usage if 0.0 <= usage <= 1.0 else 0.0 if usage < 0.0 else 1.0)
        if len(known) == len(endpoints):  # all known (ids are unique): nothing to fill
            return known
        return fill_unknown(endpoints, known)


def _free_shares(endpoints: Sequence[EndpointSnapshot]) -> list[float] | None:
    """1 − usage of every endpoint if all are known and those are in [0, 1], else None.

    A usage u is in [0, 1] exactly when 1 − u is (for u > 1, 1 − u is negative), except a
    tiny negative u whose 1 − u rounds to 1.0: the clamped score, 1 − 0, all the same.
    """
    free = [
        1.0 - u if (m := e.metrics) is not None and (u := m.kv_usage) is not None else math.nan
        for e in endpoints
    ]  # NaN for an unknown usage, as for a NaN one
    if not free or math.isnan(sum(free)) or min(free) < 0.0 or max(free) > 1.0:
        return None
    return free
