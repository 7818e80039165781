from __future__ import annotations

from health.state import HealthPolicy, HealthState
from routing.types import Health

POLICY = HealthPolicy(
    fail_threshold=3,
    success_threshold=2,
    passive_fail_threshold=3,
    ejection_base_s=5.0,
    ejection_max_s=40.0,
)


def _probes(state: HealthState, *results: bool) -> list[Health]:
    """Record probes at t=0 and return the health after each."""
    seen = []
    for ok in results:
        state.record_probe(ok, 0.0, None if ok else "boom")
        seen.append(state.health(0.0))
    return seen


def _fail_until_ejected(state: HealthState, now: float) -> int:
    """Record upstream failures at `now` until one ejects; returns how many it took."""
    for n in range(1, 100):
        if state.record_upstream_failure(now, "connect"):
            return n
    raise AssertionError("never ejected")


# -- active probes ------------------------------------------------------------------------


def test_unknown_before_any_probe() -> None:
    assert HealthState(POLICY).health(0.0) is Health.UNKNOWN


def test_first_good_probe_makes_healthy_at_once() -> None:
    assert _probes(HealthState(POLICY), True) == [Health.HEALTHY]


def test_first_failed_probe_makes_unhealthy_at_once() -> None:
    state = HealthState(POLICY)
    assert _probes(state, False) == [Health.UNHEALTHY]
    assert state.last_error == "boom"


def test_fail_threshold_after_the_first_probe() -> None:
    state = HealthState(POLICY)
    assert _probes(state, True, False, False, False) == [
        Health.HEALTHY,
        Health.HEALTHY,
        Health.HEALTHY,
        Health.UNHEALTHY,
    ]


def test_success_threshold_to_recover() -> None:
    state = HealthState(POLICY)
    assert _probes(state, False, True, True) == [Health.UNHEALTHY, Health.UNHEALTHY, Health.HEALTHY]


def test_failures_must_be_consecutive() -> None:
    state = HealthState(POLICY)
    seen = _probes(state, True, False, False, True, False, False)
    assert seen[-1] is Health.HEALTHY
    assert _probes(state, False) == [Health.UNHEALTHY]


def test_successes_must_be_consecutive() -> None:
    state = HealthState(POLICY)
    assert _probes(state, False, True, False, True) == [Health.UNHEALTHY] * 4
    assert _probes(state, True) == [Health.HEALTHY]


def test_thresholds_of_one() -> None:
    state = HealthState(HealthPolicy(fail_threshold=1, success_threshold=1))
    assert _probes(state, True, False, True, False) == [
        Health.HEALTHY,
        Health.UNHEALTHY,
        Health.HEALTHY,
        Health.UNHEALTHY,
    ]


# -- passive ejection ---------------------------------------------------------------------


def test_ejected_after_consecutive_upstream_failures() -> None:
    state = HealthState(POLICY)
    _probes(state, True)
    now = 100.0
    assert state.record_upstream_failure(now, "e1") is False
    assert state.record_upstream_failure(now, "e2") is False
    assert state.health(now) is Health.HEALTHY
    assert state.record_upstream_failure(now, "e3") is True
    assert state.health(now) is Health.EJECTED
    assert state.ejected_until() == now + 5.0
    assert state.last_error == "e3"


def test_success_between_failures_resets_the_count() -> None:
    state = HealthState(POLICY)
    state.record_upstream_failure(0.0, "e")
    state.record_upstream_failure(0.0, "e")
    state.record_upstream_success()
    assert _fail_until_ejected(state, 0.0) == 3


def test_readmitted_after_the_backoff() -> None:
    state = HealthState(POLICY)
    _probes(state, True)
    _fail_until_ejected(state, 10.0)
    assert state.health(14.999) is Health.EJECTED
    assert state.health(15.0) is Health.HEALTHY


def test_readmission_returns_the_probe_health() -> None:
    state = HealthState(POLICY)
    _probes(state, False)
    _fail_until_ejected(state, 0.0)
    assert state.health(1.0) is Health.EJECTED
    assert state.health(5.0) is Health.UNHEALTHY


def test_failures_while_ejected_are_not_counted() -> None:
    state = HealthState(POLICY)
    _fail_until_ejected(state, 0.0)
    for _ in range(10):
        assert state.record_upstream_failure(1.0, "late") is False
    assert state.ejected_until() == 5.0
    assert state.last_error == "late"


def test_one_failure_after_readmission_reejects_for_longer() -> None:
    state = HealthState(POLICY)
    now = 0.0
    assert _fail_until_ejected(state, now) == 3
    backoffs = [state.ejected_until() - now]
    for _ in range(5):
        now = state.ejected_until()  # re-admitted
        assert _fail_until_ejected(state, now) == 1
        backoffs.append(state.ejected_until() - now)
    assert backoffs == [5.0, 10.0, 20.0, 40.0, 40.0, 40.0]  # doubling, capped at 40


def test_success_after_readmission_resets_the_backoff() -> None:
    state = HealthState(POLICY)
    _fail_until_ejected(state, 0.0)
    _fail_until_ejected(state, 5.0)  # 10 s
    state.record_upstream_success()
    now = 15.0
    assert _fail_until_ejected(state, now) == 3  # the threshold applies again
    assert state.ejected_until() == now + 5.0


def test_probes_do_not_end_an_ejection() -> None:
    state = HealthState(POLICY)
    _fail_until_ejected(state, 0.0)
    state.record_probe(True, 1.0)
    state.record_probe(True, 2.0)
    assert state.health(2.0) is Health.EJECTED
    assert state.health(5.0) is Health.HEALTHY


def test_backoff_stays_capped_after_many_ejections() -> None:
    # A backend that passes probes but fails every request is re-ejected forever; the
    # exponent must not overflow a float after ~1024 ejections.
    state = HealthState(POLICY)
    now = 0.0
    for _ in range(1100):
        _fail_until_ejected(state, now)
        now = state.ejected_until()
    state.record_upstream_failure(now, "again")
    assert state.ejected_until() == now + 40.0
