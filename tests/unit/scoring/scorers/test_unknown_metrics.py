from __future__ import annotations

from scoring.scorers.unknown_metrics import NO_INFORMATION, fill_unknown
from tests.unit.scoring.helpers import endpoint


def test_unknown_endpoints_get_the_worst_known_score() -> None:
    endpoints = [endpoint("a"), endpoint("b"), endpoint("c")]
    assert fill_unknown(endpoints, {"a": 0.9, "b": 0.3}) == {"a": 0.9, "b": 0.3, "c": 0.3}


def test_nothing_known_gives_no_information_to_all() -> None:
    assert NO_INFORMATION == 0.5
    assert fill_unknown([endpoint("a"), endpoint("b")], {}) == {"a": 0.5, "b": 0.5}


def test_keys_are_exactly_the_candidates() -> None:
    assert fill_unknown([endpoint("a")], {"a": 1.0, "gone": 0.0}) == {"a": 1.0}
    assert fill_unknown([], {}) == {}
