"""Token buckets per key: refusal with the honest wait, refill, refund and usage correction."""

from __future__ import annotations

import pytest

from routing.admission import KeyLimiter, TokenBucket


def test_bucket_starts_full_and_refills_at_its_rate() -> None:
    b = TokenBucket(60, now=0.0)  # one per second
    assert b.wait_s(60, 0.0) == 0.0
    b.charge(60, 0.0)
    assert b.wait_s(1, 0.0) == pytest.approx(1.0)
    assert b.wait_s(1, 0.5) == pytest.approx(0.5)
    assert b.reset_s(30.0) == pytest.approx(30.0)
    assert b.wait_s(1, 1000.0) == 0.0 and b.level == 60  # never above its size


def test_a_need_above_the_size_waits_for_a_full_bucket() -> None:
    b = TokenBucket(100, now=0.0)
    assert b.wait_s(1000, 0.0) == 0.0
    b.charge(50, 0.0)
    assert b.wait_s(1000, 0.0) == pytest.approx(30.0)  # 50 tokens at 100/60 per second


def test_requests_per_minute_refuses_with_the_time_to_the_next_one() -> None:
    lim = KeyLimiter()
    for _ in range(3):
        [state] = lim.take("k", rpm=3, tpm=None, tokens=10, now=0.0)
        assert state.wait_s == 0.0
    [state] = lim.take("k", rpm=3, tpm=None, tokens=10, now=0.0)
    assert state.kind == "requests" and state.limit == 3 and state.remaining == 0
    assert state.wait_s == pytest.approx(20.0)  # 3 per minute: one every 20 s
    assert state.reset_s == pytest.approx(60.0)
    [state] = lim.take("k", rpm=3, tpm=None, tokens=10, now=20.0)
    assert state.wait_s == 0.0


def test_a_refused_request_takes_nothing_from_either_bucket() -> None:
    lim = KeyLimiter()
    states = lim.take("k", rpm=10, tpm=100, tokens=80, now=0.0)
    assert [s.remaining for s in states] == [9, 20]
    states = lim.take("k", rpm=10, tpm=100, tokens=80, now=0.0)
    assert [s.wait_s > 0 for s in states] == [False, True]
    assert [s.remaining for s in states] == [9, 20]  # the request bucket kept its token
    assert states[1].wait_s == pytest.approx(60 * 60 / 100)


def test_keys_are_independent_and_unlimited_keys_have_no_state() -> None:
    lim = KeyLimiter()
    lim.take("a", rpm=1, tpm=None, tokens=1, now=0.0)
    assert lim.take("a", rpm=1, tpm=None, tokens=1, now=0.0)[0].wait_s > 0
    assert lim.take("b", rpm=1, tpm=None, tokens=1, now=0.0)[0].wait_s == 0
    assert lim.take("c", rpm=None, tpm=None, tokens=1, now=0.0) == []


def test_refund_gives_back_a_request_that_was_never_served() -> None:
    lim = KeyLimiter()
    lim.take("k", rpm=1, tpm=100, tokens=40, now=0.0)
    lim.refund("k", 40, now=0.0)
    assert [s.remaining for s in lim.take("k", rpm=1, tpm=100, tokens=40, now=0.0)] == [0, 60]


def test_usage_correction_charges_what_the_estimate_missed() -> None:
    lim = KeyLimiter()
    lim.take("k", rpm=None, tpm=600, tokens=100, now=0.0)
    lim.correct("k", estimated=100, used=700, now=0.0)  # the answer was long: 100 in debt
    [state] = lim.take("k", rpm=None, tpm=600, tokens=10, now=0.0)
    assert state.wait_s == pytest.approx(110 / 10)  # 600 per minute: 10 per second
    assert state.remaining == 0


def test_a_changed_limit_starts_a_fresh_bucket() -> None:
    lim = KeyLimiter()
    lim.take("k", rpm=1, tpm=None, tokens=1, now=0.0)
    [state] = lim.take("k", rpm=5, tpm=None, tokens=1, now=0.0)
    assert state.wait_s == 0 and state.limit == 5 and state.remaining == 4
