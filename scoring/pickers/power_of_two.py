"""`power-of-two-picker`: power of two choices over the weighted totals.

Formula: sample two distinct candidates uniformly with `ctx.rng`; the target is the one with
the higher total (a tie within 1e-9 is broken at random). The fallbacks are all the other
candidates, the losing sample included, by total descending with random tie-breaks (see
`max_score.rank_by_total`). With one candidate, that candidate is the ranking.

Why: always taking the maximum herds every request onto one endpoint until its score is
refreshed; comparing two random choices still avoids bad endpoints (the worst candidate is
never the target unless it ties) while spreading load (the best is the target with
probability 2/n).

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing import EndpointScores, RoutingRequest, SchedulingContext
from scoring.pickers.max_score import rank_by_total


class PowerOfTwoPicker:
    """Targets the better of two random candidates; falls back by total."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        if len(scored) < 2:
            return [s.endpoint_id for s in scored]
        by_id = {s.endpoint_id: s for s in scored}
        first, second = ctx.rng.sample(sorted(by_id), 2)
        target = rank_by_total([by_id[first], by_id[second]], ctx.rng)[0]
        rest = rank_by_total([s for s in scored if s.endpoint_id != target], ctx.rng)
        return [target, *rest]
