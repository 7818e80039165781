from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from routing import EndpointSnapshot
from scoring.kv_utilization import KvUtilizationScorer
from tests.unit.scoring.helpers import context, endpoint, metered, request


def _score(*endpoints: EndpointSnapshot) -> Mapping[str, float]:
    return KvUtilizationScorer("kv").score(request(), list(endpoints), context())


def test_one_minus_usage_not_normalised() -> None:
    scores = _score(
        metered("a", kv_usage=0.0), metered("b", kv_usage=0.25), metered("c", kv_usage=1.0)
    )
    assert scores == {"a": 1.0, "b": 0.75, "c": 0.0}
    # Absolute: two lightly used caches stay close rather than being stretched to 1 and 0.
    assert _score(metered("a", kv_usage=0.1), metered("b", kv_usage=0.2)) == {
        "a": pytest.approx(0.9),
        "b": pytest.approx(0.8),
    }


def test_out_of_range_usage_is_clamped() -> None:
    assert _score(metered("a", kv_usage=-0.5), metered("b", kv_usage=1.7)) == {"a": 1.0, "b": 0.0}


def test_unknown_metrics_score_as_the_worst_known_candidate() -> None:
    scores = _score(
        metered("a", kv_usage=0.2),
        metered("b", kv_usage=0.6),
        endpoint("stale"),  # metrics None
        metered("silent"),  # engine reports no kv_usage
        metered("nan", kv_usage=math.nan),
    )
    assert scores == {
        "a": pytest.approx(0.8),
        "b": pytest.approx(0.4),
        "stale": pytest.approx(0.4),
        "silent": pytest.approx(0.4),
        "nan": pytest.approx(0.4),
    }


def test_nothing_known_is_neutral() -> None:
    assert _score(endpoint("a"), endpoint("b")) == {"a": 0.5, "b": 0.5}


def test_single_empty_and_all_equal() -> None:
    assert _score(metered("x", kv_usage=0.5)) == {"x": 0.5}
    assert _score() == {}
    assert _score(metered("a", kv_usage=0.3), metered("b", kv_usage=0.3)) == {
        "a": pytest.approx(0.7),
        "b": pytest.approx(0.7),
    }


def test_factory_rejects_params() -> None:
    assert KvUtilizationScorer.from_params("kv", {}).name == "kv"
    with pytest.raises(ValueError, match=r"unknown parameter.*'threshold'"):
        KvUtilizationScorer.from_params("kv", {"threshold": 0.8})
