"""ServiceRate: Little's law over the requests in service."""

from __future__ import annotations

import pytest

from routing.admission import ServiceRate


def test_unknown_until_a_request_finished() -> None:
    rate = ServiceRate()
    rate.started()
    assert rate.wait_s(10) is None
    assert rate.retry_after_s(10) == 1
    assert rate.retry_after_s(10, fallback_s=7.5) == 8


def test_wait_is_the_queue_ahead_over_the_drain_rate() -> None:
    rate = ServiceRate(alpha=1.0)
    for _ in range(5):
        rate.started()
    rate.finished(2.0)  # 4 in service, 2 s each: 2 leave per second
    assert rate.wait_s(0) == pytest.approx(0.5)
    assert rate.wait_s(9) == pytest.approx(5.0)
    assert rate.retry_after_s(9) == 5


def test_mean_is_weighted_and_ignores_requests_that_never_ran() -> None:
    rate = ServiceRate(alpha=0.5)
    rate.started()
    rate.started()
    rate.started()
    rate.finished(1.0)
    rate.finished(3.0)
    rate.finished(0.0)
    assert rate.mean_s == pytest.approx(2.0)
    assert rate.in_service == 0
    rate.finished(1.0)
    assert rate.in_service == 0  # never below zero


def test_alpha_is_checked() -> None:
    with pytest.raises(ValueError):
        ServiceRate(alpha=0.0)


def test_drained_within_counts_the_requests_that_reach_service_in_time() -> None:
    rate = ServiceRate(alpha=1.0)
    assert rate.drained_within(1.0) is None
    for _ in range(9):
        rate.started()
    rate.finished(2.0)  # 8 in service, 2 s each: 4 per second
    assert rate.drained_within(1.0) == 4
    assert rate.drained_within(0.2) == 0
