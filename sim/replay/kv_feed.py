"""The precise index in the simulator: each engine's KV-cache events, delivered after a delay.

As the gateway applies each engine's event batches to its `PreciseIndex`, the replay does in
virtual time: each replica's engine records its cache's changes (`EngineModel(kv_events=True)`);
when a step or a decode run ends the replay takes them as one batch and applies it
`kv_event_delay_s` later, in order per replica (`collect` queues a batch and says when it is
due, `deliver` applies the oldest). A fast-forwarded decode run publishes once, at its end.

Trace requests reach the engines as block hashes (`EngineModel.add_request_hashed`), so their
events carry no token ids and the index keys those blocks by their engine hashes; a request's
keys are then its engine block hashes (`external_hash`) in the engines' block size, its exact
prompt length is the trace's, and its keys are speculated on the chosen replica as the gateway
does. Collection is on when the policy's profile reads the precise view (`needs_precise`) or
`SimSettings.kv_events` asks for it; otherwise the engines record nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from routing.config.profiles import RoutingSection, effective_profiles
from routing.kv_events import KvEvent
from scoring.state.precise_index import PreciseIndex
from sim.engine.kv_events import external_hash

PRECISE_SCORERS = frozenset({"precise-prefix-scorer"})
"""Scorer types that read the precise index whatever their parameters."""


def needs_precise(section: RoutingSection, profile: str) -> bool:
    """Whether `profile` has a scorer that reads the precise index (`precise-prefix-scorer`,
    or any scorer with `cache_view: precise`)."""
    spec = effective_profiles(section).get(profile)
    if spec is None:
        return False
    return any(
        s.type in PRECISE_SCORERS or s.params.get("cache_view") == "precise" for s in spec.scorers
    )


def request_keys(
    engine_hashes: Sequence[int], block_size: int
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """`RoutingRequest.token_keys` of a request known by its engine block hashes."""
    return ((block_size, tuple(map(external_hash, engine_hashes))),)


class KvEventFeed:
    """Batches of KV-cache events on their way from each replica to the precise index."""

    __slots__ = ("_delay", "_ids", "_pending", "batches", "events", "index")

    def __init__(self, index: PreciseIndex, replica_ids: Sequence[str], delay_s: float) -> None:
        if not delay_s >= 0:
            raise ValueError("the KV-event delay must be >= 0")
        self.index = index
        self._ids = tuple(replica_ids)
        self._delay = delay_s
        self._pending: list[deque[list[KvEvent]]] = [deque() for _ in self._ids]
        self.batches = 0  # delivered
        self.events = 0

    def collect(self, position: int, events: list[KvEvent], now: float) -> float | None:
        """Replica `position`'s events of a step that ended at `now`: when they are due
        (None: there were none)."""
        if not events:
            return None
        self._pending[position].append(events)
        return now + self._delay

    def deliver(self, position: int) -> None:
        """Apply replica `position`'s oldest pending batch."""
        events = self._pending[position].popleft()
        self.index.apply(self._ids[position], events)
        self.batches += 1
        self.events += len(events)

    def pending(self, position: int) -> int:
        """Batches of replica `position` collected and not yet delivered."""
        return len(self._pending[position])
