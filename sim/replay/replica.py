"""One simulated replica: its engine model on the virtual clock, and what a scrape of it sees.

The engine works in *segments*: a single step (`EngineModel.step()`, applied when it starts)
or a fast-forwarded decode run (`DecodeRun`, planned when it starts and applied when it ends,
or cut short when a request is routed here meanwhile: the steps that started before the
arrival are applied, the rest dropped and planned again).

Metrics are published at step ends, as vLLM updates its gauges once per engine step: a scrape
at time s sees the state after the last step that ended at or before s (requests that
arrived during that step are not counted yet). Within a decode run only the free KV blocks
change, and `DecodeRun.free_blocks_after` gives them for any step, so a run is never cut
for a scrape. A few recent segments are kept to answer scrapes a little in the past.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from routing.types import EngineMetrics
from scoring.state.prefix_feed import kv_tokens
from sim.engine.decode_run import DecodeRun
from sim.engine.model import EngineModel
from sim.engine.types import StepResult


class Gauges(NamedTuple):
    """What a scrape reads: queue, batch and free KV blocks (a tuple: made per segment)."""

    waiting: int
    running: int
    free_blocks: int


@dataclass(slots=True)
class Segment:
    start: float
    end: float
    run: DecodeRun | None  # None: a single step
    steps: int  # of `run` to apply (fewer than planned once cut short)
    before: Gauges  # at the start (for a run: what every step keeps but the free blocks)
    after: Gauges | None = None  # once applied
    result: StepResult | None = None  # a single step's tokens, delivered at its end
    finished: tuple[str, ...] = ()  # a run's finished requests, once applied


class ApiServer:
    """An engine's API server: serial work in front of its engine (or its data-parallel ranks)."""

    __slots__ = ("free_at",)

    def __init__(self) -> None:
        self.free_at = 0.0  # when it has worked through its queue


class SimReplica:
    """An engine model, its timeline, and the gateway's own counters for it."""

    def __init__(
        self,
        replica_id: str,
        engine: EngineModel,
        scrape_phase_s: float,
        api_server: ApiServer | None = None,
    ) -> None:
        self.id = replica_id
        self.url = f"sim://{replica_id}"
        self.engine = engine
        self.scrape_phase_s = scrape_phase_s
        # The gateway's own view (health.pool.Backend's fields of the same names).
        self.in_flight = 0
        self.dispatched = 0
        self.pending_prefill_tokens = 0
        self.busy_s = 0.0  # virtual seconds spent in steps
        self.api_server = api_server or ApiServer()  # data-parallel ranks share one
        self.current: Segment | None = None
        self.start_pending = False
        self.event_token = 0  # bumped when the current segment's end moves
        self._history: deque[Segment] = deque()
        self._initial = self._gauges()
        self._metrics_cache: tuple[float, EngineMetrics] | None = None

    def through_frontend(self, now: float, frontend_s: float) -> float:
        """When a request dispatched `now` reaches the engine, past its API server's queue
        (`frontend_s` of serial work a request; `sim.engine.types.FrontEnd`)."""
        server = self.api_server
        server.free_at = max(now, server.free_at) + frontend_s
        return server.free_at

    def kv_tokens(self) -> int | None:
        """Its KV capacity in tokens."""
        config = self.engine.config
        return kv_tokens(config.num_blocks, config.block_size)

    def _gauges(self) -> Gauges:
        return Gauges._make(self.engine.load())

    @property
    def busy(self) -> bool:
        return self.current is not None

    def start(self, now: float, fast_forward: bool) -> float:
        """Begin the next step or decode run at `now`; returns when it ends."""
        before = self._gauges()
        run = self.engine.plan_decode_run() if fast_forward else None
        if run is not None:
            segment = Segment(now, now + run.duration_s(), run, run.steps, before)
        else:
            result = self.engine.step()
            segment = Segment(now, now + result.duration_s, None, 1, before, result=result)
            segment.after = self._gauges()
        self.current = segment
        self._history.append(segment)
        self.event_token += 1
        return segment.end

    def cut(self, now: float) -> float | None:
        """A request is routed here at `now`: a decode run ends after the step in progress
        (and is applied now, before the engine takes the request). Returns the run's new end,
        or None if the end did not move."""
        segment = self.current
        if segment is None or segment.run is None or segment.after is not None:
            return None
        steps = segment.run.steps_started_before(segment.start, now)
        moved = steps < segment.steps
        if moved:
            segment.steps = steps
            segment.end = segment.start + segment.run.start_s(steps)
            self.event_token += 1
        self._apply(segment)
        return segment.end if moved else None

    def finish(self) -> Segment:
        """The current segment ends: apply it if it is a run, and hand it over."""
        segment = self.current
        assert segment is not None
        if segment.after is None:
            self._apply(segment)
        self.current = None
        self.busy_s += segment.end - segment.start
        return segment

    def _apply(self, segment: Segment) -> None:
        assert segment.run is not None
        segment.finished = self.engine.apply_decode_run(segment.run, segment.steps)
        segment.after = self._gauges()

    def gauges_at(self, s: float) -> Gauges:
        """The gauges as published by the last step that ended at or before `s`."""
        for segment in reversed(self._history):
            if segment.start > s:
                continue
            if s >= segment.end:
                assert segment.after is not None
                return segment.after
            run = segment.run
            if run is not None:
                done = run.steps_ended_by(segment.start, s)
                if done:
                    b = segment.before
                    return Gauges(b.waiting, b.running, run.free_blocks_after(done))
            # s falls in the segment's first step: the previous segment's end state holds.
        return self._initial

    def metrics_at(self, s: float) -> EngineMetrics:
        """EngineMetrics as a scrape at `s` reads them (vLLM's gauges)."""
        cached = self._metrics_cache
        if cached is not None and cached[0] == s:
            return cached[1]
        g = self.gauges_at(s)
        config = self.engine.config
        metrics = EngineMetrics(
            scraped_at=s,
            waiting=g.waiting,
            running=g.running,
            kv_usage=1.0 - g.free_blocks / config.num_blocks,
            block_size=config.block_size,
            num_blocks=config.num_blocks,
        )
        self._metrics_cache = (s, metrics)
        return metrics

    def forget_before(self, s: float) -> None:
        """Scrapes will not ask about times before `s`: drop what only those needed."""
        history = self._history
        while len(history) >= 2 and history[1].end <= s and history[1].after is not None:
            history.popleft()
