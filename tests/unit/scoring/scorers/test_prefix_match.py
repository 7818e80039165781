from __future__ import annotations

import pytest

from routing import RoutingRequest
from scoring.scorers.prefix_match import PrefixMatchScorer
from scoring.state.prefix_hash import covered_chars, hash_blocks, prefix_seed
from scoring.state.prefix_index import PrefixIndex
from tests.unit.scoring.helpers import context, endpoint

BLOCK = 8
HASHES = hash_blocks(bytes(covered_chars(200, BLOCK)), prefix_seed("m"), BLOCK)


def _request(hashes: tuple[int, ...] = HASHES) -> RoutingRequest:
    return RoutingRequest(model="m", prefix_hashes=hashes, prefix_block_chars=BLOCK)


def test_score_is_the_covered_fraction_of_the_prompt() -> None:
    assert len(HASHES) == 200
    index = PrefixIndex()
    index.record("half-blocks", HASHES[:100])
    index.record("far", HASHES[:130])
    index.record("all", HASHES)
    scorer = PrefixMatchScorer("prefix", index)
    eps = [endpoint(i) for i in ("half-blocks", "far", "all", "cold")]
    scores = scorer.score(_request(), eps, context())
    total = 128 * BLOCK + 72 * 2 * BLOCK  # far blocks count twice: by length, not by count
    assert covered_chars(200, BLOCK) == total
    assert scores == {
        "half-blocks": pytest.approx(100 * BLOCK / total),
        "far": pytest.approx((128 + 2 * 2) * BLOCK / total),
        "all": 1.0,
        "cold": 0.0,
    }


def test_no_hashes_scores_zero() -> None:
    index = PrefixIndex()
    index.record("a", HASHES)
    scorer = PrefixMatchScorer("prefix", index)
    scores = scorer.score(_request(()), [endpoint("a"), endpoint("b")], context())
    assert scores == {"a": 0.0, "b": 0.0}
    assert scorer.score(_request(), [], context()) == {}
