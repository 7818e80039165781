"""The app's wiring of shared state: what another gateway's placement does to this one's index."""

from __future__ import annotations

from gateway.sharing import remote_placement
from gateway.state.outbox import now_ms
from health.pool import BackendPool, BackendSpec
from health.state import HealthPolicy
from routing.config.profiles import PrefixSection
from routing.types import EngineMetrics
from scoring.state.events import EventCounters, Placement
from scoring.state.mirror import Mirror
from scoring.state.prefix_feed import PrefixFeed
from scoring.state.prefix_index import DEFAULT_CAPACITY_BLOCKS, PrefixIndex


def _setup() -> tuple[BackendPool, PrefixFeed, Mirror]:
    specs = (BackendSpec(url="http://a:1", id="a"), BackendSpec(url="http://b:1", id="b"))
    pool = BackendPool(specs, HealthPolicy(), lambda: 0.0)
    feed = PrefixFeed(PrefixSection(), PrefixIndex())
    mirror = Mirror(
        "me",
        EventCounters(),
        feed.index,
        lambda: 64,
        lambda backend: pool.find(backend) is not None,
        record=lambda backend, hashes, chars: remote_placement(feed, pool, backend, hashes, chars),
    )
    return pool, feed, mirror


def test_another_gateways_placements_are_bounded_by_the_replicas_kv_size() -> None:
    # A replica this gateway never sent anything to is bounded all the same, by its scraped
    # KV size: the blocks another gateway's later placements push out are gone here too.
    pool, feed, mirror = _setup()
    a = pool.find("a")
    assert a is not None
    a.metrics = EngineMetrics(scraped_at=0.0, num_blocks=4, block_size=16)
    expected = int(4 * 16 * feed.capacity_chars_per_token // 64)
    assert 0 < expected < 40
    for n in range(10):
        hashes = tuple(range(n * 4, n * 4 + 4))
        mirror.apply(Placement("other", "a", 64, hashes, now_ms()))
    assert feed.index.capacity("a") == expected
    assert feed.index.blocks("a") <= expected
    assert feed.index.match((36, 37, 38, 39), ("a",)) == {"a": 4}  # the latest kept
    assert feed.index.match((0, 1, 2, 3), ("a",)) == {"a": 0}  # the first pushed out
    # No metrics scraped yet: as a local dispatch, the default bound.
    mirror.apply(Placement("other", "b", 64, (1, 2), now_ms()))
    assert feed.index.capacity("b") == DEFAULT_CAPACITY_BLOCKS
    assert feed.index.match((1, 2), ("b",)) == {"b": 2}
