from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sim.engine.kv_cache import ROOT_HASH, PagedKVCache, chain_block_hashes, hash_block


def _cached_request(cache: PagedKVCache, tokens: list[int]) -> tuple[list[int], list[int]]:
    """Allocate and commit the full blocks of `tokens`, like a finished prefill."""
    hashes = chain_block_hashes(tokens, cache.block_size)
    blocks = cache.allocate(len(hashes))
    for block, block_hash in zip(blocks, hashes, strict=True):
        cache.cache_block(block, block_hash)
    return blocks, hashes


def test_hash_chain_depends_on_the_parent() -> None:
    first = chain_block_hashes([1, 2, 3, 4], 2)
    second = chain_block_hashes([9, 9, 3, 4], 2)
    assert len(first) == 2
    assert first[1] != second[1]  # same block [3, 4], different prefix
    assert first == chain_block_hashes((1, 2, 3, 4, 5), 2)  # the partial block is not hashed
    assert first[0] == hash_block(ROOT_HASH, (1, 2))
    assert first[1] == hash_block(first[0], (3, 4))


def test_hashes_do_not_depend_on_the_process_hash_seed() -> None:
    code = "from sim.engine.kv_cache import chain_block_hashes as c; print(c(range(64), 16))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {f"{chain_block_hashes(list(range(64)), 16)}\n"}


def test_find_cached_prefix_stops_at_the_first_miss() -> None:
    cache = PagedKVCache(num_blocks=8, block_size=2)
    _, hashes = _cached_request(cache, [1, 2, 3, 4, 5, 6])
    assert cache.find_cached_prefix(hashes) == 3
    other = chain_block_hashes([1, 2, 3, 4, 7, 7], 2)
    assert cache.find_cached_prefix(other) == 2
    assert cache.find_cached_prefix(chain_block_hashes([0, 0, 3, 4], 2)) == 0


def test_blocks_are_freed_in_reverse_and_the_oldest_evicted_first() -> None:
    cache = PagedKVCache(num_blocks=6, block_size=2)
    blocks_a, hashes_a = _cached_request(cache, [1, 2, 3, 4, 5, 6])
    blocks_b, hashes_b = _cached_request(cache, [7, 8, 9, 10, 11, 12])
    assert cache.num_free_blocks == 0
    cache.free(blocks_a)
    cache.free(blocks_b)
    # Tail blocks first within a request; requests in the order they were freed.
    assert cache.eviction_order() == blocks_a[::-1] + blocks_b[::-1]
    assert cache.find_cached_prefix(hashes_a) == 3  # freed blocks stay cached
    assert cache.allocate(2) == [blocks_a[2], blocks_a[1]]
    assert cache.find_cached_prefix(hashes_a) == 1  # its tail went first
    assert not cache.is_cached(hashes_a[2])
    assert cache.find_cached_prefix(hashes_b) == 3


def test_touching_a_free_cached_block_takes_it_off_the_queue() -> None:
    cache = PagedKVCache(num_blocks=4, block_size=2)
    blocks, hashes = _cached_request(cache, [1, 2, 3, 4])
    cache.free(blocks)
    assert cache.num_free_blocks == 4
    hit = cache.cached_blocks(hashes)
    assert hit == blocks
    assert cache.num_evictable(hit) == 2
    cache.touch(hit)
    assert cache.num_free_blocks == 2
    assert [cache.ref_count(b) for b in hit] == [1, 1]
    assert set(cache.eviction_order()).isdisjoint(hit)
    cache.touch(hit[:1])  # a second user: no queue change
    assert cache.ref_count(hit[0]) == 2
    cache.free(hit)
    assert cache.eviction_order()[-1] == hit[1]  # back at the tail once unreferenced
    assert cache.ref_count(hit[0]) == 1


def test_usage_counts_unreferenced_cached_blocks_as_free() -> None:
    cache = PagedKVCache(num_blocks=4, block_size=2)
    assert cache.usage == 0.0
    blocks, _ = _cached_request(cache, [1, 2, 3, 4, 5, 6])
    assert cache.usage == pytest.approx(0.75)
    cache.free(blocks)
    assert cache.usage == 0.0


def test_a_duplicate_block_stays_findable_after_the_first_is_evicted() -> None:
    cache = PagedKVCache(num_blocks=2, block_size=2)
    first, hashes = _cached_request(cache, [1, 2])
    second, _ = _cached_request(cache, [1, 2])  # computed concurrently: same hash
    cache.free(first)
    cache.free(second)
    assert cache.allocate(1) == first
    assert cache.cached_blocks(hashes) == second
    assert cache.allocate(1) == second
    assert not cache.is_cached(hashes[0])


def test_allocating_more_than_free_is_an_error() -> None:
    cache = PagedKVCache(num_blocks=2, block_size=2)
    cache.allocate(2)
    with pytest.raises(ValueError, match="cannot allocate"):
        cache.allocate(1)
