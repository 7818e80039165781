"""`softmax-picker`: draw the target by a softmax over min-max scaled totals.

Formula: with t_i the weighted totals and lo/hi their minimum and maximum over the candidates,

    s_i = (t_i - lo) / (hi - lo)                      (so the best is 1, the worst 0)
    P(target = i) ∝ exp((s_i - 1) / temperature)

Subtracting the best scaled score (1) keeps every exponent ≤ 0, so nothing overflows and the
best candidate's weight is exactly 1; tiny temperatures underflow the others to 0 harmlessly.
When hi - lo ≤ 1e-9 (all tied, see `max_score.TIE_TOLERANCE`) the draw is uniform. A NaN
total gets weight 0. Candidates are sorted by id before the draw with `ctx.rng`, so the
result depends only on the candidate set and the RNG state. The fallbacks are all the other
candidates by total descending, ties broken at random (see `max_score.rank_by_total`).

Temperature: two candidates whose scaled scores differ by d have odds exp(d / temperature).
As temperature → 0 this becomes `max-score-picker`; as it grows the draw tends to uniform
(`random-picker`). At the default 0.1 the best is e^10 ≈ 22,026 times likelier than the
worst, and a candidate a tenth of the spread below the best is e ≈ 2.7 times less likely.

Because totals are min-max scaled, the temperature does not depend on the scorer weights, but
the spread is always stretched to [0, 1]: with two candidates the better one wins with
probability 1 / (1 + exp(-1 / temperature)) however small their difference. This mirrors the
Dynamo KV router's softmax over min-max scaled costs.

Parameters: `temperature` (> 0, default 0.1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from routing import EndpointScores, RoutingRequest, SchedulingContext
from routing.params import Bounds
from scoring.pickers.max_score import TIE_TOLERANCE, rank_by_total


class SoftmaxPicker:
    """Targets a candidate drawn by softmax over its scaled total; falls back by total."""

    @dataclass(frozen=True, slots=True)
    class Params:
        """A `softmax-picker`'s config `params` (stated in the module docstring)."""

        temperature: Annotated[float, Bounds(gt=0.0)] = 0.1

    def __init__(self, name: str, params: Params = Params()) -> None:
        if not params.temperature > 0.0:
            raise ValueError(f"temperature must be > 0, got {params.temperature!r}")
        self.name = name
        self.temperature = params.temperature

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        if len(scored) < 2:
            return [s.endpoint_id for s in scored]
        order = sorted(scored, key=lambda s: s.endpoint_id)
        weights = self.weights([s.total for s in order])
        if sum(weights) > 0.0:
            target = ctx.rng.choices(order, weights=weights)[0]
        else:
            target = ctx.rng.choice(order)
        rest = rank_by_total([s for s in scored if s is not target], ctx.rng)
        return [target.endpoint_id, *rest]

    def weights(self, totals: Sequence[float]) -> list[float]:
        """Unnormalised draw weights for `totals`: exp((scaled - 1) / temperature)."""
        known = [t for t in totals if not math.isnan(t)]
        if not known:
            return [0.0] * len(totals)
        low, high = min(known), max(known)
        spread = high - low

        def weight(total: float) -> float:
            if math.isnan(total):
                return 0.0
            if spread <= TIE_TOLERANCE:
                return 1.0
            return math.exp(((total - low) / spread - 1.0) / self.temperature)

        return [weight(t) for t in totals]
