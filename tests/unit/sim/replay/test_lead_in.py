"""A replay's lead-in (`SimSettings.measure_from_s`, `lead_in_policy`): run, not measured."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from routing.traces import TraceRequest
from routing.types import Decision, EndpointSnapshot, EngineMetrics, RoutingRequest
from sim.replay import Replay, ReplayResult, SimSettings
from tests.unit.sim.replay.synthetic import SMALL, tenant_trace


class Seen:
    """Each decision's profile and target, and the requests in the order they finished."""

    def __init__(self) -> None:
        self.decisions: dict[str, tuple[str, str | None]] = {}
        self.done: list[str] = []

    def decided(
        self,
        now: float,
        request: RoutingRequest,
        snapshots: Sequence[EndpointSnapshot],
        scraped: Sequence[EngineMetrics | None],
        decision: Decision,
    ) -> None:
        self.decisions[request.request_id] = (decision.profile, decision.target)

    def first_token(self, now: float, request_id: str) -> None:
        pass

    def finished(self, now: float, request_id: str) -> None:
        self.done.append(request_id)


def _run(trace: list[TraceRequest], policy: str, **settings: object) -> tuple[ReplayResult, Seen]:
    seen = Seen()
    config = SimSettings(**{"replicas": 4, "seed": 7, **settings})  # type: ignore[arg-type]
    return Replay(trace, policy, SMALL, config, observer=seen).run(), seen


def test_the_lead_in_runs_but_only_later_arrivals_are_measured() -> None:
    trace = tenant_trace(300, seed=3, rate=40.0, outputs=(20, 120))
    start = trace[150].arrival_s
    full, full_seen = _run(trace, "prefix-aware")
    part, _ = _run(trace, "prefix-aware", measure_from_s=start)
    assert part.dispatched == full.dispatched and part.makespan_s == full.makespan_s
    measured = [i for i, rid in enumerate(full_seen.done) if int(rid) >= 150]
    assert part.requests == len(measured) == 150
    # The measured requests' figures are theirs in the whole replay (queues and caches alike).
    assert list(part.log.ttft_s) == [full.log.ttft_s[i] for i in measured]
    assert list(part.log.e2e_s) == [full.log.e2e_s[i] for i in measured]
    assert 0 < part.itl.count < full.itl.count
    assert 0 < part.prefix_queries < full.prefix_queries


def test_without_a_lead_in_nothing_changes() -> None:
    trace = tenant_trace(200, seed=5, rate=40.0)
    full, _ = _run(trace, "prefix-aware")
    same, _ = _run(trace, "prefix-aware", measure_from_s=0.0, lead_in_policy="prefix-aware")
    assert tuple(same.log.ttft_s) == tuple(full.log.ttft_s)
    assert (same.requests, same.prefix_hits, same.itl.count) == (
        full.requests,
        full.prefix_hits,
        full.itl.count,
    )


def test_the_lead_in_policy_routes_the_lead_in_and_the_policy_the_rest() -> None:
    trace = tenant_trace(120, seed=2, rate=30.0)
    start = trace[60].arrival_s
    _, rr = _run(trace, "round-robin")
    _, mixed = _run(trace, "prefix-aware", measure_from_s=start, lead_in_policy="round-robin")
    lead_in = [str(i) for i in range(60)]
    assert all(mixed.decisions[r] == rr.decisions[r] for r in lead_in)
    assert {mixed.decisions[str(i)][0] for i in range(60, 120)} == {"prefix-aware"}


def test_bad_lead_in_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="measure_from_s must be >= 0"):
        SimSettings(measure_from_s=-1.0)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        _run(tenant_trace(5), "prefix-aware", lead_in_policy="nope")
