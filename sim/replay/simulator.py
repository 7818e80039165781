"""The discrete-event replay: a trace, through the gateway's routing, onto simulated engines.

One virtual clock and one event heap (`events`): trace arrivals, and each replica's steps or
fast-forwarded decode runs (`stepping`). Each arrival is routed by the stack
`scoring.stack.build_routing_stack` builds from the gateway's `routing:` section, on what a live
gateway would see (`scrapes`): scraped metrics, its own in-flight counts and pending prefill, the
prefix index and TTFT model its `PrefixFeed` feeds, and the precise index fed the engines' KV
events late (`kv_feed`). `SimSettings.gateways` > 1 spreads requests over gateways (`gateways`,
`sharing`); `oracle[:<profile>]` reads perfect signals; a `ClosedLoop` makes `users` users send
each turn `think_s` after the last; a `ReplayObserver` sees every decision, first token and
completion (docs/architecture.md, "The replay"); on a P/D pool, `disaggregation` runs the legs.

A request reaches its engine at once or after an API server's queue (`frontend_s`); its TTFT and
latency run from its arrival at the gateway to its token's end of step, plus `request_overhead_s`
and `gateway_overhead_s` (+ `gateway_overhead_token_s` a prompt token).
"""

from __future__ import annotations

import gc
import math
import random
from array import array
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Protocol

from routing import PluginRegistry
from routing.traces import TraceRequest
from routing.types import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest
from scoring.pd.planner import decide
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_feed import Dispatch
from sim.engine.types import EngineProfile
from sim.replay.blocks import engine_block_hashes, routing_prefix_hashes
from sim.replay.closed_loop import ClosedLoop, turns_of
from sim.replay.data_parallel import Target, balanced_endpoints, build_fleet
from sim.replay.disaggregation import PdFlow
from sim.replay.events import EventQueue, Kind
from sim.replay.flight import Flight
from sim.replay.gateways import Counters, Spread, build_gateways
from sim.replay.kv_feed import KvEventFeed, needs_precise, request_keys
from sim.replay.oracle_index import EngineCacheIndex
from sim.replay.outcomes import LatencyHistogram, ReplayResult, RequestLog, Timeline
from sim.replay.replica import Segment
from sim.replay.scrapes import Scrapes
from sim.replay.settings import PolicySpec, SimSettings
from sim.replay.sharing import StateSharing
from sim.replay.stepping import Stepping

DEFAULT_MODEL = "sim"
CLOSED_LOOP_SPAN_S = 60.0  # a closed loop's timeline: samples every span / timeline_points
Progress = Callable[[float, int, int], None]  # (virtual time, requests done, total)


class ReplayObserver(Protocol):
    """Sees the gateway-facing events of a replay, in order (for differential tests)."""

    def decided(
        self,
        now: float,
        request: RoutingRequest,
        snapshots: Sequence[EndpointSnapshot],
        scraped: Sequence[EngineMetrics | None],
        decision: Decision,
    ) -> None:
        """`request` was routed; `scraped`: each replica's last scrape, stale or not."""

    def first_token(self, now: float, request_id: str) -> None: ...

    def finished(self, now: float, request_id: str) -> None: ...


class Replay:
    """One policy over one trace (see the module docstring). Call `run()` once."""

    def __init__(
        self,
        trace: Sequence[TraceRequest],
        policy: str,
        profile: EngineProfile,
        settings: SimSettings,
        *,
        register: Callable[[PluginRegistry], None] | None = None,
        progress: Progress | None = None,
        progress_every: int = 4096,
        observer: ReplayObserver | None = None,
        loop: ClosedLoop | None = None,
    ) -> None:
        if loop is None and any(a.arrival_s > b.arrival_s for a, b in pairwise(trace)):
            raise ValueError("the trace must be in arrival order")
        self._loop = loop
        self._turn_of = turns_of(loop, len(trace))
        self._next_chat = 0  # the next chat a free user takes
        self.now = 0.0
        self._trace = trace
        self._spec = PolicySpec.parse(policy)
        self._settings = settings
        # The lead-in (`SimSettings.measure_from_s`): unmeasured arrivals, routed thus.
        self._measure_from = settings.measure_from_s
        lead_in = settings.lead_in_policy or policy
        self._lead_in = PolicySpec.parse(lead_in).profile
        self._hits_before: tuple[int, int] | None = None  # prefix queries, hits then
        self._progress = progress
        self._progress_every = progress_every
        self._observer = observer
        rng = random.Random(settings.seed)
        section = settings.routing
        kv_events = settings.kv_events
        if kv_events is None:
            kv_events = needs_precise(section, self._spec.profile) or needs_precise(
                section, self._lead_in
            )
        self.replicas = build_fleet(profile, settings, rng, kv_events=kv_events)  # the engines
        # What the gateways route to: the engines, or data-parallel endpoints balancing ranks.
        self._endpoints = balanced_endpoints(self.replicas, settings, oracle=self._spec.oracle)
        self.targets: list[Target] = [*(self._endpoints or self.replicas)]
        self.precise = PreciseIndex()
        self.kv_feed = self._kv_feed() if kv_events else None
        self._position = {r.id: i for i, r in enumerate(self.targets)}
        self._scrapes = Scrapes(
            self.targets,
            settings.scrape_interval_s,
            settings.stale_after_s,
            oracle=self._spec.oracle,
        )
        self._oracle_index: EngineCacheIndex | None = None
        if self._spec.oracle:
            self._oracle_index = EngineCacheIndex({r.id: r.engine for r in self.replicas})
        self.gateways = build_gateways(
            settings,
            self._clock,
            rng,
            self.targets,
            index=self._oracle_index,
            register=register,
            precise=self.precise,
        )
        self.stack = self.gateways[0].stack
        _known(self.stack.scheduler.profiles, {policy: self._spec.profile, lead_in: self._lead_in})
        many = settings.gateways > 1
        self._spread = Spread(settings.gateways, settings.spread) if many else None
        self.sharing = self._state_sharing() if many and settings.shared else None
        self._cpt = section.prefix.chars_per_token
        self._frontend = profile.frontend
        # From the engine's first (and last) token to the client's: added to TTFT and latency.
        self._outside = (
            profile.frontend.request_overhead_s + settings.gateway_overhead_s,
            settings.gateway_overhead_token_s,
        )
        self._queue = EventQueue()
        self._engines = Stepping(self.replicas, self._queue, fast_forward=settings.fast_forward)
        self._live: dict[str, Flight] = {}
        self._pd = self._pd_flow(settings.roles(), profile) if settings.prefill else None
        self._log = RequestLog()
        self._itl = LatencyHistogram()
        self._timeline = Timeline(
            hit_rate=[_floats() for _ in self.replicas], load=[_ints() for _ in self.replicas]
        )
        self._rejected = self._next = 0
        self._last_token_at = 0.0

    def _clock(self) -> float:
        return self.now

    def _kv_feed(self) -> KvEventFeed:
        """Each engine's KV events, for the target they belong to (a rank-unaware gateway
        files a data-parallel engine's ranks under their endpoint)."""
        n = self._settings.data_parallel_size
        ends = self._endpoints
        ids = [(ends[e // n] if ends else r).id for e, r in enumerate(self.replicas)]
        return KvEventFeed(self.precise, ids, self._settings.kv_event_delay_s)

    def _state_sharing(self) -> StateSharing:
        settings = self._settings
        return StateSharing(
            self.gateways,
            settings.sync_delay_s,
            settings.routing.ttft.learn,
            self._sync_due,
            self._scrapes.kv_tokens,
        )

    def _pd_flow(self, roles: Sequence[str], profile: EngineProfile) -> PdFlow:
        return PdFlow(
            self,
            queue=self._queue,
            engines=self._engines,
            roles=roles,
            gateways=self.gateways,
            flights=self._live,
            profile=profile,
            section=self._settings.disaggregation,
        )

    def run(self) -> ReplayResult:
        # A replay makes and drops millions of containers but no reference cycles (what a
        # run leaves unreachable does not grow with the trace), so reference counting frees
        # everything and the cyclic collector would only re-scan the trace and the caches.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if enabled:
                gc.enable()

    def _run(self) -> ReplayResult:
        queue = self._queue
        if self._trace:
            if self._loop is None:
                queue.push(self._trace[0].arrival_s, Kind.ARRIVAL)
                span = max(self._trace[-1].arrival_s, 1e-3)
            else:
                for _ in range(self._loop.users):
                    self._next_chat_of_user(0.0)
                span = CLOSED_LOOP_SPAN_S  # not known ahead: samples at this span's pace
            self._sample_every = span / max(1, self._settings.timeline_points)
            queue.push(0.0, Kind.SAMPLE)
        handlers = [  # by Kind
            self._step_end,
            self._kv_events,
            self._sync,
            self._arrival,
            self._handoff,
            self._engine_arrival,
            self._transfer_end,
            self._step_start,
            self._sample,
        ]
        events = 0
        while queue:
            self.now, kind, subject, token = queue.pop()
            handlers[kind](subject, token)
            events += 1
            if self._progress is not None and events % self._progress_every == 0:
                self._progress(self.now, len(self._log), len(self._trace))
        return self._result()

    # -- events ---------------------------------------------------------------------------

    def _arrival(self, subject: int, _token: int) -> None:
        if self._loop is None:
            i = self._next
            if i + 1 < len(self._trace):
                self._queue.push(self._trace[i + 1].arrival_s, Kind.ARRIVAL)
        else:
            i = subject
        self._next += 1  # arrivals so far
        request = self._trace[i]
        if self._hits_before is None and self.now >= self._measure_from > 0:
            self._hits_before = self._prefix_counts()
        config = self.replicas[0].engine.config
        output = max(1, request.output_tokens)
        needed = -(-(request.input_tokens + output - 1) // config.block_size)
        if (
            request.input_tokens < 1
            or request.input_tokens + output > config.max_model_len
            or needed > config.num_blocks
        ):
            self._rejected += self.now >= self._measure_from
            self._turn_done(i)
            return
        self._dispatch(i, request, output)

    def _turn_done(self, i: int) -> None:
        """Closed loop: trace request `i` is done; its user sends the chat's next turn after
        the think time, or takes the next chat."""
        loop = self._loop
        if loop is None:
            return
        chat, turn = self._turn_of[i]
        turns = loop.chats[chat]
        seen = self.now + self._outside_s(i)  # the user sees the last token this much later
        if turn + 1 < len(turns):
            self._queue.push(seen + loop.think_s, Kind.ARRIVAL, turns[turn + 1])
        else:
            self._next_chat_of_user(seen)

    def _next_chat_of_user(self, at: float) -> None:
        assert self._loop is not None
        chats = self._loop.chats
        while self._next_chat < len(chats) and not chats[self._next_chat]:
            self._next_chat += 1  # a chat without turns is done at once
        if self._next_chat < len(chats):
            self._queue.push(at, Kind.ARRIVAL, chats[self._next_chat][0])
            self._next_chat += 1

    def _dispatch(self, i: int, request: TraceRequest, output: int) -> None:
        rid = str(i)
        g = 0 if self._spread is None else self._spread.pick(request)
        gateway = self.gateways[g]
        block_size = self.replicas[0].engine.config.block_size
        engine_hashes = engine_block_hashes(request, block_size, salt=i)
        kv_feed = self.kv_feed
        routing_request = RoutingRequest(
            model=request.model or DEFAULT_MODEL,
            request_id=rid,
            prefix_hashes=routing_prefix_hashes(request),
            prefix_block_chars=max(1, round(request.block_tokens * self._cpt)),
            token_estimate=request.input_tokens,
            session_key=request.session,
            prompt_tokens=request.input_tokens if kv_feed is not None else 0,
            token_keys=request_keys(engine_hashes, block_size) if kv_feed is not None else (),
        )
        self.prepare(i, routing_request, engine_hashes)
        snapshots = self._scrapes.snapshots(routing_request.model, gateway, self.now)
        decision, plan = decide(
            gateway.planner,
            gateway.stack.scheduler,
            routing_request,
            snapshots,
            disaggregated=any(e.role == "prefill" for e in snapshots),
            profile=self._spec.profile if self.now >= self._measure_from else self._lead_in,
        )
        assert decision.target is not None  # filters fail open; every replica is healthy
        if self._observer is not None:
            self._observer.decided(
                self.now, routing_request, snapshots, self._scrapes.scraped(self.now), decision
            )
        if plan is not None:
            assert self._pd is not None
            if self._pd.route(
                i, routing_request, plan, hashes=engine_hashes, gateway=g, output=output
            ):
                return
        position = self._position[decision.target]
        dispatch = self.send(g, position, routing_request)
        engine = self._endpoints[position].choose() if self._endpoints else position
        live = Flight(position, self.now, dispatch, output, g, engine=engine)
        self._live[rid] = live
        if self._frontend.frontend_s > 0:
            live.hashes = engine_hashes
            at = self.replicas[engine].through_frontend(self.now, self._frontend.frontend_s)
            self._queue.push(at, Kind.ENGINE_ARRIVAL, i)
        else:
            self._engines.enter(
                self.now,
                rid,
                engine,
                input_tokens=request.input_tokens,
                engine_hashes=engine_hashes,
                output_tokens=output,
            )

    def prepare(self, i: int, request: RoutingRequest, engine_hashes: Sequence[int]) -> None:
        """The oracle's index reads the engines for trace request `i` (routed as `request`)
        now, as stepping one step at a time would leave them; nothing for other policies."""
        if self._oracle_index is None:
            return
        self._engines.cut_all(self.now)
        r = self._trace[i]
        self._oracle_index.prepare(
            request.prefix_hashes, engine_hashes, r.input_tokens, r.block_tokens
        )

    def send(
        self,
        g: int,
        position: int,
        request: RoutingRequest,
        *,
        leg: str = "whole",
        record: bool = True,
    ) -> Dispatch[Counters]:
        """Gateway `g` dispatches `request` (or a P/D leg of it) to the replica at `position`:
        its prefix feed, the precise index's speculation, its counters, the shared state."""
        gateway = self.gateways[g]
        replica = self.targets[position]
        view = gateway.views[position]
        now = self.now
        dispatch = gateway.stack.feed.dispatch(
            view, request, now, self._scrapes.kv_tokens(replica.id, now), leg=leg, record=record
        )
        if self.kv_feed is not None:
            self.precise.speculate(replica.id, request.token_keys[0][1], now)
        view.in_flight += 1
        replica.dispatched += 1
        if self.sharing is not None:
            self.sharing.placed(now, g, position, request, dispatch.uncached_tokens, record=record)
        return dispatch

    def _engine_arrival(self, i: int, _token: int) -> None:
        rid = str(i)
        live = self._live[rid]
        if live.split is not None:
            assert self._pd is not None
            self._pd.engine_arrival(i, live)
            return
        hashes, live.hashes = live.hashes, ()
        self._engines.enter(
            self.now,
            rid,
            live.engine,
            input_tokens=self._trace[i].input_tokens,
            engine_hashes=hashes,
            output_tokens=live.output_tokens,
        )

    def _handoff(self, i: int, _token: int) -> None:
        assert self._pd is not None
        self._pd.handoff(i)

    def _transfer_end(self, i: int, _token: int) -> None:
        assert self._pd is not None
        self._pd.transfer_end(i)

    def _step_start(self, position: int, _token: int) -> None:
        self._engines.start(self.now, position)

    def _step_end(self, position: int, token: int) -> None:
        engines = self._engines
        segment = engines.end(position, token)
        if segment is None:
            return
        if self.kv_feed is not None:
            events = self.replicas[position].engine.take_kv_events()
            due = self.kv_feed.collect(position, events, self.now)
            if due is not None:
                self._queue.push(due, Kind.KV_EVENTS, position)
        self._deliver(segment)
        engines.resume(self.now, position, segment)

    def _kv_events(self, position: int, _token: int) -> None:
        assert self.kv_feed is not None
        self.kv_feed.deliver(position)

    def _sync(self, _subject: int, _token: int) -> None:
        assert self.sharing is not None
        self.sharing.deliver()

    def _sync_due(self, at: float) -> None:
        self._queue.push(at, Kind.SYNC)

    def _sample(self, _subject: int, _token: int) -> None:
        timeline = self._timeline
        timeline.times_s.append(self.now)
        for i, replica in enumerate(self.replicas):
            stats = replica.engine.stats()
            queries = stats.prefix_queries
            timeline.hit_rate[i].append(stats.prefix_hits / queries if queries else math.nan)
            timeline.load[i].append(stats.running + stats.waiting)
        if self._next < len(self._trace) or self._live:
            self._queue.push(self.now + self._sample_every, Kind.SAMPLE)

    # -- tokens -----------------------------------------------------------------------------

    def _deliver(self, segment: Segment) -> None:
        now = self.now
        live = self._live
        if segment.run is None:
            assert segment.result is not None
            for token in segment.result.tokens:
                request = live[token.request_id]
                if token.index == 0:
                    split = request.split
                    if split is not None and not split.prefilled:
                        assert self._pd is not None
                        self._pd.prefilled(int(token.request_id), request)
                        continue  # P's token: the client's come from D
                    request.first_at = now
                    seen = now - request.dispatch.at + self._frontend.request_overhead_s
                    self._settle(request, seen)
                    if self._observer is not None:
                        self._observer.first_token(now, token.request_id)
                elif request.arrival >= self._measure_from:
                    self._itl.add(now - request.last_at)
                request.last_at = now
                if token.finished:
                    self._complete(token.request_id, request)
            return
        run = segment.run
        first_end = segment.start + run.first_step_s
        # Requests that emitted a token when the run began all wait one first step.
        steady = measured = 0
        start = self._measure_from
        for rid in run.request_ids:
            request = live[rid]
            if request.arrival < start:
                pass  # the lead-in's: not measured
            elif request.last_at == segment.start:
                steady += 1
            else:
                self._itl.add(first_end - request.last_at)
            measured += request.arrival >= start
            request.last_at = now
        if steady:
            self._itl.add(run.first_step_s, steady)
        self._itl.add_linear(run.first_step_s, run.step_growth_s, 1, segment.steps, measured)
        for rid in segment.finished:
            self._complete(rid, live[rid])

    def _settle(self, request: Flight, ttft_s: float | None) -> None:
        """The request's prefill is done (`ttft_s`: from dispatch, if this is its first token;
        a P/D decode leg's teaches the transfer line instead of the replica's)."""
        dispatch = request.dispatch
        if dispatch.settled:
            return
        if dispatch.leg == "decode":
            if ttft_s is not None:
                assert self._pd is not None
                self._pd.decode_first_token(request, ttft_s)
            ttft_s = None
        self.settle(request.gateway, request.replica, dispatch, ttft_s)

    def settle(
        self, g: int, position: int, dispatch: Dispatch[Counters], ttft_s: float | None
    ) -> None:
        """Gateway `g`'s dispatch to the replica at `position` is prefilled (`ttft_s`: the
        point it teaches, from dispatch to first token)."""
        if dispatch.settled:
            return
        seen = self.gateways[g].stack.feed.first_token(dispatch, ttft_s)
        if self.sharing is not None:
            self.sharing.first_token(self.now, g, position, dispatch.uncached_tokens, seen)

    def end(self, g: int, position: int, dispatch: Dispatch[Counters]) -> None:
        """Gateway `g`'s dispatch to the replica at `position` is over."""
        dispatch.endpoint.in_flight -= 1
        self.settle(g, position, dispatch, None)
        if self.sharing is not None:
            self.sharing.ended(self.now, g, position)

    def _complete(self, rid: str, request: Flight) -> None:
        now = self.now
        self.end(request.gateway, request.replica, request.dispatch)
        if self._observer is not None:
            self._observer.finished(now, rid)
        n = request.output_tokens
        itl = (now - request.first_at) / (n - 1) if n > 1 else math.nan
        outside = self._outside_s(int(rid))
        if request.arrival >= self._measure_from:
            self._log.add(
                request.first_at - request.arrival + outside,
                now - request.arrival + outside,
                itl,
                request.engine,
            )
        del self._live[rid]
        self._last_token_at = now
        self._turn_done(int(rid))

    def _outside_s(self, i: int) -> float:
        """Time outside the engines that request `i`'s client sees on top of theirs."""
        fixed, per_token = self._outside
        return fixed + per_token * self._trace[i].input_tokens

    def _prefix_counts(self) -> tuple[int, int]:
        stats = [r.engine.stats() for r in self.replicas]
        return sum(s.prefix_queries for s in stats), sum(s.prefix_hits for s in stats)

    def _result(self) -> ReplayResult:
        stats = [r.engine.stats() for r in self.replicas]
        queries_before, hits_before = self._hits_before or (0, 0)
        return ReplayResult(
            policy=self._spec.name,
            replica_ids=tuple(r.id for r in self.replicas),
            requests=len(self._log),
            rejected=self._rejected,
            log=self._log,
            itl=self._itl,
            timeline=self._timeline,
            dispatched=tuple(r.dispatched for r in self.replicas),
            prefix_queries=sum(s.prefix_queries for s in stats) - queries_before,
            prefix_hits=sum(s.prefix_hits for s in stats) - hits_before,
            preemptions=sum(s.preemptions for s in stats),
            makespan_s=self._last_token_at,
            segments=self._engines.segments,
            steps=self._engines.steps,
            pd=self._pd.summary(self._last_token_at) if self._pd is not None else None,
        )


def _known(profiles: Mapping[str, object], policies: Mapping[str, str]) -> None:
    """ValueError unless each policy's profile is one of `profiles`."""
    for policy, profile in policies.items():
        if profile not in profiles:
            known = ", ".join(sorted(profiles))
            raise ValueError(f"unknown policy {policy!r} (profiles: {known}; or oracle)")


def _floats() -> array[float]:
    return array("d")


def _ints() -> array[int]:
    return array("l")
