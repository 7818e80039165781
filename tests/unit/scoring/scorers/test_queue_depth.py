from __future__ import annotations

from collections.abc import Mapping

import pytest

from routing import EndpointSnapshot
from scoring.scorers.queue_depth import QueueDepthScorer, inverse_min_max
from tests.unit.scoring.helpers import context, endpoint, metered, request


def _score(*endpoints: EndpointSnapshot) -> Mapping[str, float]:
    return QueueDepthScorer("queue").score(request(), list(endpoints), context())


def test_min_max_normalised_inverse_of_waiting() -> None:
    scores = _score(
        metered("a", waiting=2),
        metered("b", waiting=7),
        metered("c", waiting=12),
        metered("d", waiting=10),
    )
    assert scores == {"a": 1.0, "b": 0.5, "c": 0.0, "d": pytest.approx(0.2)}


def test_ignores_in_flight_and_running() -> None:
    scores = _score(metered("a", in_flight=50, waiting=0, running=9), metered("b", waiting=4))
    assert scores == {"a": 1.0, "b": 0.0}


def test_all_equal_and_zeros_score_one() -> None:
    assert _score(metered("a", waiting=0), metered("b", waiting=0)) == {"a": 1.0, "b": 1.0}
    assert _score(metered("a", waiting=3), metered("b", waiting=3)) == {"a": 1.0, "b": 1.0}
    assert _score(metered("x", waiting=9)) == {"x": 1.0}
    assert _score() == {}


def test_unknown_metrics_score_as_the_worst_known_candidate() -> None:
    scores = _score(
        metered("a", waiting=0), metered("b", waiting=8), endpoint("stale"), metered("silent")
    )
    assert scores == {"a": 1.0, "b": 0.0, "stale": 0.0, "silent": 0.0}
    # Min and max come from the known candidates only.
    assert _score(metered("a", waiting=4), endpoint("stale")) == {"a": 1.0, "stale": 1.0}


def test_nothing_known_is_neutral() -> None:
    assert _score(endpoint("a"), metered("b")) == {"a": 0.5, "b": 0.5}


def test_inverse_min_max() -> None:
    assert inverse_min_max({}) == {}
    assert inverse_min_max({"a": 1.0, "b": 3.0}) == {"a": 1.0, "b": 0.0}
