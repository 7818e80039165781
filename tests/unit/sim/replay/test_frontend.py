"""Time outside the engine's steps: the API server's queue and overhead, the gateway's."""

from __future__ import annotations

import dataclasses

import pytest

from routing.traces import TraceRequest
from sim.engine.types import FrontEnd
from sim.replay import Replay, ReplayResult, SimSettings
from tests.unit.sim.replay.synthetic import BLOCK_TOKENS, SMALL, tenant_trace

BARE = FrontEnd()


def _run(
    trace: list[TraceRequest],
    policy: str,
    frontend: FrontEnd = BARE,
    **settings: object,
) -> ReplayResult:
    profile = dataclasses.replace(SMALL, frontend=frontend)
    base: dict[str, object] = {"replicas": 4, "seed": 7}
    return Replay(trace, policy, profile, SimSettings(**{**base, **settings})).run()  # type: ignore[arg-type]


def test_overheads_outside_the_engines_shift_every_latency_and_nothing_else() -> None:
    trace = tenant_trace(120, seed=2)
    bare = _run(trace, "round-robin")
    shifted = _run(trace, "round-robin", FrontEnd(request_overhead_s=0.02), gateway_overhead_s=0.01)
    assert shifted.dispatched == bare.dispatched
    assert shifted.steps == bare.steps
    assert list(shifted.log.ttft_s) == pytest.approx([t + 0.03 for t in bare.log.ttft_s])
    assert list(shifted.log.e2e_s) == pytest.approx([t + 0.03 for t in bare.log.e2e_s])


def test_the_api_server_takes_a_burst_one_request_at_a_time() -> None:
    # Three one-token requests at once on one engine, each with a prompt of its own; the API
    # server's second of work a request outlasts each one's prefill.
    trace = [TraceRequest(0.0, BLOCK_TOKENS, 1, (i,), BLOCK_TOKENS) for i in range(3)]
    alone = _run(trace[:1], "round-robin", replicas=1).log.ttft_s[0]
    ttfts = sorted(_run(trace, "round-robin", FrontEnd(frontend_s=1.0), replicas=1).log.ttft_s)
    assert ttfts == pytest.approx([1.0 + alone, 2.0 + alone, 3.0 + alone])


@pytest.mark.parametrize("policy", ["prefix-aware", "oracle"])
def test_fast_forward_changes_nothing_behind_a_front_end(policy: str) -> None:
    trace = tenant_trace(200, seed=4, rate=25.0, outputs=(20, 120))
    frontend = FrontEnd(request_overhead_s=0.01, frontend_s=0.004)
    fast, stepped = (_run(trace, policy, frontend, fast_forward=f) for f in (True, False))
    assert fast.dispatched == stepped.dispatched
    assert list(fast.log.ttft_s) == pytest.approx(list(stepped.log.ttft_s))


def test_the_per_token_overhead_grows_with_the_prompt() -> None:
    trace = tenant_trace(60, seed=1)
    bare = _run(trace, "round-robin")
    longer = _run(trace, "round-robin", gateway_overhead_token_s=1e-5)
    assert longer.dispatched == bare.dispatched
    extra = 1e-5 * sum(r.input_tokens for r in trace)  # the log is in completion order
    assert sum(longer.log.ttft_s) == pytest.approx(sum(bare.log.ttft_s) + extra)


def test_a_negative_gateway_overhead_is_refused() -> None:
    with pytest.raises(ValueError, match="gateway_overhead_s"):
        SimSettings(gateway_overhead_s=-0.001)
    with pytest.raises(ValueError, match="gateway_overhead_token_s"):
        SimSettings(gateway_overhead_token_s=-1e-6)
