"""The live regime map's traffic: an open loop's arrivals, jittered on request."""

from __future__ import annotations

from bench.jitter import jittered
from bench.regime.grid import FleetSpec
from bench.regime.live import workload
from bench.shared_state_fleet import _cells
from sim.workloads.open_loop import TimedRequest


def _requests(*times: float) -> list[TimedRequest]:
    return [TimedRequest(t, "/v1/chat/completions", str(i).encode()) for i, t in enumerate(times)]


def test_jitter_delays_each_request_by_at_most_its_bound_and_repeats_with_its_seed() -> None:
    requests = _requests(0.0, 0.001, 0.002, 1.0)
    once = jittered(requests, 0.005, 7, at="at_s")
    assert jittered(requests, 0.005, 7, at="at_s") == once
    assert jittered(requests, 0.005, 8, at="at_s") != once
    by_body = {r.body: r.at_s for r in once}
    for r in requests:
        assert r.at_s <= by_body[r.body] <= r.at_s + 0.005
    assert [r.at_s for r in once] == sorted(r.at_s for r in once)
    assert {r.body for r in once[:3]} == {b"0", b"1", b"2"}  # 1 s apart stays apart
    assert jittered(requests, 0.0, 7, at="at_s") == requests


def test_a_jittered_open_loop_sends_the_same_requests_and_a_closed_loop_takes_none() -> None:
    fleet = FleetSpec(replicas=4, profile="demo")
    (open_cell,) = _cells("p0.25-zipf-open50")
    plain = workload(open_cell, fleet, 1, 5.0, 1.0)
    with_jitter = workload(open_cell, fleet, 1, 5.0, 1.0, jitter=(0.005, 3))
    assert plain.requests == with_jitter.requests > 0
    (closed,) = _cells("p0.25-zipf-closed16")
    assert workload(closed, fleet, 1, 1.0, 1.0, jitter=(0.005, 3)).requests > 0
