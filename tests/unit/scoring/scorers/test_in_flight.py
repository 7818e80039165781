from __future__ import annotations

from dataclasses import replace

import pytest

from scoring.scorers.in_flight import InFlightScorer
from tests.unit.scoring.helpers import context, endpoint, request


def test_min_max_normalised_inverse_load() -> None:
    endpoints = [endpoint("a", 0), endpoint("b", 5), endpoint("c", 10), endpoint("d", 8)]
    scores = InFlightScorer("load").score(request(), endpoints, context())
    assert scores == {"a": 1.0, "b": 0.5, "c": 0.0, "d": pytest.approx(0.2)}


def test_min_need_not_be_zero() -> None:
    endpoints = [endpoint("a", 3), endpoint("b", 7)]
    assert InFlightScorer("load").score(request(), endpoints, context()) == {"a": 1.0, "b": 0.0}


def test_all_equal_scores_one() -> None:
    endpoints = [endpoint("a", 4), endpoint("b", 4)]
    assert InFlightScorer("load").score(request(), endpoints, context()) == {"a": 1.0, "b": 1.0}
    assert InFlightScorer("load").score(request(), [endpoint("x", 9)], context()) == {"x": 1.0}


def test_empty() -> None:
    assert InFlightScorer("load").score(request(), [], context()) == {}


def test_the_other_gateways_requests_count_as_load() -> None:
    a, b = endpoint("a", 1), endpoint("b", 3)
    endpoints = [replace(a, remote_in_flight=4), b]  # 5 in flight on a, fleet-wide
    assert InFlightScorer("load").score(request(), endpoints, context()) == {"a": 0.0, "b": 1.0}
