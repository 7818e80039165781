from __future__ import annotations

from collections.abc import Mapping

import pytest

from routing import EndpointSnapshot
from scoring.scorers.running_requests import RunningRequestsScorer
from tests.unit.scoring.helpers import context, endpoint, metered, request


def _score(*endpoints: EndpointSnapshot) -> Mapping[str, float]:
    return RunningRequestsScorer("running").score(request(), list(endpoints), context())


def test_min_max_normalised_inverse_of_running() -> None:
    scores = _score(metered("a", running=4), metered("b", running=8), metered("c", running=12))
    assert scores == {"a": 1.0, "b": 0.5, "c": 0.0}


def test_ignores_waiting_and_in_flight() -> None:
    scores = _score(metered("a", in_flight=30, running=1, waiting=40), metered("b", running=5))
    assert scores == {"a": 1.0, "b": 0.0}


def test_all_equal_single_and_empty() -> None:
    assert _score(metered("a", running=0), metered("b", running=0)) == {"a": 1.0, "b": 1.0}
    assert _score(metered("x", running=7)) == {"x": 1.0}
    assert _score() == {}


def test_unknown_metrics_score_as_the_worst_known_candidate() -> None:
    scores = _score(
        metered("a", running=2), metered("b", running=6), metered("c", running=3), endpoint("stale")
    )
    assert scores == {"a": 1.0, "b": 0.0, "c": pytest.approx(0.75), "stale": 0.0}
    assert _score(endpoint("a"), metered("b", waiting=3)) == {"a": 0.5, "b": 0.5}
