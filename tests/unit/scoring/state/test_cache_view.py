from routing.kv_events import BlockStored
from routing.types import RoutingRequest
from scoring.scorers.precise_prefix import PrecisePrefixScorer
from scoring.state.cache_view import CacheView
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_hash import hash_blocks, prefix_seed
from scoring.state.prefix_index import PrefixIndex
from scoring.state.token_blocks import root_key, token_block_keys
from tests.unit.scoring.helpers import context, endpoint

B = 16
IDS = tuple(range(4 * B + 3))
KEYS = token_block_keys(IDS, B, root_key("m"))
HASHES = hash_blocks(bytes(256), prefix_seed("m"), 64)


def _view() -> CacheView:
    approx = PrefixIndex()
    approx.record("approx", HASHES[:2])
    precise = PreciseIndex()
    precise.apply("exact", [BlockStored((1, 2, 3), None, IDS[: 3 * B], B)], "m")
    return CacheView(approx, precise)


REQ = RoutingRequest(
    "m", prefix_hashes=HASHES, prefix_block_chars=64, token_estimate=64,
    prompt_tokens=len(IDS), token_keys=((B, KEYS),),
)  # fmt: skip


def test_precise_where_events_reach_else_approximate() -> None:
    view = _view()
    ids = ["exact", "approx"]
    assert view.source_list(REQ, ids) == ["precise", "approximate"]
    assert view.cached_list(REQ, ids, 4.0, now=0.0) == [3 * B, 2 * 64 / 4]
    assert view.share_list(REQ, ids, now=0.0) == [3 / 4, 2 / 4]


def test_without_token_keys_every_endpoint_is_approximate() -> None:
    view = _view()
    req = RoutingRequest("m", prefix_hashes=HASHES, prefix_block_chars=64, token_estimate=64)
    assert view.source_list(req, ["exact"]) == ["approximate"]
    assert view.share_list(req, ["exact", "approx"], now=0.0) == [0.0, 0.5]


def test_precise_prefix_scorer_scores_the_shares() -> None:
    scorer = PrecisePrefixScorer("p", _view())
    scores = scorer.score(REQ, [endpoint("exact"), endpoint("approx")], context())
    assert dict(scores) == {"exact": 0.75, "approx": 0.5}


def test_estimated_ttft_reads_the_precise_view_when_asked() -> None:
    from scoring.scorers.estimated_ttft import EstimatedTtftScorer
    from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients

    view = _view()
    model = OnlineTtftModel(TtftCoefficients(0.01, 1e-3))
    eps = [endpoint("exact"), endpoint("approx")]
    precise = EstimatedTtftScorer(
        "t", view.approx, model, view, params=EstimatedTtftScorer.Params(cache_view="precise")
    )
    est = precise.estimate(REQ, eps)
    assert est["exact"] == 0.01 + 1e-3 * (len(IDS) - 3 * B)  # exactly the uncached tokens
    assert est["approx"] == 0.01 + 1e-3 * (len(IDS) - 32)  # 2 blocks of 64 bytes ÷ 4
    plain = EstimatedTtftScorer("t", view.approx, model, view)
    assert plain.estimate(REQ, eps)["exact"] == 0.01 + 1e-3 * 64  # approximate: no match
