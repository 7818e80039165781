"""`precise-prefix-scorer`: the share of the prompt an endpoint holds in its KV cache, exactly
where the engine publishes KV-cache events.

Formula: score(e) = `CacheView.share_list` — for an endpoint whose events reach the
`PreciseIndex`, with the request's token keys k_0..k_{n−1} (its tokenizer-exact blocks of the
engine's block size) and d_e the leading keys e holds or was sent within the speculation
window, score(e) = d_e ÷ n; for any other endpoint (no events, or no tokenizer configured for
the model) the approximate `prefix-match-scorer` formula over the `PrefixIndex`. A request
with neither keys nor hashes scores 0 everywhere (neutral).

Parameters: none (the cache view is injected at registration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from routing import EndpointSnapshot, RoutingRequest, SchedulingContext, ScoreColumn, endpoint_ids
from scoring.state.cache_view import CacheView


class PrecisePrefixScorer:
    """Scores endpoints by the exactly known cached share of the request's prompt."""

    def __init__(self, name: str, view: CacheView) -> None:
        self.name = name
        self._view = view

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        ids = endpoint_ids(endpoints)
        return ScoreColumn(ids, self._view.share_list(request, ids, ctx.clock()), True)  # unit
