from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest

from routing import EndpointSnapshot
from scoring.scorers.kv_utilization import KvUtilizationScorer
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


def _reference(endpoints: list[EndpointSnapshot]) -> dict[str, float]:
    """The rule written the plain way: 1 − clamped usage; unknown ties the worst known."""
    known = {}
    for e in endpoints:
        usage = e.metrics.kv_usage if e.metrics is not None else None
        if usage is not None and not math.isnan(usage):
            known[e.id] = 1.0 - min(1.0, max(0.0, usage))
    fill = min(known.values(), default=0.5)
    return {e.id: known.get(e.id, fill) for e in endpoints}


def test_scores_equal_the_plain_rule_exactly_on_random_pools() -> None:
    gen = random.Random(6)
    edge = [0.0, -0.0, 1.0, 1.0 + 2e-16, -1e-17, -1e-300, 0.5, math.inf, -math.inf, math.nan]
    for case in range(400):
        pool: list[float | None] = [*edge, None] if case % 2 else [gen.random() for _ in range(5)]
        endpoints = [
            endpoint(f"e{k}")
            if gen.random() < 0.05
            else metered(f"e{k}", kv_usage=gen.choice(pool))
            for k in range(gen.randint(0, 8))
        ]
        assert dict(_score(*endpoints)) == _reference(endpoints)
