"""The P/D benchmark's workloads and capacity arithmetic."""

from __future__ import annotations

import math

import pytest

from bench.pd import workloads
from sim.engine.profiles import get_profile


def test_mixed_trace_mixes_short_and_long_prompts_that_share_nothing() -> None:
    trace = workloads.mixed_trace(seed=3, requests=2000, rate_rps=4.0)
    long = [r for r in trace if workloads.is_long(r)]
    short = [r for r in trace if not workloads.is_long(r)]
    assert len(long) / len(trace) == pytest.approx(1 - workloads.SHORT_SHARE, abs=0.03)
    assert all(50 <= r.input_tokens <= 150 for r in short)
    assert all(3000 <= r.input_tokens <= 4000 for r in long)
    ids = [h for r in trace for h in r.hash_ids]
    assert len(ids) == len(set(ids))
    assert all(len(r.hash_ids) == -(-r.input_tokens // r.block_tokens) for r in trace)
    assert [r.arrival_s for r in trace] == sorted(r.arrival_s for r in trace)
    assert len(trace) / trace[-1].arrival_s == pytest.approx(4.0, rel=0.1)


def test_mixed_trace_rate_moves_arrivals_only() -> None:
    slow = workloads.mixed_trace(seed=5, requests=50, rate_rps=1.0)
    fast = workloads.mixed_trace(seed=5, requests=50, rate_rps=10.0)
    assert [r.input_tokens for r in slow] == [r.input_tokens for r in fast]
    assert fast[-1].arrival_s == pytest.approx(slow[-1].arrival_s / 10)


def test_prefill_s_sums_the_chunks_step_times() -> None:
    profile = get_profile("demo")
    t = profile.timing
    one = t.overhead_s + 1000 * t.prefill_token_s + 1000 * 1000 * t.attention_s
    assert workloads.prefill_s(profile, 1000) == pytest.approx(one)
    budget = profile.config.max_num_batched_tokens  # 2048: 3000 tokens take two chunks
    first = t.overhead_s + budget * t.prefill_token_s + budget * budget * t.attention_s
    rest = 3000 - budget
    second = t.overhead_s + rest * t.prefill_token_s + rest * 3000 * t.attention_s
    assert workloads.prefill_s(profile, 3000) == pytest.approx(first + second)


def test_prefill_capacity_is_engines_over_the_mean_prefill() -> None:
    profile = get_profile("demo")
    trace = workloads.mixed_trace(seed=1, requests=20, rate_rps=1.0)
    mean = sum(workloads.prefill_s(profile, r.input_tokens) for r in trace) / len(trace)
    assert workloads.prefill_capacity_rps(profile, trace, 2) == pytest.approx(2 / mean)


def test_steady_rate_leaves_out_the_ramp_and_the_tail() -> None:
    # 2 s of nothing, then 10 completions a second for 10 s, then a slow tail.
    samples = [(t / 4, 0) for t in range(8)]
    samples += [(2 + t / 4, int(2.5 * t)) for t in range(41)]
    samples += [(12 + t, 100 + t) for t in range(1, 6)]
    assert workloads.steady_rate(samples) == pytest.approx(10.0, rel=0.05)
    assert math.isnan(workloads.steady_rate([(0.0, 0), (1.0, 2)]))


def test_conversations_for_a_rate_and_duration() -> None:
    mean_turns = (workloads.MIN_TURNS + workloads.MAX_TURNS) / 2
    assert workloads.conversations_for(8.0, 30.0) == round(8.0 * 30.0 / mean_turns)
    assert workloads.conversations_for(0.01, 1.0) == 1


def test_tenant_chats_share_one_system_prompt_per_tenant() -> None:
    chats = workloads.tenant_chats(seed=2, conversations=40)
    prompts = {c.tenant: c.system_prompt for c in chats}
    assert all(c.system_prompt == prompts[c.tenant] for c in chats)
    assert len(set(prompts.values())) == len(prompts) <= workloads.TENANTS
    assert all(workloads.MIN_TURNS <= len(c.user_turns) <= workloads.MAX_TURNS for c in chats)


def test_chat_requests_arrive_at_the_steady_rate_across_the_window() -> None:
    rate, think, duration = 6.0, 2.0, 200.0
    chats = workloads.tenant_chats(
        seed=4, conversations=workloads.conversations_for(rate, duration, think)
    )
    requests = workloads.chat_requests(chats, rate, think, seed=4, duration_s=duration)
    times = [r.at_s for r in requests]
    assert times == sorted(times) and times[0] >= 0 and times[-1] < duration
    first, second = (sum(1 for t in times if lo <= t < lo + 50) / 50 for lo in (0, 150))
    assert first == pytest.approx(rate, rel=0.25) and second == pytest.approx(rate, rel=0.25)
