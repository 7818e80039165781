"""`weighted-random-picker`: draw the target with probability proportional to its total.

Formula: with t_i the weighted total of candidate i (a NaN or negative total counts as 0),

    P(target = i) = t_i / sum_j t_j,   or 1/n for every candidate when every t_j is 0.

The draw uses `ctx.rng` over the candidates sorted by id, so it depends only on the candidate
set and the RNG state; the fallbacks are the others by total descending, ties broken at random
(`max_score.rank_by_total`). Unlike `max-score-picker` it spreads a burst between scrapes in
proportion to how good each endpoint looks, at the price of giving a clearly worse one its
share (totals 0.9 and 0.6 split 60/40); `softmax-picker` is sharper.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing import EndpointScores, RoutingRequest, SchedulingContext
from scoring.pickers.max_score import rank_by_total


class WeightedRandomPicker:
    """Targets a candidate drawn in proportion to its total; falls back by total."""

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
        order = sorted(scored, key=lambda s: s.endpoint_id)
        weights = [_weight(s.total) for s in order]
        if sum(weights) > 0.0:
            target = ctx.rng.choices(order, weights=weights)[0]
        else:
            target = ctx.rng.choice(order)
        rest = rank_by_total([s for s in scored if s is not target], ctx.rng)
        return [target.endpoint_id, *rest]


def _weight(total: float) -> float:
    return total if total > 0.0 else 0.0  # NaN compares false, so it counts as 0 too
