"""The shared prefix feed on a plain endpoint (the simulator's kind, not a pool backend)."""

from __future__ import annotations

from dataclasses import dataclass

from routing.types import RoutingRequest, metrics_fresh
from scoring.prefix_feed import DEFAULT_BLOCK_TOKENS, PrefixFeed, kv_tokens
from scoring.prefix_index import DEFAULT_CAPACITY_BLOCKS, PrefixIndex
from scoring.profiles import PrefixSection


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
