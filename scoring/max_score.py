"""`max-score-picker`: rank by weighted total, best first; ties broken at random.

Formula: sort candidates by `total` descending. Walking down that order, a run of candidates
whose totals are within TIE_TOLERANCE (1e-9) of the run's first total is a tie group; each
group is shuffled with `ctx.rng`, so tied endpoints share the load instead of the
lexicographically first one always winning. A NaN total ranks last.

Parameters: none.

Beware: with scores that change slowly (e.g. between metric scrapes) max-score sends every
request to the same endpoint; pair it with a load scorer, or use `power-of-two-picker`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, Self

from routing import EndpointScores, RoutingRequest, SchedulingContext
from scoring.params import check_plugin_args

TIE_TOLERANCE = 1e-9


def rank_by_total(scored: Sequence[EndpointScores], rng: random.Random) -> list[str]:
    """Endpoint ids by total descending, each tie group shuffled with `rng`."""
    # Sorting by id as well makes the result independent of the input order.
    order = sorted(scored, key=lambda s: (-_total(s), s.endpoint_id))
    ranked: list[str] = []
    start = 0
    while start < len(order):
        head = _total(order[start])
        end = start + 1
        while end < len(order) and _tied(head, _total(order[end])):
            end += 1
        group = [s.endpoint_id for s in order[start:end]]
        if len(group) > 1:
            rng.shuffle(group)
        ranked.extend(group)
        start = end
    return ranked


def _total(s: EndpointScores) -> float:
    return -math.inf if math.isnan(s.total) else s.total


def _tied(head: float, other: float) -> bool:
    return head == other or head - other <= TIE_TOLERANCE


class MaxScorePicker:
    """Picks the endpoint with the highest weighted total; the rest follow by total."""

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def from_params(cls, name: str, params: Mapping[str, Any]) -> Self:
        check_plugin_args(name, params)
        return cls(name)

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        return rank_by_total(scored, ctx.rng)
