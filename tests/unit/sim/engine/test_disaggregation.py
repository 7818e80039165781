"""Disaggregated prefill/decode in the engine model: external tokens, held blocks, transfers."""

from __future__ import annotations

import math
import random

import pytest

from sim.engine.decode_run import DecodeRun
from sim.engine.kv_cache import chain_block_hashes
from sim.engine.kv_store import NATIVE_BUILT
from sim.engine.kv_transfer import blocks_to_move, external_blocks, transfer_time_s
from sim.engine.model import EngineModel
from sim.engine.types import EngineConfig, KVTransferLink, StepFeatures
from tests.unit.sim.engine.driving import TIMING, make_model, run

NATIVE = [False, True] if NATIVE_BUILT else [False]


def _sources(model: EngineModel) -> tuple[int, int, int]:
    s = model.stats()
    return s.prompt_tokens_local_compute, s.prompt_tokens_local_cache_hit, s.prompt_tokens_external


@pytest.mark.parametrize("native", NATIVE)
def test_external_tokens_are_loaded_not_computed_but_the_last(native: bool) -> None:
    model = EngineModel(EngineConfig(block_size=16, num_blocks=64), TIMING, native=native)
    prompt = list(range(40))
    model.add_request("d", prompt, [7, 8], external_tokens=40)
    first = model.step()
    assert first.admitted[0].cached_tokens == 0
    assert first.admitted[0].external_tokens == 39
    # One token computed, attending to the 39 loaded ones and itself.
    assert first.features == StepFeatures(
        prefill_tokens=1, attention_pairs=40, prefill_seqs=1, context_pairs=39
    )
    assert [t.index for t in first.tokens] == [0]
    # The loaded full blocks are in the prefix cache from the admission on.
    assert model.cached_prefix_blocks(prompt) == 2
    run(model)
    s = model.stats()
    assert _sources(model) == (0, 0, 40)  # vLLM counts the recomputed last token as external
    assert s.prompt_tokens == 40 and s.prefix_queries == 40 and s.prefix_hits == 0


def test_external_tokens_past_local_hits_only_are_counted_as_transferred() -> None:
    model = make_model(block_size=16, num_blocks=64)
    shared = list(range(16))
    model.add_request("warm", [*shared, 100, 101], [1])
    run(model)
    prompt = [*shared, *range(200, 224)]  # 40 tokens: block 0 cached here, the rest not
    assert model.cached_prefix_blocks(prompt) == 1
    model.add_request("d", prompt, [5], external_tokens=40)
    result = run(model)
    assert result.cached_tokens("d") == 16
    assert result.steps[0].admitted[0].external_tokens == 23
    assert result.steps[0].features.prefill_tokens == 1
    assert _sources(model) == (18, 16, 24)  # "warm" computed its 18 tokens


def test_a_partial_external_prefix_leaves_the_rest_to_compute() -> None:
    model = make_model(block_size=16, num_blocks=64)
    model.add_request("d", list(range(40)), [5], external_tokens=20)
    result = run(model)
    assert result.steps[0].features.prefill_tokens == 20
    assert _sources(model) == (20, 0, 20)


def test_external_tokens_are_loaded_once_then_recomputed_after_a_preemption() -> None:
    # 6 blocks of 4: "b" runs first; "d", admitted last, loads 3 blocks, and is preempted
    # (the last admitted goes) when decoding needs a block that is not there.
    model = make_model(block_size=4, num_blocks=6, max_num_batched_tokens=64)
    model.add_request("b", list(range(500, 508)), list(range(600, 612)))
    model.step()
    model.add_request("d", list(range(12)), list(range(100, 112)), external_tokens=12)
    result = run(model)
    first, *resumed = [a for s in result.steps for a in s.admitted if a.request_id == "d"]
    assert first.external_tokens == 11 and not first.resumed
    assert resumed and all(a.resumed and a.external_tokens == 0 for a in resumed)
    assert model.stats().preemptions >= 1
    assert _sources(model) == (8, 0, 12)


def test_add_request_checks_external_tokens() -> None:
    model = make_model(block_size=4, num_blocks=16)
    with pytest.raises(ValueError, match="external_tokens 5 outside"):
        model.add_request("d", [1, 2, 3, 4], [5], external_tokens=5)
    with pytest.raises(ValueError, match="external_tokens -1 outside"):
        model.add_request_hashed("d", 4, [1], 1, external_tokens=-1)


@pytest.mark.parametrize("native", NATIVE)
def test_a_held_request_keeps_its_blocks_until_released(native: bool) -> None:
    model = EngineModel(EngineConfig(block_size=16, num_blocks=8), TIMING, native=native)
    prompt = list(range(40))
    model.add_request("p", prompt, [9], hold=True)
    run(model)
    held = model.held_blocks("p")
    assert len(held) == 3  # the prompt's 40 tokens; the one output token is never computed
    s = model.stats()
    assert s.held_blocks == 3 and s.kv_usage == pytest.approx(3 / 8)
    assert not model.has_work()
    assert model.reset_prefix_cache() is False
    with pytest.raises(ValueError, match="already in the engine"):
        model.add_request("p", prompt, [9])
    assert model.release("p") is True
    assert model.release("p") is False
    assert model.held_blocks("p") == ()
    assert model.stats().held_blocks == 0 and model.stats().kv_usage == 0.0
    assert model.cached_prefix_blocks(prompt) == 2  # still cached, now free


def test_held_blocks_take_capacity_from_later_requests() -> None:
    model = make_model(block_size=4, num_blocks=4)
    model.add_request("p", list(range(8)), [1], hold=True)
    run(model)
    model.add_request("q", list(range(100, 112)), [1])  # needs 3 blocks, 2 free
    assert model.step().idle  # waiting for the held blocks, not stalled for good
    model.release("p")
    assert [a.request_id for a in model.step().admitted] == ["q"]


def test_an_aborted_hold_request_holds_nothing() -> None:
    model = make_model(block_size=4, num_blocks=8)
    model.add_request("p", list(range(8)), [1, 2, 3], hold=True)
    model.step()
    assert model.abort("p")
    assert model.held_blocks("p") == () and model.release("p") is False
    assert model.stats().kv_usage == 0.0


def test_cached_prefix_blocks_hashed_and_without_caching() -> None:
    model = make_model(block_size=4, num_blocks=16)
    model.add_request("a", list(range(10)), [1])
    run(model)
    hashes = chain_block_hashes(list(range(12)), 4)
    assert model.cached_prefix_blocks_hashed(hashes) == 2
    plain = make_model(block_size=4, num_blocks=16, enable_prefix_caching=False)
    plain.add_request("a", list(range(10)), [1])
    run(plain)
    assert plain.cached_prefix_blocks(list(range(12))) == 0


def _drive(
    fast: bool, native: bool, seed: int, blocks: int = 48
) -> tuple[dict[str, float], list[int]]:
    """A mixed load (loaded prompts, held prefills released later) stepped or fast-forwarded."""
    rng = random.Random(seed)
    model = EngineModel(
        EngineConfig(block_size=4, num_blocks=blocks, max_num_batched_tokens=32),
        TIMING,
        native=native,
    )
    shared = [tuple(range(1000 * k, 1000 * k + 4 * rng.randint(1, 4))) for k in range(3)]
    arrivals = []
    t = 0.0
    for i in range(60):
        t += rng.expovariate(20.0)
        prompt = rng.choice(shared) + tuple(
            range(10**6 + 100 * i, 10**6 + 100 * i + rng.randint(1, 9))
        )
        kind = rng.choice(("plain", "external", "hold"))
        arrivals.append((t, f"r{i}", prompt, rng.randint(1, 30), kind))
    done: dict[str, float] = {}
    releases: list[tuple[float, str]] = []
    t, i = 0.0, 0
    while i < len(arrivals) or model.has_work() or releases:
        while i < len(arrivals) and arrivals[i][0] <= t:
            _, rid, prompt, n_out, kind = arrivals[i]
            out = range(5 * 10**6 + 1000 * i, 5 * 10**6 + 1000 * i + n_out)
            external = len(prompt) if kind == "external" else 0
            model.add_request(rid, prompt, out, external_tokens=external, hold=kind == "hold")
            i += 1
        for at, rid in [r for r in releases if r[0] <= t]:
            model.release(rid)
            releases.remove((at, rid))
        nexts = [a[0] for a in arrivals[i : i + 1]] + [r[0] for r in releases]
        if not model.has_work():
            t = min(nexts)
            continue
        limit = min(nexts) - t if nexts else math.inf
        result = model.advance(limit) if fast else model.step()
        if not isinstance(result, DecodeRun) and result.idle:  # waits for a release
            t = min(nexts)
            continue
        if isinstance(result, DecodeRun):
            t += result.duration_s()
            finished: tuple[str, ...] = result.finished()
        else:
            t += result.duration_s
            finished = tuple(tok.request_id for tok in result.tokens if tok.finished)
        for rid in finished:
            done[rid] = t
            if model.held_blocks(rid):
                releases.append((t + 0.05, rid))
    s = model.stats()
    return done, [
        s.prompt_tokens_local_compute,
        s.prompt_tokens_local_cache_hit,
        s.prompt_tokens_external,
        s.preemptions,
    ]


@pytest.mark.parametrize(("seed", "blocks"), [(1, 48), (2, 48), (3, 24), (4, 16)])
def test_fast_forwarding_and_both_caches_agree_with_stepping(seed: int, blocks: int) -> None:
    reference = _drive(fast=False, native=False, seed=seed, blocks=blocks)
    assert len(reference[0]) == 60
    for native in NATIVE:
        for fast in (False, True):
            done, counts = _drive(fast, native, seed, blocks)
            assert counts == reference[1]
            assert done.keys() == reference[0].keys()
            for rid, at in done.items():
                assert at == pytest.approx(reference[0][rid], rel=1e-9, abs=1e-12)


def test_transfer_pricing() -> None:
    # 40 tokens in blocks of 16: 3 blocks, the last partial; D holds the first full block.
    assert external_blocks(40, 16) == 3
    assert blocks_to_move(40, 40, 16, held=1) == 2
    assert blocks_to_move(40, 40, 16, held=0) == 3
    # D serves at most (prompt_len - 1) // block_size blocks itself, as vLLM's lookup.
    assert blocks_to_move(32, 32, 16, held=2) == 1
    assert blocks_to_move(40, 16, 16, held=2) == 0
    with pytest.raises(ValueError):
        blocks_to_move(40, 41, 16, held=0)
    link = KVTransferLink(bandwidth_bytes_s=1e9, latency_s=1e-3, bytes_per_token=1000)
    assert transfer_time_s(link, 0, 16) == 0.0
    assert transfer_time_s(link, 2, 16) == pytest.approx(1e-3 + 32 * 1000 / 1e9)
    default = KVTransferLink()
    # 2,000 tokens of Llama 3 8B over 25 GB/s: ~10.5 ms.
    assert transfer_time_s(default, 125, 16) == pytest.approx(0.01054, rel=1e-2)
