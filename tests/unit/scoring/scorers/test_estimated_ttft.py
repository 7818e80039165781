from __future__ import annotations

from dataclasses import replace

import pytest

from routing import EndpointSnapshot, RoutingRequest
from scoring.scorers.estimated_ttft import EstimatedTtftScorer
from scoring.state.prefix_hash import hash_blocks, prefix_seed
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from tests.unit.scoring.helpers import context, endpoint, registry

BLOCK = 64
PROMPT = bytes(100 * BLOCK)  # 100 base blocks, 1,600 tokens at 4 bytes a token
HASHES = hash_blocks(PROMPT, prefix_seed("m"), BLOCK)
REQUEST = RoutingRequest(
    model="m", prefix_hashes=HASHES, prefix_block_chars=BLOCK, token_estimate=len(PROMPT) // 4
)
PRIOR = TtftCoefficients(overhead_s=0.02, prefill_token_s=1e-3)


def _scorer(index: PrefixIndex, model: OnlineTtftModel | None = None) -> EstimatedTtftScorer:
    return EstimatedTtftScorer("ttft", index, model or OnlineTtftModel(PRIOR))


def _pending(endpoint_id: str, tokens: int) -> EndpointSnapshot:
    return replace(endpoint(endpoint_id), pending_prefill_tokens=tokens)


def _warm_index() -> PrefixIndex:
    index = PrefixIndex()
    index.record("warm", HASHES)
    index.record("half", HASHES[:50])
    return index


def test_the_replica_holding_the_prefix_wins_when_idle() -> None:
    scorer = _scorer(_warm_index())
    eps = [endpoint("warm"), endpoint("half"), endpoint("cold")]
    assert scorer.estimate(REQUEST, eps) == {
        "warm": pytest.approx(0.02),
        "half": pytest.approx(0.02 + 800 * 1e-3),
        "cold": pytest.approx(0.02 + 1_600 * 1e-3),
    }
    assert scorer.score(REQUEST, eps, context()) == {
        "warm": 1.0,
        "half": pytest.approx(0.02 / 0.82),
        "cold": pytest.approx(0.02 / 1.62),
    }


@pytest.mark.parametrize(("queued", "warm_wins"), [(0, True), (1_599, True), (1_601, False)])
def test_a_busy_warm_replica_loses_once_its_queue_costs_more_than_recomputing(
    queued: int, warm_wins: bool
) -> None:
    scorer = _scorer(_warm_index())
    eps = [_pending("warm", queued), endpoint("cold")]
    est = scorer.estimate(REQUEST, eps)
    assert est["warm"] == pytest.approx(0.02 + queued * 1e-3)
    scores = scorer.score(REQUEST, eps, context())
    assert (scores["warm"] == 1.0) is warm_wins
    assert (scores["cold"] == 1.0) is not warm_wins


def test_queued_work_adds_to_the_requests_own() -> None:
    scorer = _scorer(_warm_index())
    est = scorer.estimate(REQUEST, [_pending("half", 300), _pending("cold", 300)])
    assert est == {
        "half": pytest.approx(0.02 + (800 + 300) * 1e-3),
        "cold": pytest.approx(0.02 + (1_600 + 300) * 1e-3),
    }


def test_score_is_the_fastest_estimate_over_each_estimate() -> None:
    scorer = _scorer(PrefixIndex())
    eps = [_pending("a", 0), _pending("b", 400), _pending("c", 2_400)]
    est = scorer.estimate(REQUEST, eps)
    scores = scorer.score(REQUEST, eps, context())
    assert scores == {e: pytest.approx(est["a"] / est[e]) for e in est}
    assert scores["a"] == 1.0 and 0 < scores["c"] < scores["b"] < 1


def test_learned_coefficients_per_endpoint_are_used() -> None:
    model = OnlineTtftModel(PRIOR)
    for w in (100, 2_000, 500, 4_000, 1_000, 3_000, 50, 2_500):
        model.observe("fast", w, 0.01 + 2e-4 * w)  # five times quicker per token than the prior
        model.observe("slow-start", w, 0.15 + 2e-4 * w)
    scorer = _scorer(_warm_index(), model)
    eps = [endpoint("warm"), endpoint("fast"), endpoint("slow-start")]
    est = scorer.estimate(REQUEST, eps)
    assert est == {
        "warm": pytest.approx(0.08),  # no line of its own: the others' mean, nothing to prefill
        "fast": pytest.approx(0.01 + 1_600 * 2e-4),
        "slow-start": pytest.approx(0.15 + 1_600 * 2e-4),
    }
    queued = scorer.score(REQUEST, [_pending("warm", 2_000), endpoint("fast")], context())
    assert queued["fast"] == 1.0 and queued["warm"] < 1.0


def test_without_hashes_everything_is_uncached() -> None:
    scorer = _scorer(_warm_index())
    no_hashes = replace(REQUEST, prefix_hashes=())
    est = scorer.estimate(no_hashes, [endpoint("warm"), endpoint("cold")])
    assert est == {"warm": pytest.approx(1.62), "cold": pytest.approx(1.62)}


def test_cached_prefix_longer_than_the_estimate_leaves_no_negative_work() -> None:
    scorer = _scorer(_warm_index())
    short_estimate = replace(REQUEST, token_estimate=10)
    assert scorer.estimate(short_estimate, [_pending("warm", 5)]) == {
        "warm": pytest.approx(0.02 + 5e-3)
    }


def test_zero_estimates_score_one() -> None:
    free = OnlineTtftModel(TtftCoefficients(0.0, 0.0))
    scores = _scorer(PrefixIndex(), free).score(REQUEST, [endpoint("a"), endpoint("b")], context())
    assert scores == {"a": 1.0, "b": 1.0}
    assert _scorer(PrefixIndex()).score(REQUEST, [], context()) == {}


def test_chars_per_token_converts_the_cached_prefix() -> None:
    index = _warm_index()
    model = OnlineTtftModel(PRIOR)
    scorer = registry(index, model).make_scorer(
        "estimated-ttft-scorer", "t", {"chars_per_token": 8}
    )
    assert isinstance(scorer, EstimatedTtftScorer)
    # 50 blocks of 64 bytes at 8 bytes a token: 400 cached tokens of the 1,600 estimated.
    assert scorer.estimate(REQUEST, [endpoint("half")]) == {
        "half": pytest.approx(0.02 + 1_200 * 1e-3)
    }


def test_registry_checks_params() -> None:
    plugins = registry()
    assert plugins.make_scorer("estimated-ttft-scorer", "t", {}).name == "t"
    with pytest.raises(ValueError, match=r"unknown parameter.*'overhead_s'"):
        plugins.make_scorer("estimated-ttft-scorer", "t", {"overhead_s": 1})
    with pytest.raises(
        ValueError, match="'chars_per_token' must be a finite number and > 0, got 0"
    ):
        plugins.make_scorer("estimated-ttft-scorer", "t", {"chars_per_token": 0})
    with pytest.raises(ValueError, match="chars_per_token must be > 0"):
        EstimatedTtftScorer(
            "t", PrefixIndex(), OnlineTtftModel(PRIOR), params=EstimatedTtftScorer.Params(0)
        )


def _full_pair() -> PrefixIndex:
    """Two full replicas of 100 base blocks: `popular` holds a prompt requests reused three
    times, `oneoff` one used once; neither holds the request's prompt."""
    index = PrefixIndex(100)
    popular = hash_blocks(bytes(100 * BLOCK), prefix_seed("popular"), BLOCK)
    oneoff = hash_blocks(bytes(100 * BLOCK), prefix_seed("oneoff"), BLOCK)
    for _ in range(4):
        index.record("popular", popular)
    index.record("oneoff", oneoff)
    return index


def test_eviction_cost_steers_a_new_prefix_away_from_a_popular_one() -> None:
    index = _full_pair()
    eps = [endpoint("popular"), endpoint("oneoff")]
    plain = _scorer(index).estimate(REQUEST, eps)
    assert plain["popular"] == pytest.approx(plain["oneoff"])  # TTFT alone: a tie
    aware = EstimatedTtftScorer(
        "ttft",
        index,
        OnlineTtftModel(PRIOR),
        params=EstimatedTtftScorer.Params(eviction_weight=0.5),
    )
    est = aware.estimate(REQUEST, eps)
    # Storing 100 blocks evicts all of `popular`'s, each worth 3 ÷ 4 of its 16 tokens.
    assert est["popular"] == pytest.approx(plain["popular"] + 0.5 * 1e-3 * 100 * 16 * 3 / 4)
    assert est["oneoff"] == pytest.approx(plain["oneoff"])
    assert aware.score(REQUEST, eps, context())["oneoff"] == 1.0


def test_eviction_cost_is_nothing_where_the_prompt_is_held() -> None:
    index = _full_pair()
    index.record("popular", HASHES)  # now held there (evicting what was there)
    aware = EstimatedTtftScorer(
        "ttft", index, OnlineTtftModel(PRIOR), params=EstimatedTtftScorer.Params(eviction_weight=4)
    )
    est = aware.estimate(REQUEST, [endpoint("popular")])
    assert est["popular"] == pytest.approx(0.02)
