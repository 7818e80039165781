"""Differential test: the gateway's decision path and the simulator's agree, step by step.

A replay runs a seeded trace and reports every decision (with what each replica's last
scrape showed), first token and completion. The same sequence then goes through the
gateway's own objects — the runtime's pool, `RequestRouter` and `Director` — on the
same clock readings and RNG. Snapshots, decisions, the prefix index and the TTFT model must
be identical after every step.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.compose import build_runtime
from gateway.request_record import RequestRecord
from gateway.router import RequestRouter
from gateway.runtime import Runtime
from health.pool import Backend
from routing.config.profiles import RoutingSection
from routing.config.schema import BackendEntry, GatewayConfig, HealthSection
from routing.types import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest
from scoring.state.prefix_feed import Dispatch
from scoring.state.prefix_index import PrefixIndex
from sim.replay import Replay, SimSettings
from tests.unit.sim.replay.synthetic import SMALL, tenant_trace

MODEL = "sim"


@dataclass(frozen=True, slots=True)
class Decided:
    now: float
    request: RoutingRequest
    snapshots: tuple[EndpointSnapshot, ...]
    scraped: tuple[EngineMetrics | None, ...]
    decision: Decision
    index: tuple[Any, ...]  # the simulator's prefix index just before the dispatch


@dataclass(frozen=True, slots=True)
class Token:
    now: float
    request_id: str
    finished: bool


class Recorder:
    """A `ReplayObserver` that keeps the events, in order."""

    def __init__(self) -> None:
        self.events: list[Decided | Token] = []
        self.index = PrefixIndex()
        self.ids: tuple[str, ...] = ()

    def decided(
        self,
        now: float,
        request: RoutingRequest,
        snapshots: Sequence[EndpointSnapshot],
        scraped: Sequence[EngineMetrics | None],
        decision: Decision,
    ) -> None:
        state = _index_state(self.index, self.ids, [request.prefix_hashes])
        self.events.append(Decided(now, request, tuple(snapshots), tuple(scraped), decision, state))

    def first_token(self, now: float, request_id: str) -> None:
        self.events.append(Token(now, request_id, finished=False))

    def finished(self, now: float, request_id: str) -> None:
        self.events.append(Token(now, request_id, finished=True))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _seen(s: EndpointSnapshot) -> tuple[Any, ...]:
    """What the scheduler reads of a snapshot (the URL differs: sim:// against http://)."""
    return (s.id, s.models, s.health, s.metrics, s.in_flight, s.pending_prefill_tokens)


def _verdict(d: Decision) -> tuple[Any, ...]:
    rows = tuple((r.endpoint_id, tuple(sorted(r.scores.items())), r.total) for r in d.scores)
    return (d.profile, d.target, d.ranked, tuple(sorted(d.filtered_out.items())), rows)


def _index_state(
    index: PrefixIndex, ids: Sequence[str], hashes: Sequence[tuple[int, ...]]
) -> tuple[Any, ...]:
    per_replica = tuple((index.capacity(r), index.blocks(r), index.fill(r)) for r in ids)
    return per_replica, tuple(tuple(sorted(index.match(h, ids).items())) for h in hashes)


def _gateway(settings: SimSettings, ids: Sequence[str], clock: Clock) -> Runtime:
    config = GatewayConfig(
        backends=[BackendEntry(url=f"http://{i}.sim:8000", id=i, models=[MODEL]) for i in ids],
        health=HealthSection(
            scrape_interval_s=settings.scrape_interval_s,
            metrics_stale_after_s=settings.stale_after_s,
            success_threshold=1,
        ),
        routing=settings.routing,
    )
    # The simulator's RNG gives each replica a scrape phase, then drives the scheduler.
    rng = random.Random(settings.seed)
    for _ in ids:
        rng.uniform(0.0, settings.scrape_interval_s)
    runtime = build_runtime(config, clock=clock, rng=rng)
    for backend in runtime.pool:
        backend.state.record_probe(True, 0.0)
    return runtime


def _run_both(policy: str, settings: SimSettings, requests: int) -> int:
    recorder = Recorder()
    replay = Replay(
        tenant_trace(requests, seed=11, rate=40.0),
        policy,
        SMALL,
        settings,
        observer=recorder,
    )
    recorder.index, recorder.ids = replay.stack.index, tuple(r.id for r in replay.replicas)
    result = replay.run()
    ids = result.replica_ids
    clock = Clock()
    rt = _gateway(settings, ids, clock)
    router: RequestRouter = rt.router
    # The director's accounting, as the proxy drives it, without an upstream.
    director = rt.director
    records: dict[str, RequestRecord] = {}
    live: dict[str, Dispatch[Backend]] = {}
    seen_hashes: list[tuple[int, ...]] = []
    stale = 0
    for event in recorder.events:
        clock.now = event.now
        if isinstance(event, Token):
            d = live[event.request_id]
            if event.finished:
                director.end(d)
                del live[event.request_id]
            else:
                director.event(records[event.request_id], d)
            continue
        for backend, metrics in zip(rt.pool, event.scraped, strict=True):
            backend.metrics = metrics  # what the scraper had stored by now
        route = router.route_hashed(event.request, policy=policy)
        assert [_seen(s) for s in route.endpoints] == [_seen(s) for s in event.snapshots]
        assert _verdict(route.decision) == _verdict(event.decision)
        stale += sum(
            s.metrics is None and m is not None
            for s, m in zip(event.snapshots, event.scraped, strict=True)
        )
        assert _index_state(rt.stack.index, ids, [event.request.prefix_hashes]) == event.index
        target = route.decision.target
        assert target is not None
        rec = records[event.request.request_id] = RequestRecord("r", "POST", "/", event.now)
        live[event.request.request_id] = director.dispatch(rec, route, rt.pool.get(target))
        seen_hashes.append(event.request.prefix_hashes)
    assert not live
    assert _index_state(rt.stack.index, ids, seen_hashes) == _index_state(
        replay.stack.index, ids, seen_hashes
    )
    assert rt.stack.ttft_model.lines(ids) == replay.stack.ttft_model.lines(ids)
    assert [b.pending_prefill_tokens for b in rt.pool] == [0] * len(ids)
    return stale


@pytest.mark.parametrize(
    "policy", ["prefix-aware", "estimated-ttft", "least-load", "session", "power-of-two"]
)
def test_gateway_and_simulator_decide_alike(policy: str) -> None:
    # Metrics go stale between scrapes (30 ms bound, 50 ms period), so both staleness rules
    # are exercised; a small prefix-index capacity makes both indexes evict.
    settings = SimSettings(
        replicas=4,
        seed=5,
        scrape_interval_s=0.05,
        stale_after_s=0.03,
        routing=RoutingSection.model_validate({"prefix": {"capacity_blocks": 64}}),
    )
    stale = _run_both(policy, settings, requests=160)
    assert stale > 0  # some decisions saw metrics dropped as stale


def test_gateway_and_simulator_agree_with_capacity_from_the_engines() -> None:
    settings = SimSettings(replicas=3, seed=2)
    _run_both("prefix-aware", settings, requests=120)
