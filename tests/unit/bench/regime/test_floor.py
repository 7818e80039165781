"""The TTFT floor: below every router's TTFT, request by request, and tight when alone."""

from __future__ import annotations

import pytest

from bench.regime.floor import alone_ttft, floors
from bench.regime.grid import Cell, FleetSpec
from bench.regime.simulate import closed_loop, replay
from routing.traces import TraceRequest
from sim.engine.profiles import get_profile
from sim.workloads import family

FLEET = FleetSpec(replicas=2)
DEMO = get_profile("demo")


def test_alone_is_the_engines_chunked_prefill() -> None:
    t = DEMO.timing
    budget = DEMO.config.max_num_batched_tokens
    one = t.overhead_s + t.prefill_token_s * 100 + t.attention_s * 100 * 100
    assert alone_ttft(DEMO, 0, 100) == pytest.approx(one)
    assert alone_ttft(DEMO, 100, 100) == pytest.approx(
        t.overhead_s + t.prefill_token_s + t.attention_s * 100  # the last token is recomputed
    )
    two = alone_ttft(DEMO, 0, budget + 10)
    assert two > alone_ttft(DEMO, 0, budget) + t.overhead_s


def test_a_lone_request_replays_at_its_floor() -> None:
    trace = [TraceRequest(0.0, 300, 2, tuple(range(19)), 16)]
    run = replay(trace, "round-robin", FLEET)
    assert run.result.log.ttft_s[0] == pytest.approx(floors(trace, run.sent_s, DEMO)[0])


def test_a_later_request_may_hit_what_an_earlier_one_made() -> None:
    ids = tuple(range(20))
    trace = [TraceRequest(0.0, 320, 2, ids, 16), TraceRequest(5.0, 336, 2, (*ids, 99), 16)]
    cold, warm = floors(trace, [0.0, 5.0], DEMO)
    assert warm < cold / 5
    _, together = floors(trace, [0.0, 0.0], DEMO)  # sent at once: nothing cached yet
    assert together > warm


def test_a_burst_for_one_new_prefix_waits_for_its_computation() -> None:
    # Two requests for the same new 2,048-token prefix sent at once: whatever the routing,
    # the second either computes the prefix too or waits until the first has computed it.
    ids = tuple(range(128))
    trace = [TraceRequest(0.0, 2048 + 16, 2, (*ids, 7), 16) for _ in range(2)]
    first, second = floors(trace, [0.0, 0.0], DEMO)
    assert first == pytest.approx(alone_ttft(DEMO, 0, 2048 + 16))
    t = DEMO.timing
    prefix = t.overhead_s + t.prefill_token_s * 2048 + t.attention_s * 2048 * 2049 / 2
    assert second >= prefix
    # Sent a little later, it still waits for the rest of the prefix's computation.
    _, later = floors(trace, [0.0, 0.1], DEMO)
    assert later >= prefix - 0.1


@pytest.mark.parametrize("policy", ["prefix-aware", "round-robin", "sglang-model", "least-load"])
@pytest.mark.parametrize("loop", ["closed", "open"])
def test_no_router_beats_the_floor_on_any_request(policy: str, loop: str) -> None:
    traffic = {"clients": 6} if loop == "closed" else {"load": 0.9}
    cell = Cell(1.0, "hot", loop, prefix_tokens=512, conversations=24, **traffic)  # type: ignore[arg-type]
    chats = family.chats(cell.family(FLEET, seed=3, saturation_rps=20.0))
    if loop == "closed":
        run = closed_loop(chats, 6, policy, FLEET)
    else:
        arrivals = cell.open_arrivals(chats, 20.0, seed=3)
        run = replay(family.chat_trace(chats, arrivals, FLEET.block_tokens), policy, FLEET)
    bound = run.floors(FLEET)
    assert all(t >= b - 1e-12 for t, b in zip(run.ttft_s, bound, strict=True))
    # A bound, not a trivial one: some request sits at its floor, and the floor is no tiny
    # share of the TTFT (however overloaded the fleet).
    assert max(b / t for t, b in zip(run.ttft_s, bound, strict=True)) > 0.99
    assert sum(bound) > 0.2 * sum(run.ttft_s)
