"""The replicas' engines on the replay's event queue: their steps and decode runs, in virtual time.

A replica with work starts a segment (`SimReplica.start`) at a STEP_START event and ends it at
its STEP_END (one whose `token` is stale, of a run cut short since, is ignored). A request
entering an engine, or blocks a P/D prefill held being released, first applies the run in
progress up to now (`cut`), then wakes the replica if it is idle. An idle step (its waiting
requests wait for held blocks) starts no next one: a release or an arrival wakes the replica.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.replay.events import EventQueue, Kind
from sim.replay.replica import Segment, SimReplica


class Stepping:
    """Starts and ends the replicas' segments (see the module docstring)."""

    __slots__ = ("_fast_forward", "_queue", "replicas", "segments", "steps")

    def __init__(
        self, replicas: Sequence[SimReplica], queue: EventQueue, *, fast_forward: bool
    ) -> None:
        self.replicas = replicas
        self._queue = queue
        self._fast_forward = fast_forward
        self.segments = 0  # engine steps and decode runs simulated
        self.steps = 0  # engine steps they stand for

    def enter(
        self,
        now: float,
        rid: str,
        position: int,
        *,
        input_tokens: int,
        engine_hashes: Sequence[int],
        output_tokens: int,
        external_tokens: int = 0,
        hold: bool = False,
    ) -> None:
        """A request reaches the engine at `position` at `now`: it joins the next step
        (`external_tokens`, `hold`: as `EngineModel.add_request_hashed` takes them)."""
        self.cut(now, position)
        replica = self.replicas[position]
        replica.engine.add_request_hashed(
            rid,
            input_tokens,
            engine_hashes,
            output_tokens,
            external_tokens=external_tokens,
            hold=hold,
        )
        self.wake(now, position)

    def release(self, now: float, position: int, rid: str) -> None:
        """The engine at `position` frees the blocks it held for `rid` (a P/D prefill's)."""
        self.cut(now, position)
        engine = self.replicas[position].engine
        engine.release(rid)
        if engine.has_work():
            self.wake(now, position)

    def cut(self, now: float, position: int) -> None:
        """Apply the replica's decode run in progress up to `now` (it then ends after the
        step under way), before its engine changes or is read."""
        replica = self.replicas[position]
        new_end = replica.cut(now)
        if new_end is not None:
            self._queue.push(new_end, Kind.STEP_END, position, replica.event_token)

    def cut_all(self, now: float) -> None:
        """`cut` every replica: their KV caches as stepping one step at a time would leave
        them (what the oracle reads)."""
        for position in range(len(self.replicas)):
            self.cut(now, position)

    def wake(self, now: float, position: int) -> None:
        """A step starts at `now` unless one runs or is due."""
        replica = self.replicas[position]
        if not replica.busy and not replica.start_pending:
            replica.start_pending = True
            self._queue.push(now, Kind.STEP_START, position)

    def start(self, now: float, position: int) -> None:
        """STEP_START: the next step or decode run, if there is work."""
        replica = self.replicas[position]
        replica.start_pending = False
        if replica.busy or not replica.engine.has_work():
            return
        end = replica.start(now, self._fast_forward)
        self._queue.push(end, Kind.STEP_END, position, replica.event_token)

    def end(self, position: int, token: int) -> Segment | None:
        """STEP_END: the segment that ends (None: a stale event)."""
        replica = self.replicas[position]
        if token != replica.event_token or not replica.busy:
            return None  # superseded: the run was cut short
        segment = replica.finish()
        self.segments += 1
        self.steps += segment.steps
        return segment

    def resume(self, now: float, position: int, segment: Segment) -> None:
        """After `segment`'s tokens went out: the next step starts now if there is work and
        the segment was not idle."""
        replica = self.replicas[position]
        idle = segment.result is not None and segment.result.idle
        if replica.engine.has_work() and not idle:
            replica.start_pending = True
            self._queue.push(now, Kind.STEP_START, position)
