"""Simulated gateways' load, shared: their in-flight requests and queued prefill per replica.

Every change a gateway makes to these counts is a `LoadChange` (±1 in flight on a dispatch or a
completion, ± the request's predicted uncached prompt tokens on a dispatch or its first token);
`SharedLoad.apply` adds it to each other gateway's counters for that replica
(`sim.replay.gateways.ReplicaView`), which its scheduler sees as the replica's load. These
counts are not `Mirror` events: they go beside them (`sim.replay.sharing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.replay.gateways import Counters


@dataclass(frozen=True, slots=True)
class LoadChange:
    """A change one gateway made to its counts for the replica at `position`."""

    position: int
    in_flight: int = 0
    pending_prefill_tokens: int = 0


class SharedLoad:
    """Adds each gateway's load changes to the other gateways' counters."""

    __slots__ = ("_views",)

    def __init__(self, views: Sequence[Sequence[Counters]]) -> None:
        """`views[g][position]`: gateway g's counters for each replica."""
        self._views = views

    def apply(self, source: int, change: LoadChange) -> None:
        """Gateway `source` made `change`: every other gateway counts it too."""
        for g, views in enumerate(self._views):
            if g == source:
                continue
            view = views[change.position]
            view.in_flight += change.in_flight
            view.pending_prefill_tokens += change.pending_prefill_tokens
