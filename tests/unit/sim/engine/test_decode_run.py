"""Fast-forwarded decode runs match step-by-step stepping; hashed prompts match token ones."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest

from sim.engine.decode_run import DecodeRun
from sim.engine.kv_cache import chain_block_hashes
from sim.engine.model import EngineModel
from tests.unit.sim.engine.driving import make_model


@dataclass(frozen=True)
class Arrival:
    at: float
    request_id: str
    prompt: tuple[int, ...]
    output_len: int


@dataclass
class Outcome:
    first: dict[str, float] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    runs: int = 0  # fast-forwarded runs of more than one step
    steps: int = 0


def _workload(seed: int, rate: float = 8.0, n: int = 120, block: int = 4) -> list[Arrival]:
    rng = random.Random(seed)
    shared = [tuple(range(1000 * k, 1000 * k + block * rng.randint(2, 12))) for k in range(5)]
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(rate)
        own = tuple(range(10**6 + 100 * i, 10**6 + 100 * i + rng.randint(1, 30)))
        out.append(Arrival(t, f"r{i}", rng.choice(shared) + own, rng.randint(1, 60)))
    return out


def _add(model: EngineModel, a: Arrival, hashed: bool) -> None:
    if hashed:
        hashes = chain_block_hashes(a.prompt, model.config.block_size)
        model.add_request_hashed(a.request_id, len(a.prompt), hashes, a.output_len)
    else:
        # Distinct outputs per request: no two requests share a block past their prompts.
        base = 5 * 10**6 + 1000 * int(a.request_id[1:])
        model.add_request(a.request_id, a.prompt, range(base, base + a.output_len))


def drive(model: EngineModel, arrivals: list[Arrival], fast: bool, hashed: bool) -> Outcome:
    """Requests join the first step that starts at or after their arrival."""
    out = Outcome()
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
        if isinstance(result, DecodeRun):
            out.runs += result.steps > 1
            out.steps += result.steps
            t += result.duration_s()
            for request_id in result.finished():
                out.done[request_id] = t
            continue
        out.steps += 1
        t += result.duration_s
        for token in result.tokens:
            if token.index == 0:
                out.first[token.request_id] = t
            if token.finished:
                out.done[token.request_id] = t
    return out


def _tight_model() -> EngineModel:
    # A small cache and batch: preemptions, blocked heads and evictions all happen.
    return make_model(block_size=4, num_blocks=90, max_num_seqs=6, max_num_batched_tokens=48)


@pytest.mark.parametrize(("seed", "rate"), [(1, 8.0), (2, 8.0), (3, 20.0), (4, 60.0)])
def test_fast_forward_gives_the_same_times_and_cache_as_stepping(seed: int, rate: float) -> None:
    arrivals = _workload(seed, rate)
    slow_model, fast_model = _tight_model(), _tight_model()
    slow = drive(slow_model, arrivals, fast=False, hashed=True)
    fast = drive(fast_model, arrivals, fast=True, hashed=True)
    assert fast.runs > 10 and fast.steps == slow.steps
    assert set(fast.done) == set(slow.done) == {a.request_id for a in arrivals}
    for request_id, at in slow.first.items():
        assert fast.first[request_id] == pytest.approx(at, abs=1e-9)
    for request_id, at in slow.done.items():
        assert fast.done[request_id] == pytest.approx(at, abs=1e-9)
    assert fast_model.stats() == slow_model.stats()
    assert slow_model.stats().preemptions > 0
    assert fast_model.kv_cache.eviction_order() == slow_model.kv_cache.eviction_order()


def test_hashed_prompts_behave_like_their_tokens() -> None:
    arrivals = _workload(7)
    by_tokens, by_hashes = _tight_model(), _tight_model()
    tokens = drive(by_tokens, arrivals, fast=False, hashed=False)
    hashes = drive(by_hashes, arrivals, fast=True, hashed=True)
    assert hashes.first == pytest.approx(tokens.first, abs=1e-9)
    assert hashes.done == pytest.approx(tokens.done, abs=1e-9)
    assert by_hashes.stats() == by_tokens.stats()
    assert by_tokens.stats().prefix_hits > 0


def test_a_run_stops_at_the_first_finish_and_at_the_time_limit() -> None:
    model = make_model(block_size=16, num_blocks=256)
    model.add_request_hashed("short", 40, [11, 12], 5)
    model.add_request_hashed("long", 40, [21, 22], 50)
    model.step()  # both prefill and emit their first token
    run = model.plan_decode_run()
    assert run is not None and run.steps == 4 and run.finished() == ("short",)
    # Durations: a + b·i, the closed form of the step-time model.
    step = model.timing
    assert run.first_step_s == pytest.approx(step.overhead_s + 2 * step.decode_seq_s + 82e-7)
    assert run.duration_s() == pytest.approx(sum(run.step_duration_s(i) for i in range(4)))
    limited = model.plan_decode_run(max_duration_s=run.start_s(2) + 1e-12)
    assert limited is not None and limited.steps == 3 and limited.finished() == ()
    assert run.steps_started_before(10.0, 10.0 + run.start_s(2)) == 2
    assert run.steps_ended_by(10.0, 10.0 + run.start_s(2)) == 2


def test_planning_changes_nothing_and_a_stale_plan_is_refused() -> None:
    twins = [make_model(block_size=4, num_blocks=64), make_model(block_size=4, num_blocks=64)]
    for model in twins:
        model.add_request_hashed("a", 9, [1, 2], 30)
        model.step()
    run = twins[0].plan_decode_run()
    assert run is not None
    assert twins[0].step() == twins[1].step()
    with pytest.raises(RuntimeError, match="changed"):
        twins[0].apply_decode_run(run)


def test_no_run_while_a_prefill_or_an_admission_is_due() -> None:
    model = make_model(block_size=4, num_blocks=64, max_num_batched_tokens=8)
    model.add_request_hashed("a", 20, [1, 2, 3, 4, 5], 10)
    assert model.plan_decode_run() is None  # prefilling
    model.step()
    model.step()
    model.step()  # prefill done in chunks of 8
    assert model.plan_decode_run() is not None
    model.add_request_hashed("b", 4, [9], 3)
    assert model.plan_decode_run() is None  # b can be admitted now


def test_a_hashed_request_needs_one_hash_per_full_prompt_block() -> None:
    model = make_model(block_size=16)
    with pytest.raises(ValueError, match="expected 2"):
        model.add_request_hashed("r", 40, [1], 3)
    with pytest.raises(ValueError, match="prompt is empty"):
        model.add_request_hashed("r", 0, [], 3)
