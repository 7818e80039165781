from __future__ import annotations

from gateway.retry_budget import WINDOW_S, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _retries(budget: RetryBudget, tries: int = 1000) -> int:
    return sum(budget.try_retry() for _ in range(tries))


def test_minimum_allows_min_per_s_over_the_window_without_traffic() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=5, clock=Clock())
    assert _retries(budget) == 5 * WINDOW_S


def test_ratio_adds_a_fraction_of_requests() -> None:
    budget = RetryBudget(ratio=0.2, min_per_s=0, clock=Clock())
    for _ in range(100):
        budget.record_request()
    assert _retries(budget) == 20


def test_zero_budget_denies_every_retry() -> None:
    budget = RetryBudget(ratio=0.0, min_per_s=0, clock=Clock())
    for _ in range(100):
        budget.record_request()
    assert not budget.try_retry()


def test_spent_budget_comes_back_as_the_window_slides() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.0, min_per_s=1, clock=clock)
    assert _retries(budget) == WINDOW_S
    clock.now += 1
    assert _retries(budget) == 0  # the retries of the first second are still in the window
    clock.now += WINDOW_S - 1
    assert _retries(budget) == WINDOW_S  # the first second's retries left the window


def test_old_requests_leave_the_window() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.5, min_per_s=0, clock=clock)
    for _ in range(10):
        budget.record_request()
    clock.now += WINDOW_S
    assert not budget.try_retry()


def test_a_clock_set_back_starts_afresh() -> None:
    clock = Clock()
    budget = RetryBudget(ratio=0.0, min_per_s=1, clock=clock)
    assert _retries(budget) == WINDOW_S
    clock.now -= 100
    assert _retries(budget) == WINDOW_S
