"""`kv-utilization-scorer`: prefer the endpoints with the most free KV cache.

Formula: with u the candidate's `metrics.kv_usage` (fraction of KV blocks in use, clamped to
[0, 1]),

    score = 1 - u

so an empty cache scores 1.0 and a full one 0.0. The score is absolute, not min-max
normalised: 10 % against 20 % usage is a small difference and scores as one (GIE's KV scorer
does the same).

Unknown metrics (`metrics` None, `kv_usage` None or NaN): the endpoint scores the worst score
among the candidates whose usage is known, or 0.5 if none is known (see
`scoring.unknown_metrics`): an unscraped or stale endpoint never outranks a known one here.

Parameters: none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Self, cast

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids
from scoring.params import check_plugin_args
from scoring.unknown_metrics import fill_unknown


class KvUtilizationScorer:
    """Scores each candidate by the fraction of its KV cache that is free."""

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def from_params(cls, name: str, params: Mapping[str, Any]) -> Self:
        check_plugin_args(name, params)
        return cls(name)

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        usages = _usages_in_range(endpoints)
        if usages is not None:  # the usual case: a pass per endpoint, no dict
            return ScoreColumn(endpoint_ids(endpoints), [1.0 - u for u in usages], unit=True)
        known: dict[str, float] = {}
        for e in endpoints:
            usage = e.metrics.kv_usage if e.metrics is not None else None
            if usage is not None and not math.isnan(usage):
                known[e.id] = 1.0 - (usage if 0.0 <= usage <= 1.0 else 0.0 if usage < 0.0 else 1.0)
        if len(known) == len(endpoints):  # all known (ids are unique): nothing to fill
            return known
        return fill_unknown(endpoints, known)


def _usages_in_range(endpoints: Sequence[EndpointSnapshot]) -> list[float] | None:
    """Every endpoint's KV usage if all are known and in [0, 1], else None."""
    usages = [m.kv_usage if (m := e.metrics) is not None else None for e in endpoints]
    if not usages or None in usages:
        return None
    known = cast(list[float], usages)
    if math.isnan(sum(known)) or min(known) < 0.0 or max(known) > 1.0:  # NaN or out of range
        return None
    return known
