"""Capacity: the in-flight cap, and the saturation budget from scraped engine metrics."""

from __future__ import annotations

from dataclasses import replace

from routing.admission import InFlightCap, SaturationBudget
from routing.types import EndpointSnapshot, EngineMetrics, Health


def _ep(
    name: str,
    waiting: int | None = 0,
    kv: float | None = 0.1,
    at: float = 1.0,
    health: Health = Health.HEALTHY,
    metrics: bool = True,
) -> EndpointSnapshot:
    m = EngineMetrics(scraped_at=at, waiting=waiting, running=1, kv_usage=kv) if metrics else None
    return EndpointSnapshot(id=name, url=f"http://{name}", health=health, metrics=m)


def test_in_flight_cap_counts_healthy_backends_only() -> None:
    cap = InFlightCap(4)
    eps = [_ep("a"), _ep("b"), _ep("c", health=Health.UNHEALTHY)]
    assert cap.room(eps, admitted=0) == 8
    assert cap.room(eps, admitted=7) == 1
    assert cap.room(eps, admitted=9) == 0


def test_in_flight_cap_counts_the_other_gateways_requests_too() -> None:
    cap = InFlightCap(4)
    eps = [replace(_ep("a"), remote_in_flight=3), _ep("b"), _ep("c", health=Health.UNHEALTHY)]
    eps[2] = replace(eps[2], remote_in_flight=50)  # not a candidate: its load does not count
    assert cap.room(eps, admitted=2) == 8 - 2 - 3


def test_in_flight_cap_without_a_healthy_backend_holds_nothing_back() -> None:
    # The router answers 503 at once; waiting in the queue would only delay that answer.
    assert InFlightCap(4).room([_ep("a", health=Health.UNHEALTHY)], admitted=0) is None


def test_saturation_budget_is_the_headroom_below_the_filter_thresholds() -> None:
    budget = SaturationBudget(queue_threshold=5, kv_threshold=0.8)
    eps = [_ep("a", waiting=0), _ep("b", waiting=4), _ep("c", waiting=9), _ep("d", kv=0.9)]
    assert budget.room(eps, admitted=0) == 6 + 2


def test_saturation_budget_is_spent_until_fresher_metrics_arrive() -> None:
    budget = SaturationBudget(queue_threshold=2, kv_threshold=0.8)
    eps = [_ep("a", waiting=0, at=1.0)]
    assert budget.room(eps, 0) == 3
    for _ in range(3):
        budget.took()
    assert budget.room(eps, 0) == 0  # the same scrape: the burst cannot spend it twice
    budget.took()
    assert budget.room(eps, 0) == 0
    assert budget.room([_ep("a", waiting=1, at=1.05)], 0) == 2  # a new page, a new budget


def test_a_finished_request_gives_its_place_back_up_to_the_pages_budget() -> None:
    # Without it a sequence of short requests waited for the next scrape after every
    # `queue_threshold + 1` of them: throughput capped at one budget per scrape.
    budget = SaturationBudget(queue_threshold=2, kv_threshold=0.8)
    eps = [_ep("a", waiting=0, at=1.0)]
    for _ in range(10):
        assert budget.room(eps, 0) == 3
        budget.took()
        budget.gave_back()
    budget.gave_back()  # finished requests admitted before the page: no more than it allows
    assert budget.room(eps, 0) == 3


def test_every_backend_saturated_means_no_room() -> None:
    budget = SaturationBudget(queue_threshold=5, kv_threshold=0.8)
    assert budget.room([_ep("a", waiting=6), _ep("b", kv=0.95)], 0) == 0


def test_saturation_without_any_metrics_is_no_evidence() -> None:
    budget = SaturationBudget(queue_threshold=5, kv_threshold=0.8)
    assert budget.room([_ep("a", metrics=False)], 0) is None
    # Mixed: a backend without metrics counts as an idle one.
    assert budget.room([_ep("a", metrics=False), _ep("b", waiting=6)], 0) == 6
