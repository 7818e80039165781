"""The replay loop: golden decisions, determinism, fast-forward, signals, oracle, memory."""

from __future__ import annotations

import dataclasses
import gc
import math
import tracemalloc

import pytest

from routing.traces import TraceRequest
from sim.replay import Replay, ReplayResult, SimSettings
from tests.unit.sim.replay.synthetic import SMALL, recording, tenant_trace


def _replay(trace: list[TraceRequest], policy: str, **settings: object) -> ReplayResult:
    base = {"replicas": 4, "seed": 7}
    return Replay(trace, policy, SMALL, SimSettings(**{**base, **settings})).run()  # type: ignore[arg-type]


def _fingerprint(r: ReplayResult) -> tuple[object, ...]:
    return (
        r.dispatched,
        r.requests,
        r.prefix_hits,
        r.prefix_queries,
        r.preemptions,
        r.steps,
        tuple(r.log.ttft_s),
        tuple(r.log.e2e_s),
        tuple(r.log.replica),
    )


def test_golden_decision_counts() -> None:
    trace = tenant_trace(300, seed=3)
    assert _replay(trace, "round-robin").dispatched == (75, 75, 75, 75)
    prefix = _replay(trace, "prefix-aware")
    assert prefix.dispatched == (50, 97, 59, 94)
    assert (prefix.requests, prefix.prefix_hits, prefix.prefix_queries) == (300, 150528, 211344)


def test_the_same_seed_gives_identical_results() -> None:
    trace = tenant_trace(200, seed=5)
    for policy in ("prefix-aware", "power-of-two", "oracle"):
        assert _fingerprint(_replay(trace, policy)) == _fingerprint(_replay(trace, policy))
    assert (
        _replay(trace, "power-of-two", seed=1).dispatched
        != _replay(trace, "power-of-two", seed=2).dispatched
    )


@pytest.mark.parametrize("policy", ["recorded", "prefix-aware", "oracle"])
def test_fast_forward_changes_nothing(policy: str) -> None:
    trace = tenant_trace(250, seed=11, tenants=12, rate=25.0, outputs=(20, 200))
    section, recorder, register = recording()
    runs = []
    for fast in (True, False):
        recorder.seen.clear()
        settings = SimSettings(replicas=4, seed=3, fast_forward=fast, routing=section)
        result = Replay(trace, policy, SMALL, settings, register=register).run()
        runs.append((result, list(recorder.seen)))
    (fast_run, fast_seen), (slow_run, slow_seen) = runs
    assert fast_run.segments < slow_run.segments / 4  # it did fast-forward
    assert fast_run.steps == slow_run.steps
    assert fast_run.dispatched == slow_run.dispatched
    assert (fast_run.prefix_hits, fast_run.preemptions) == (
        slow_run.prefix_hits,
        slow_run.preemptions,
    )
    assert list(fast_run.log.ttft_s) == pytest.approx(list(slow_run.log.ttft_s), abs=1e-9)
    assert list(fast_run.log.e2e_s) == pytest.approx(list(slow_run.log.e2e_s), abs=1e-9)
    assert fast_run.itl.percentile(50) == pytest.approx(slow_run.itl.percentile(50), rel=2e-3)
    # Scrapes in the middle of a decode run see what stepping would have shown.
    assert fast_seen == slow_seen


def test_decisions_see_metrics_from_the_last_scrape_and_never_stale_ones() -> None:
    trace = tenant_trace(150, seed=2, rate=20.0, outputs=(10, 120))
    section, recorder, register = recording()
    # Scrapes every 300 ms, metrics stale after 200 ms: for a third of the time there are none.
    settings = SimSettings(
        replicas=3, seed=4, routing=section, scrape_interval_s=0.3, stale_after_s=0.2
    )
    replay = Replay(trace, "recorded", SMALL, settings, register=register)
    replay.run()
    phases = {r.id: r.scrape_phase_s for r in replay.replicas}
    known = unknown = 0
    for now, endpoints in recorder.seen:
        for e in endpoints:
            phase = phases[e.id]
            last = phase + math.floor((now - phase) / 0.3) * 0.3 if now >= phase else None
            if e.metrics is None:
                unknown += 1
                assert last is None or now - last > 0.2
                continue
            known += 1
            assert e.metrics.scraped_at == pytest.approx(last, abs=1e-12)
            assert now - 0.2 <= e.metrics.scraped_at <= now
    assert known > 100 and unknown > 50


def test_the_oracle_sees_the_present() -> None:
    trace = tenant_trace(60, seed=2, rate=20.0)
    section, recorder, register = recording()
    settings = SimSettings(replicas=3, seed=4, routing=section)
    Replay(trace, "oracle:recorded", SMALL, settings, register=register).run()
    for now, endpoints in recorder.seen:
        assert all(e.metrics is not None and e.metrics.scraped_at == now for e in endpoints)


def test_the_oracle_hits_the_cache_at_least_as_often_as_the_index() -> None:
    # Long answers hold KV blocks, so engines evict prefixes the index still lists.
    for seed in (0, 2):
        trace = tenant_trace(
            300, seed=seed, tenants=16, prefix_blocks=12, rate=6.0, outputs=(100, 400)
        )
        index = _replay(trace, "prefix-aware", seed=seed)
        oracle = _replay(trace, "oracle", seed=seed)
        round_robin = _replay(trace, "round-robin", seed=seed)
        rate = {r.policy: r.prefix_hits / r.prefix_queries for r in (index, oracle, round_robin)}
        assert rate["oracle"] >= rate["prefix-aware"] > rate["round-robin"] + 0.2


def test_gateway_counters_return_to_zero() -> None:
    trace = tenant_trace(120, seed=9, rate=30.0)
    replay = Replay(trace, "estimated-ttft", SMALL, SimSettings(replicas=3))
    result = replay.run()
    assert result.requests == 120 and result.rejected == 0
    assert all(r.in_flight == 0 and r.pending_prefill_tokens == 0 for r in replay.replicas)
    assert all(not r.engine.has_work() for r in replay.replicas)
    assert len(result.log) == 120 and result.itl.count == sum(
        t.output_tokens - 1 for t in trace if t.output_tokens > 1
    )


def test_requests_that_can_never_fit_are_counted_not_run() -> None:
    trace = tenant_trace(20, seed=1)
    trace[5] = dataclasses.replace(trace[5], input_tokens=5000, hash_ids=tuple(range(900, 979)))
    result = _replay(trace, "round-robin")
    assert (result.requests, result.rejected) == (19, 1)


def test_an_unknown_policy_and_an_unsorted_trace_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        Replay([], "nope", SMALL, SimSettings())
    with pytest.raises(ValueError, match="arrival order"):
        Replay(tenant_trace(5)[::-1], "round-robin", SMALL, SimSettings())


def _memory(n: int) -> tuple[int, int]:
    """(bytes the result keeps, peak bytes during the replay) for n requests."""
    trace = tenant_trace(n, seed=1, rate=40.0)
    Replay(trace[:30], "prefix-aware", SMALL, SimSettings(replicas=4)).run()  # warm caches
    gc.collect()
    tracemalloc.start()
    try:
        replay = Replay(trace, "prefix-aware", SMALL, SimSettings(replicas=4, timeline_points=20))
        result = replay.run()
        assert not replay._live  # finished requests leave only their summary numbers
        del replay
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.requests == n
    return kept, peak


def test_memory_per_request_is_its_summary_numbers() -> None:
    (kept_n, peak_n), (kept_2n, peak_2n) = _memory(250), _memory(500)
    kept = (kept_2n - kept_n) / 250
    peak = (peak_2n - peak_n) / 250
    print(f"\nreplay memory per request: {kept:.0f} B kept, {peak:.0f} B more at the peak")
    # Three floats and a replica index per request (~26 B), plus the ITL histogram filling
    # its buckets (bounded by the latency range, not by the number of requests).
    assert kept < 150
    # Live state is bounded by what is in flight, not by how many requests went before.
    assert peak < 1000


def _garbage_after(n: int) -> int:
    trace = tenant_trace(n, seed=4)
    gc.collect()
    replay = Replay(trace, "prefix-aware", SMALL, SimSettings(replicas=4, seed=7))
    replay.run()
    assert gc.isenabled()  # the collector is off during the run only
    del replay
    return gc.collect()


def test_a_replay_makes_no_reference_cycles_per_request() -> None:
    # Replay.run turns the cyclic collector off: that is only safe while the garbage it
    # leaves does not grow with the trace.
    assert _garbage_after(400) - _garbage_after(100) < 50
    gc.disable()
    try:
        _replay(tenant_trace(20, seed=4), "round-robin")
        assert not gc.isenabled()  # a collector turned off by the caller stays off
    finally:
        gc.enable()
