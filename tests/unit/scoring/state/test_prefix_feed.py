"""The shared prefix feed on a plain endpoint (the simulator's kind, not a pool backend)."""

from __future__ import annotations

from dataclasses import dataclass

from routing.config.profiles import PrefixSection
from routing.types import EndpointSnapshot, EngineMetrics, RoutingRequest, metrics_fresh
from scoring.state.cache_check import CacheCheck
from scoring.state.prefix_feed import DEFAULT_BLOCK_TOKENS, PrefixFeed, kv_tokens
from scoring.state.prefix_index import DEFAULT_CAPACITY_BLOCKS, PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients


@dataclass
class Endpoint:
    id: str
    pending_prefill_tokens: int = 0


def _request(blocks: int, block_chars: int, tokens: int) -> RoutingRequest:
    return RoutingRequest(
        model="m",
        prefix_hashes=tuple(range(1, blocks + 1)),
        prefix_block_chars=block_chars,
        token_estimate=tokens,
    )


def test_kv_tokens_needs_both_numbers() -> None:
    assert kv_tokens(100, 16) == 1600
    assert kv_tokens(None, 16) is None
    assert kv_tokens(100, None) is None
    assert kv_tokens(0, 16) is None


def test_capacity_follows_the_engine_kv_size_in_routing_blocks() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    feed.dispatch(e, _request(4, 256, 300), 0.0, kv_tokens=1024)
    assert feed.index.capacity("a") == 1024 * 4 // 256
    feed.dispatch(Endpoint("b"), _request(4, 256, 300), 0.0, kv_tokens=None)
    assert feed.index.capacity("b") == DEFAULT_CAPACITY_BLOCKS


def test_capacity_follows_the_bytes_per_token_the_engines_report() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    d = feed.dispatch(e, _request(4, 256, 300), 0.0, kv_tokens=1024)  # 1,200 bytes
    feed.observe_prompt(d, 400)  # 3 bytes a token, but too few tokens seen to trust yet
    assert feed.capacity_chars_per_token == 4.0
    for _ in range(12):
        feed.observe_prompt(d, 400)
    assert feed.capacity_chars_per_token == 3.0
    feed.observe_prompt(d, 1)  # 1,200 bytes in one token: not a tokenizer, ignored
    feed.observe_prompt(d, 0)
    assert feed.capacity_chars_per_token == 3.0
    feed.dispatch(e, _request(4, 256, 300), 1.0, kv_tokens=1024)
    assert feed.index.capacity("a") == 1024 * 3 // 256


def test_configured_capacity_is_in_the_feeds_own_blocks() -> None:
    feed = PrefixFeed(PrefixSection(capacity_blocks=100), PrefixIndex())
    own = DEFAULT_BLOCK_TOKENS * 4
    assert feed.block_chars([]) == own
    # Trace blocks four times the feed's: a quarter as many fit.
    feed.dispatch(Endpoint("a"), _request(2, own * 4, 100), 0.0, kv_tokens=10**6)
    assert feed.index.capacity("a") == 25


def test_pending_prefill_and_ttft_learning_round_trip() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a", pending_prefill_tokens=10)
    first = feed.dispatch(e, _request(4, 64, 64), 1.0, kv_tokens=None)
    assert (first.uncached_tokens, first.work_tokens, e.pending_prefill_tokens) == (64, 74, 74)
    again = feed.dispatch(e, _request(4, 64, 64), 2.0, kv_tokens=None)
    assert again.uncached_tokens == 0  # every block is now recorded for `a`
    feed.first_token(first, 0.5)
    feed.first_token(first, None)  # settling twice changes nothing
    assert e.pending_prefill_tokens == 10
    feed.forget("a")
    assert feed.index.blocks("a") == 0


def test_metrics_fresh_is_inclusive_at_the_bound() -> None:
    assert metrics_fresh(1.0, 1.2, 0.2)
    assert not metrics_fresh(1.0, 1.2000001, 0.2)
    assert metrics_fresh(1.0, 1e9, None)


def _chain(tag: int, blocks: int) -> RoutingRequest:
    """A prompt of `blocks` 64-byte blocks (16 tokens each), its hashes named by `tag`."""
    return RoutingRequest(
        model="m",
        prefix_hashes=tuple(range(tag * 1000, tag * 1000 + blocks)),
        prefix_block_chars=64,
        token_estimate=blocks * 16,
    )


def test_withdraw_takes_back_only_what_the_dispatch_added() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    head = _chain(1, 4)
    feed.dispatch(e, head, 0.0, kv_tokens=None)
    d = feed.dispatch(e, _chain(1, 10), 0.0, kv_tokens=None)
    assert (d.matched, feed.index.blocks("a")) == (4, 10)
    assert e.pending_prefill_tokens == 64 + 96
    assert feed.withdraw(d) == 6
    assert feed.index.match(_chain(1, 10).prefix_hashes, ["a"]) == {"a": 4}
    assert e.pending_prefill_tokens == 64  # its own prefill settled, the other's pending
    assert feed.withdraw(d) == 0


def test_withdraw_after_the_block_size_changed_leaves_the_index() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    d = feed.dispatch(Endpoint("a"), _chain(1, 10), 0.0, kv_tokens=None)
    feed.block_chars([_snapshot_with_block(32)])  # a new size: the index starts over
    feed.index.record("a", _chain(1, 10).prefix_hashes)
    assert feed.withdraw(d) == 0
    assert feed.index.blocks("a") == 10


def _snapshot_with_block(size: int) -> EndpointSnapshot:
    return EndpointSnapshot(
        id="a", url="http://a", metrics=EngineMetrics(scraped_at=0.0, block_size=size)
    )


def test_observed_hits_within_the_slack_change_nothing() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    feed.dispatch(e, _chain(1, 40), 0.0, kv_tokens=None)
    d = feed.dispatch(e, _chain(1, 40), 1.0, kv_tokens=None)
    check = feed.observe_cached(d, prompt_tokens=640, cached_tokens=624)
    assert check == CacheCheck(640, 624, 40, 0)
    assert feed.index.blocks("a") == 40


def test_an_eviction_evicts_as_much_of_the_oldest_entries() -> None:
    """The engine lost the prompt's tail: recomputing it pushed out its LRU's oldest blocks,
    and the index does the same (the prompt itself, held again, is spared)."""
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    old, prompt, recent = _chain(1, 30), _chain(2, 40), _chain(3, 20)
    for r in (old, prompt, recent):
        feed.dispatch(e, r, 0.0, kv_tokens=None)
    d = feed.dispatch(e, prompt, 1.0, kv_tokens=None)
    assert d.matched == 40
    check = feed.observe_cached(d, prompt_tokens=640, cached_tokens=160)
    assert check is not None
    # Slack 16 + 16 + 64 tokens: 256 tokens = 16 blocks kept, 24 evicted.
    assert (check.predicted_tokens, check.kept_blocks, check.evicted_weight) == (640, 16, 24)
    assert check.dropped_entries == 24
    match = feed.index.match
    assert match(old.prefix_hashes, ["a"]) == {"a": 6}  # the 24 oldest: old's tail
    assert match(prompt.prefix_hashes, ["a"]) == {"a": 40}
    assert match(recent.prefix_hashes, ["a"]) == {"a": 20}


def test_the_engines_block_size_widens_the_slack() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    feed.dispatch(e, _chain(1, 40), 0.0, kv_tokens=None)
    d = feed.dispatch(e, _chain(1, 40), 1.0, kv_tokens=None)
    # 128-token blocks: a 640-token prompt's hit is at most 512 tokens.
    check = feed.observe_cached(d, 640, 512, engine_block_tokens=128)
    assert check is not None and check.evicted_weight == 0
    check = feed.observe_cached(d, 640, 512)
    assert check is not None and check.evicted_weight > 0


def test_an_observation_without_a_prompt_is_no_check() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    d = feed.dispatch(Endpoint("a"), RoutingRequest(model="m"), 0.0, kv_tokens=None)
    assert feed.observe_cached(d, 0, 0) is None


def test_no_correction_after_the_block_size_changed() -> None:
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    e = Endpoint("a")
    feed.dispatch(e, _chain(1, 10), 0.0, kv_tokens=None)
    d = feed.dispatch(e, _chain(1, 10), 0.0, kv_tokens=None)
    feed.block_chars([_snapshot_with_block(32)])
    feed.index.record("a", _chain(2, 10).prefix_hashes)
    check = feed.observe_cached(d, 160, 0)
    assert check is not None and check.evicted_weight > 0 and check.dropped_entries == 0
    assert feed.index.blocks("a") == 10


class _Points(OnlineTtftModel):
    """Records the points it is taught."""

    def __init__(self) -> None:
        super().__init__(TtftCoefficients(0.02, 2e-4))
        self.points: list[tuple[str, float, float]] = []

    def observe(self, endpoint: str, work_tokens: float, ttft_s: float) -> None:
        self.points.append((endpoint, work_tokens, ttft_s))


def test_a_dispatch_blind_to_an_earlier_remote_one_teaches_no_ttft() -> None:
    model = _Points()
    feed = PrefixFeed(PrefixSection(), PrefixIndex(), model)
    a, b = Endpoint("a"), Endpoint("b")
    before = feed.dispatch(a, _request(4, 64, 100), 1.0, kv_tokens=None)
    blind = feed.dispatch(a, _request(4, 64, 100), 2.0, kv_tokens=None)
    elsewhere = feed.dispatch(b, _request(4, 64, 100), 2.0, kv_tokens=None)
    # Another gateway sent a request to `a` at 1.5, heard of only now.
    assert feed.remote_dispatch("a", 1.5) == 1
    assert (before.blind, blind.blind, elsewhere.blind) == (False, True, False)
    feed.first_token(blind, 0.9)
    assert model.points == []  # not learnt
    assert blind.settled and a.pending_prefill_tokens == before.uncached_tokens
    feed.first_token(before, 0.1)
    assert [p[0] for p in model.points] == ["a"]
    assert feed.remote_dispatch("a", 0.0) == 0  # settled dispatches are not marked again


def test_a_late_remote_dispatch_of_known_size_is_counted_in_the_work() -> None:
    model = _Points()
    feed = PrefixFeed(PrefixSection(), PrefixIndex(), model)
    a = Endpoint("a")
    before = feed.dispatch(a, _request(4, 64, 100), 1.0, kv_tokens=None)
    after = feed.dispatch(a, _request(4, 64, 100), 2.0, kv_tokens=None)
    work = after.work_tokens
    # Another gateway sent a request of 300 uncached tokens to `a` at 1.5, heard of only now.
    assert feed.remote_dispatch("a", 1.5, 300) == 1
    assert (before.blind, after.blind) == (False, False)
    assert (before.work_tokens, after.work_tokens) == (100, work + 300)
    own = before.uncached_tokens + after.uncached_tokens
    assert a.pending_prefill_tokens == own  # this gateway's own count: unchanged
    feed.first_token(after, 0.9)
    assert model.points == [("a", work + 300, 0.9)]
