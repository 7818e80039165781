"""The fitted engine timing: the line it recovers, how it scales the named profile, and when
it falls back to the named profile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from routing.traces import TraceRequest
from sim.engine.profiles import get_profile
from sim.tune.timing import fit_timing, line, uncached_tokens

A, B = 0.030, 4e-4  # seconds, and seconds per uncached prompt token


def _trace(n: int, ttft: bool = True) -> list[TraceRequest]:
    """Requests with prompts of their own (no shared blocks), TTFT = A + B·tokens."""
    out = []
    for i in range(n):
        tokens = 64 + 48 * (i % 9)
        ids = tuple(range(1000 * i, 1000 * i + tokens // 16))
        out.append(
            TraceRequest(float(i), tokens, 4, ids, 16, ttft_s=A + B * tokens if ttft else None)
        )
    return out


def test_uncached_tokens_leave_out_blocks_sent_before() -> None:
    trace = [
        TraceRequest(0.0, 64, 1, (1, 2, 3, 4), 16),
        TraceRequest(1.0, 70, 1, (1, 2, 9, 10), 16),  # two blocks shared, 38 tokens new
        TraceRequest(2.0, 64, 1, (5, 2, 3, 4), 16),  # another first block: all new
    ]
    assert uncached_tokens(trace) == [64, 38, 64]


def test_line_recovers_intercept_and_slope() -> None:
    assert line([1.0, 2.0, 3.0], [5.0, 7.0, 9.0]) == pytest.approx((3.0, 2.0))
    assert line([2.0, 2.0], [1.0, 3.0]) is None


def test_the_fit_scales_the_named_profile_onto_the_observed_line() -> None:
    named = get_profile("demo")
    timing = fit_timing(_trace(60), named, min_observations=30)
    assert timing.source == "fitted" and timing.observations == 60
    assert timing.intercept_s == pytest.approx(A) and timing.slope_s == pytest.approx(B)
    t0, fe0 = named.timing, named.frontend
    fixed0 = t0.overhead_s + fe0.frontend_s + fe0.request_overhead_s
    assert timing.prefill_ratio == pytest.approx(B / t0.prefill_token_s)
    assert timing.added_s == pytest.approx(A - fixed0) and timing.fixed_ratio == 1.0
    t, fe = timing.engine.timing, timing.engine.frontend
    assert t.prefill_token_s == pytest.approx(B)
    assert t.attention_s == pytest.approx(t0.attention_s * timing.prefill_ratio)
    assert t.overhead_s == t0.overhead_s and t.decode_seq_s == t0.decode_seq_s
    assert fe.request_overhead_s == pytest.approx(fe0.request_overhead_s + A - fixed0)
    assert timing.engine.config == named.config
    body = timing.to_json()
    assert body["source"] == "fitted" and body["slope_s_per_token"] == pytest.approx(B)
    assert timing.describe().startswith("fitted to 60 observed TTFTs: 30.0 ms + 400.00 us")


def test_queued_requests_above_the_line_do_not_lift_it() -> None:
    trace = _trace(90)
    queued = [replace(r, ttft_s=(r.ttft_s or 0) + 0.5 * (i % 3 == 0)) for i, r in enumerate(trace)]
    timing = fit_timing(queued, get_profile("demo"), min_observations=30)
    assert timing.intercept_s == pytest.approx(A) and timing.slope_s == pytest.approx(B)


def test_a_fast_engine_scales_the_fixed_costs_down() -> None:
    named = get_profile("demo")
    fast = [replace(r, ttft_s=0.001 + B * r.input_tokens) for r in _trace(60)]
    timing = fit_timing(fast, named, min_observations=30)
    fixed0 = named.timing.overhead_s + named.frontend.frontend_s + named.frontend.request_overhead_s
    assert timing.fixed_ratio == pytest.approx(0.001 / fixed0) and timing.added_s == 0.0
    assert timing.engine.timing.overhead_s == pytest.approx(
        named.timing.overhead_s * 0.001 / fixed0
    )


def test_without_a_usable_slope_the_named_one_is_kept() -> None:
    named = get_profile("demo")
    b0 = named.timing.prefill_token_s
    alike = [TraceRequest(float(i), 64, 4, (i,), 16, ttft_s=0.05) for i in range(40)]
    timing = fit_timing(alike, named, 30)
    assert timing.source == "fitted" and timing.slope_s == b0
    assert timing.intercept_s == pytest.approx(0.05 - 64 * b0)
    falling = [replace(r, ttft_s=1.0 - r.input_tokens / 1e3) for r in _trace(40)]
    assert fit_timing(falling, named, 30).slope_s == b0


def test_too_few_observations_or_no_fixed_cost_keep_the_named_profile() -> None:
    named = get_profile("demo")
    few = fit_timing(_trace(60)[:10] + _trace(60, ttft=False)[10:], named, min_observations=30)
    assert few.source == "named" and few.engine == named and few.observations == 10
    assert few.describe() == "named profile demo (10 observed TTFTs, fewer than 30)"
    instant = [TraceRequest(float(i), 64, 4, (i,), 16, ttft_s=0.001) for i in range(40)]
    timing = fit_timing(instant, named, 30)
    assert timing.source == "named" and timing.note.startswith("fitted line")
