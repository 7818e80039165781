"""`round-robin-picker`: rotate through the candidates in id order, ignoring scores.

Formula: with the n candidate ids sorted, and c the number of picks this instance has made,
the ranking is ids[c mod n], ids[c mod n + 1], ..., wrapping around; the target is the first,
the fallbacks are the rest of the rotation. The counter advances by one per pick.

Parameters: none.

State: the counter lives in the instance. That is acceptable because the scheduler builds one
instance per profile (no sharing between profiles or gateways), and the rotation is a pure
function of the number of earlier picks and the candidate ids, so a replay or simulation that
feeds the same requests in the same order gets the same decisions. When the candidate set
changes, the counter is applied to the new set, which keeps the spread even over time.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing import EndpointScores, RoutingRequest, SchedulingContext, ScoreTable


class RoundRobinPicker:
    """Ranks candidates in a rotation that advances once per pick."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._picks = 0

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]:
        # The scheduler's table has the ids: no per-endpoint rows to build.
        ids = sorted(
            scored.ids if isinstance(scored, ScoreTable) else (s.endpoint_id for s in scored)
        )
        if not ids:
            return []
        start = self._picks % len(ids)
        self._picks += 1
        return ids[start:] + ids[:start]
