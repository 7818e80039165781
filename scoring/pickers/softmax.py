"""`softmax-picker`: draw the target by a softmax over min-max scaled totals.

Formula: with t_i the weighted totals and lo/hi their minimum and maximum over the candidates,

    s_i = (t_i - lo) / (hi - lo)                      (so the best is 1, the worst 0)
    P(target = i) ∝ exp((s_i - 1) / temperature)      (exponents ≤ 0: no overflow)

Uniform when hi - lo ≤ 1e-9 (`max_score.TIE_TOLERANCE`); a NaN total weighs 0. Drawn with
`ctx.rng` over the candidates sorted by id; the fallbacks are the others by total descending,
ties broken at random (`max_score.rank_by_total`). Scaled scores d apart have odds
exp(d / temperature): towards 0 this is `max-score-picker`, large it is `random-picker`.
Scaling frees the temperature from the scorer weights but stretches any spread to [0, 1]: the
better of two wins 1 / (1 + exp(-1 / temperature)) however close (as in Dynamo's KV router).

Parameters: `temperature` (> 0, default 0.1: the best e^10 ≈ 22,026 times likelier than the worst).
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
