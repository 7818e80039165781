"""`random-picker`: a uniformly random ranking, ignoring scores.

Formula: the candidate ids in sorted order, shuffled with `ctx.rng` (Fisher-Yates), so each
of the n! rankings has probability 1/n!. Sorting first makes the result depend only on the
candidate set and the RNG state, not on the order the candidates arrive in.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing import EndpointScores, RoutingRequest, SchedulingContext


class RandomPicker:
    """Ranks candidates uniformly at random using the injected RNG."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        ids = sorted(s.endpoint_id for s in scored)
        ctx.rng.shuffle(ids)
        return ids
