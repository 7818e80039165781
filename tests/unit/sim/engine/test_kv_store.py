"""The compiled KV cache is built, chosen by default, and drives the engine exactly as the
pure-Python reference does: every step's result, every decode run, every KV event."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from sim.engine.decode_run import DecodeRun
from sim.engine.kv_cache import PagedKVCache
from sim.engine.kv_events import KVEventLog
from sim.engine.kv_store import NATIVE_BUILT, new_kv_cache
from sim.engine.model import EngineModel
from sim.engine.types import EngineConfig
from tests.unit.sim.engine.driving import TIMING
from tests.unit.sim.engine.test_decode_run import Arrival, _add, _workload


def test_the_compiled_cache_is_built_and_chosen_by_default() -> None:
    # `make venv` builds it on every supported machine: a silent fallback would hide here.
    assert NATIVE_BUILT
    assert type(new_kv_cache(64, 16)).__name__ == "NativeKVCache"
    assert type(new_kv_cache(64, 16, native=False)) is PagedKVCache
    assert type(EngineModel(EngineConfig(), TIMING, native=False).kv_cache) is PagedKVCache


def test_the_compiled_cache_checks_its_arguments_as_the_reference_does() -> None:
    for native in (False, True):
        cache = new_kv_cache(8, 4, native)
        with pytest.raises(ValueError, match="cannot allocate 9 blocks: 8 free"):
            cache.allocate(9)
        with pytest.raises(ValueError, match="more hashes to commit than blocks"):
            cache.allocate(1, [1, 2])
        blocks = cache.allocate(3, [10, 11])
        with pytest.raises(ValueError, match=f"block {blocks[0]} is already cached"):
            cache.cache_blocks(blocks, [20, 21, 22])
        with pytest.raises(ValueError, match="as many hashes as blocks"):
            cache.cache_blocks(blocks[2:], [])
        if not native:  # the compiled cache takes no cut of the blocks into runs
            with pytest.raises(ValueError, match="do not cover"):
                cache.free(blocks, [(0, 2, 0)])
        assert not cache.reset_prefix_cache()
        cache.free(blocks)
        assert cache.reset_prefix_cache() and cache.num_cached_blocks == 0


def test_caches_of_any_size_hand_out_their_own_block_ids() -> None:
    # The compiled caches share one list of block-id ints, grown for the largest: a cache
    # made before a larger one, or after it, still hands out exactly its own ids.
    caches = [new_kv_cache(n, 4, native) for n in (5, 300, 9) for native in (False, True)]
    for cache in caches:
        n = cache.num_blocks
        blocks = cache.allocate(n, list(range(1000, 1000 + n)))
        assert blocks == list(range(n))
        assert cache.cached_blocks(list(range(1000, 1000 + n + 1))) == blocks
        cache.free(blocks)
        assert cache.eviction_order() == blocks[::-1] and cache.num_free_blocks == n


def test_hashes_wider_than_64_bits_are_cached_and_evicted_as_the_reference_does() -> None:
    wide = [2**64 * 32 + k for k in range(6)] + [-(2**70) - 1]
    logs = []
    for native in (False, True):
        cache = new_kv_cache(8, 4, native)
        cache.events = KVEventLog(4)
        blocks, _ = cache.allocate_runs(7, wide, origin=((), wide, 0))
        assert cache.cached_blocks([*wide, 5]) == blocks
        assert cache.is_cached(wide[-1]) and not cache.is_cached(2**64 * 33)
        assert sorted(cache.cached_hashes()) == sorted(wide)
        cache.free(blocks)
        cache.allocate(8)  # evicts them all, last block first
        assert cache.num_cached_blocks == 0
        logs.append(cache.events.take())
    assert logs[0] == logs[1]
    assert len(logs[0]) == 8  # one store, seven removals


@dataclass
class _Trail:
    """Everything an engine reported, in order."""

    seen: list[object] = field(default_factory=list)
    events: int = 0


def _drive(model: EngineModel, arrivals: list[Arrival], fast: bool, hashed: bool) -> _Trail:
    trail = _Trail()
    t, i = 0.0, 0
    while i < len(arrivals) or model.has_work():
        while i < len(arrivals) and arrivals[i].at <= t:
            _add(model, arrivals[i], hashed)
            i += 1
        if not model.has_work():
            t = arrivals[i].at
            continue
        limit = arrivals[i].at - t if i < len(arrivals) else math.inf
        result = model.advance(limit) if fast else model.step()
        t += result.duration_s() if isinstance(result, DecodeRun) else result.duration_s
        if isinstance(result, DecodeRun):
            result = (result.steps, result.first_step_s, result.request_ids, result.finished())
        events = model.take_kv_events()
        trail.events += len(events)
        trail.seen += [t, result, events, model.kv_cache.num_free_blocks]
    trail.seen += [model.stats(), model.kv_cache.eviction_order()]
    trail.seen.append(sorted(model.kv_cache.cached_hashes()))
    return trail


@pytest.mark.parametrize("hashed", [False, True])
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(("seed", "rate"), [(1, 8.0), (3, 20.0), (4, 60.0)])
def test_the_compiled_cache_drives_the_engine_exactly_as_the_reference(
    seed: int, rate: float, fast: bool, hashed: bool
) -> None:
    arrivals = _workload(seed, rate)
    config = EngineConfig(block_size=4, num_blocks=90, max_num_seqs=6, max_num_batched_tokens=48)
    trails = [
        _drive(EngineModel(config, TIMING, kv_events=True, native=native), arrivals, fast, hashed)
        for native in (False, True)
    ]
    reference, compiled = trails
    assert compiled.seen == reference.seen
    assert reference.seen[-3].preemptions > 0  # type: ignore[attr-defined]
    assert reference.events > 100
