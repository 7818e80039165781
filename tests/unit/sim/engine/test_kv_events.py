"""KV-cache events of the engine model: replayed into a set they give the cache's contents."""

from __future__ import annotations

import itertools
import random

import pytest

from routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent
from sim.engine.kv_cache import ROOT_HASH, hash_block
from sim.engine.kv_events import (
    external_hash,
)
from sim.engine.model import EngineModel
from sim.engine.types import EngineConfig
from tests.unit.sim.engine.driving import TIMING

BS = 4


def _model(num_blocks: int = 24) -> EngineModel:
    config = EngineConfig(block_size=BS, num_blocks=num_blocks, max_num_batched_tokens=64)
    return EngineModel(config, TIMING, kv_events=True)


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


class Replay:
    """A subscriber's view: the set of cached hashes, checked event by event."""

    def __init__(self) -> None:
        self.cached: set[int] = set()
        self.stored = self.removed = 0

    def apply(self, events: list[KvEvent]) -> None:
        for ev in events:
            if isinstance(ev, BlockStored):
                parent = ev.parent_block_hash
                assert parent is None or parent in self.cached  # the chain is known
                assert len(ev.token_ids) == BS * len(ev.block_hashes)
                chained = ROOT_HASH if parent is None else _signed(parent)
                for k, h in enumerate(ev.block_hashes):
                    chained = hash_block(chained, ev.token_ids[k * BS : (k + 1) * BS])
                    assert h == external_hash(chained)
                    assert h not in self.cached
                    self.cached.add(h)
                self.stored += len(ev.block_hashes)
            elif isinstance(ev, BlockRemoved):
                assert set(ev.block_hashes) <= self.cached
                self.cached -= set(ev.block_hashes)
                self.removed += len(ev.block_hashes)
            else:
                assert isinstance(ev, AllBlocksCleared)
                self.cached.clear()


def _contents(model: EngineModel) -> set[int]:
    return {external_hash(h) for h in model.kv_cache.cached_hashes()}


def _workload(model: EngineModel, rng: random.Random, n: int) -> None:
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(4, 20))] for _ in range(3)]
    for i in range(n):
        prompt = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(0, 9))]
        output = [rng.randrange(1000) for _ in range(rng.randrange(1, 10))]
        model.add_request(f"r{i}", prompt, output)


@pytest.mark.parametrize("fast_forward", [False, True])
def test_replayed_events_equal_the_cache_after_every_step(fast_forward: bool) -> None:
    rng = random.Random(7)
    model = _model()
    replay = Replay()
    for wave in range(4):
        _workload(model, rng, 12 + wave)
        model.add_request(f"dup{wave}", [5, 6, 7, 8] * 3, [1, 2])  # a prompt of whole blocks
        model.add_request(f"dup{wave}b", [5, 6, 7, 8] * 3, [1, 2])
        while model.has_work():
            if fast_forward:
                model.advance()
            else:
                model.step()
            replay.apply(model.take_kv_events())
            assert replay.cached == _contents(model)
        for i in range(12 + wave):
            model.abort(f"r{i}")
    assert replay.removed > 0  # the workload overflowed the 24 blocks: evictions
    assert replay.stored > replay.removed


def test_eviction_emits_removals_of_the_evicted_hashes() -> None:
    model = _model(num_blocks=4)
    model.add_request("a", list(range(12)), [1])  # 3 full blocks cached
    while model.has_work():
        model.step()
    first = model.take_kv_events()
    assert [type(e) for e in first] == [BlockStored]
    assert isinstance(first[0], BlockStored)
    assert first[0].parent_block_hash is None and len(first[0].block_hashes) == 3
    model.add_request("b", list(range(100, 112)), [1])  # needs 3 blocks of the 4
    while model.has_work():
        model.step()
    events = model.take_kv_events()
    removed = {h for e in events if isinstance(e, BlockRemoved) for h in e.block_hashes}
    assert len(removed) == 2 and removed <= set(first[0].block_hashes)
    assert _contents(model) == set(first[0].block_hashes) - removed | {
        h for e in events if isinstance(e, BlockStored) for h in e.block_hashes
    }


def test_a_later_chunk_chains_from_the_block_before_it() -> None:
    config = EngineConfig(block_size=BS, num_blocks=32, max_num_batched_tokens=8)
    model = EngineModel(config, TIMING, kv_events=True)
    model.add_request("a", list(range(20)), [1])  # prefill in chunks of 8 tokens
    stored: list[BlockStored] = []
    while model.has_work():
        model.step()
        stored += [e for e in model.take_kv_events() if isinstance(e, BlockStored)]
    assert len(stored) >= 2
    for before, after in itertools.pairwise(stored):
        assert after.parent_block_hash == before.block_hashes[-1]


def test_reset_clears_only_an_idle_cache() -> None:
    model = _model()
    model.add_request("a", list(range(12)), [1, 2, 3])
    model.step()
    assert not model.reset_prefix_cache()  # "a" holds its blocks
    while model.has_work():
        model.step()
    model.take_kv_events()
    held = model.kv_cache.cached_hashes()
    assert held and model.reset_prefix_cache()
    assert model.take_kv_events() == [AllBlocksCleared()]
    assert _contents(model) == set()
    assert model.kv_cache.find_cached_prefix(held) == 0


def test_without_events_nothing_is_recorded() -> None:
    model = EngineModel(EngineConfig(block_size=BS, num_blocks=8), TIMING)
    model.add_request("a", list(range(12)), [1])
    while model.has_work():
        model.step()
    assert model.kv_cache.events is None
    assert model.take_kv_events() == []
