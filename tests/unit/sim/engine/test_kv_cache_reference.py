"""The KV caches against a plain per-block reference implementation: PagedKVCache's run-based
fast paths, and the compiled NativeKVCache."""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

import pytest

from sim.engine.block_runs import Piece, add_irregular, clipped, shifted, stretches
from sim.engine.kv_cache import PagedKVCache
from sim.engine.kv_store import KVCache, new_kv_cache


class ReferenceCache:
    """The obvious implementation: one Python step per block, an OrderedDict free queue."""

    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.by_hash: dict[int, int] = {}
        self.duplicates: dict[int, list[int]] = {}

    def cached_blocks(self, hashes: Sequence[int]) -> list[int]:
        out = []
        for h in hashes:
            if h not in self.by_hash:
                break
            out.append(self.by_hash[h])
        return out

    def num_evictable(self, blocks: Sequence[int]) -> int:
        return sum(1 for b in blocks if self.ref[b] == 0)

    def touch(self, blocks: Sequence[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.free_queue[b]
            self.ref[b] += 1

    def allocate(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            b, _ = self.free_queue.popitem(last=False)
            h = self.hash[b]
            if h is not None:
                self.hash[b] = None
                others = self.duplicates.get(h)
                if self.by_hash.get(h) == b:
                    if others:
                        self.by_hash[h] = others.pop(0)
                    else:
                        del self.by_hash[h]
                elif others is not None:
                    others.remove(b)
                if others is not None and not others:
                    del self.duplicates[h]
            self.ref[b] = 1
            out.append(b)
        return out

    def cache_block(self, b: int, h: int) -> None:
        assert self.hash[b] is None
        self.hash[b] = h
        if h in self.by_hash:
            self.duplicates.setdefault(h, []).append(b)
        else:
            self.by_hash[h] = b

    def free(self, blocks: Sequence[int]) -> None:
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free_queue[b] = None


def _check_same(cache: KVCache, ref: ReferenceCache, probes: list[list[int]]) -> None:
    assert cache.eviction_order() == list(ref.free_queue)
    assert cache.num_free_blocks == len(ref.free_queue)
    assert [cache.ref_count(b) for b in range(cache.num_blocks)] == ref.ref
    for hashes in probes:
        assert cache.cached_blocks(hashes) == ref.cached_blocks(hashes)
    assert cache.num_cached_blocks == sum(h is not None for h in ref.hash)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("pieces", [False, True])
@pytest.mark.parametrize("recompute", [0.0, 0.3])
@pytest.mark.parametrize("seed", range(6))
def test_the_fast_cache_matches_the_reference_block_for_block(
    seed: int, recompute: float, pieces: bool, native: bool
) -> None:
    """`recompute`: share of requests that skip the lookup and commit their whole prompt
    again, so that hashes already cached are committed twice (duplicates). `pieces`: hand
    the cache the cut of each block list, kept the way the scheduler keeps it."""
    rng = random.Random(seed)
    num_blocks = rng.choice([300, 700])
    cache, ref = new_kv_cache(num_blocks, 4, native), ReferenceCache(num_blocks)
    # Consecutive hashes (as trace replays make them), scattered ones, negative ones, and
    # ones wider than 64 bits (a recorded trace's ids times the engine blocks per trace block).
    families = [
        [*range(1000 * k - 9000, 1000 * k - 8880)]
        if k % 3 == 0
        else [rng.getrandbits(40) for _ in range(120)]
        if k % 3 == 1
        else [rng.choice((1, -1)) * (2**64 + rng.getrandbits(66)) for _ in range(120)]
        for k in range(6)
    ]
    live: dict[int, tuple[list[int], list[int]]] = {}  # request → (blocks, hashes)
    cuts: dict[int, list[Piece]] = {}  # request → the cut of its blocks (with `pieces`)
    for step in range(900):
        op = rng.random()
        if op < 0.45 or not live:
            family = rng.choice(families)
            shared = rng.randint(0, 110)
            # Sometimes the very same prefix twice at once: duplicate hashes.
            own = [] if rng.random() < 0.2 else [rng.getrandbits(40) for _ in range(40)]
            hashes = family[:shared] + own[: rng.randint(0, 40)]
            hits = cache.cached_blocks(hashes)
            assert hits == ref.cached_blocks(hashes)
            if rng.random() < recompute:
                hits = []
            assert cache.num_evictable(hits) == ref.num_evictable(hits)
            new = len(hashes) - len(hits) + rng.randint(0, 3)  # + some uncommitted blocks
            if new + ref.num_evictable(hits) > len(ref.free_queue):
                continue
            cut = cache.touch(hits)
            ref.touch(hits)
            blocks, allocated = cache.allocate_runs(new)
            assert blocks == ref.allocate(new)
            cut += shifted(allocated, len(hits))
            if not native:  # the compiled cache keeps no cut (and needs none)
                _check_cut(hits + blocks, cut)
            committed = blocks[: len(hashes) - len(hits)]
            if pieces:
                part = clipped(cut, len(hits), len(hits) + len(committed))
                cache.cache_blocks(committed, hashes[len(hits) :], part)
            elif rng.random() < 0.5:
                cache.cache_blocks(committed, hashes[len(hits) :])
            else:
                for b, h in zip(committed, hashes[len(hits) :], strict=False):
                    cache.cache_block(b, h)
            for b, h in zip(committed, hashes[len(hits) :], strict=False):
                ref.cache_block(b, h)
            live[step] = (hits + blocks, hashes)
            cuts[step] = cut
        elif op < 0.6:
            key = rng.choice(list(live))  # a decode block
            if ref.free_queue:
                block = cache.allocate(1)
                assert block == ref.allocate(1)
                add_irregular(cuts[key], len(live[key][0]), len(live[key][0]) + 1)
                live[key][0].extend(block)
        else:
            key = rng.choice(list(live))
            blocks, _ = live.pop(key)
            cache.free(blocks, cuts.pop(key) if pieces else None)
            ref.free(blocks)
        if step % 50 == 0:
            probes = [f[: rng.randint(1, 120)] for f in families]
            probes += [h for _, h in list(live.values())[:3]]
            _check_same(cache, ref, probes)
    for blocks, _ in live.values():
        cache.free(blocks)
        ref.free(blocks)
    _check_same(cache, ref, [f for f in families])
    assert cache.peek_free(50) == list(ref.free_queue)[:50]


def _check_cut(ids: list[int], cut: list[Piece]) -> None:
    """`cut` covers `ids` end to end, and each of its runs is one."""
    assert [i for i, _, _ in cut] == [0, *(j for _, j, _ in cut)][: len(cut)]
    assert (cut[-1][1] if cut else 0) == len(ids)
    assert all(i < j for i, j, _ in cut)
    for i, j, step in cut:
        if step:
            assert ids[i:j] == list(range(ids[i], ids[i] + step * (j - i), step))


def test_pieces_follow_their_lists() -> None:
    ids = [*range(40, 60), 3, 9, *range(80, 60, -1), 7]
    cut = stretches(ids)
    _check_cut(ids, cut)
    for start, end in [(0, 5), (5, 45), (21, 22), (30, len(ids)), (0, len(ids))]:
        _check_cut(ids[start:end], clipped(cut, start, end))
    assert clipped(cut, 0, len(ids)) == cut
    with pytest.raises(ValueError, match="do not cover"):
        PagedKVCache(100, 4).free([1, 2], [(0, 1, 0)])


def test_runs_of_consecutive_blocks_take_the_fast_paths() -> None:
    cache = PagedKVCache(4096, 16)
    blocks = cache.allocate(1000)
    assert blocks == list(range(1000))
    cache.cache_blocks(blocks, list(range(10**6, 10**6 + 1000)))
    cache.free(blocks)
    assert cache.eviction_order() == list(range(1000, 4096)) + blocks[::-1]
    hits = cache.cached_blocks(list(range(10**6, 10**6 + 500)))
    assert hits == list(range(500))
    cache.touch(hits)
    assert cache.num_free_blocks == 4096 - 500
    assert cache.allocate(3096 + 200) == list(range(1000, 4096)) + list(range(999, 799, -1))
    assert cache.num_cached_blocks == 800
    assert cache.cached_blocks(list(range(10**6, 10**6 + 1000))) == list(range(800))
