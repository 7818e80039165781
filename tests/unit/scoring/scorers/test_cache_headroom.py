from __future__ import annotations

import pytest

from routing import RoutingRequest
from scoring.scorers.cache_headroom import CacheHeadroomScorer
from scoring.state.prefix_index import PrefixIndex
from tests.unit.scoring.helpers import context, endpoint


def test_emptier_replicas_score_higher() -> None:
    index = PrefixIndex(default_capacity_blocks=100)
    index.record("a", list(range(80)))
    index.record("b", list(range(1000, 1020)))
    scores = CacheHeadroomScorer("h", index).score(
        RoutingRequest(model="m"), [endpoint("a"), endpoint("b"), endpoint("c")], context()
    )
    assert scores == pytest.approx({"a": 0.2, "b": 0.8, "c": 1.0})


def test_full_replica_scores_zero_and_fill_is_capped() -> None:
    index = PrefixIndex(default_capacity_blocks=10)
    index.record("a", list(range(50)))  # evicts down to capacity
    assert index.fill("a") == 1.0
    scores = CacheHeadroomScorer("h", index).score(
        RoutingRequest(model="m"), [endpoint("a")], context()
    )
    assert scores == {"a": 0.0}
