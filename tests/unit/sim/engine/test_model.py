from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest

from sim.engine.model import EngineModel
from sim.engine.profiles import get_profile
from sim.engine.types import StepFeatures
from tests.unit.sim.engine.driving import TIMING, make_model, run


@pytest.mark.parametrize(
    ("prompt", "output", "message"),
    [
        ([], [1], "prompt is empty"),
        ([1], [], "at least one token"),
        (list(range(60)), list(range(5)), "exceed max_model_len 64"),
    ],
)
def test_add_request_rejects_invalid_requests(
    prompt: list[int], output: list[int], message: str
) -> None:
    model = make_model(max_model_len=64)
    with pytest.raises(ValueError, match=message):
        model.add_request("r", prompt, output)
    assert not model.has_work()


def test_add_request_rejects_duplicates_and_what_can_never_fit() -> None:
    model = make_model(block_size=4, num_blocks=4)
    model.add_request("r", [1, 2], [3])
    with pytest.raises(ValueError, match="already"):
        model.add_request("r", [1, 2], [3])
    model.add_request("fits", list(range(10)), list(range(7)))  # 16 slots: the whole cache
    with pytest.raises(ValueError, match="needs 5 KV blocks"):
        model.add_request("too-big", list(range(10)), list(range(8)))
    run(model)
    model.add_request("r", [1, 2], [3])  # a finished id can be reused


def test_the_first_token_ends_the_step_that_completes_the_prefill() -> None:
    model = make_model(block_size=16, num_blocks=64)
    model.add_request("r", list(range(30)), [11, 12, 13])
    result = run(model)
    assert len(result.steps) == 3
    first, second, third = result.steps
    assert [(t.index, t.token_id, t.finished) for t in first.tokens] == [(0, 11, False)]
    assert first.features == StepFeatures(prefill_tokens=30, attention_pairs=900, prefill_seqs=1)
    # Decode steps read the prompt, the earlier outputs and the token being decoded.
    assert second.features == StepFeatures(decode_seqs=1, kv_tokens_read=31)
    assert third.features == StepFeatures(decode_seqs=1, kv_tokens_read=32)
    assert [(t.index, t.finished) for t in third.tokens] == [(2, True)]
    assert first.duration_s == pytest.approx(TIMING.step_time(first.features))
    assert model.stats().prompt_tokens == 30
    assert model.stats().generation_tokens == 3


def test_attention_pairs_of_chunks_use_the_context_before_them() -> None:
    model = make_model(block_size=16, num_blocks=64, max_num_batched_tokens=40)
    model.add_request("r", list(range(100)), [1])
    steps = run(model).steps
    # Chunks of 40, 40, 20 tokens after 0, 40, 80 computed ones.
    assert [s.features.attention_pairs for s in steps] == [40 * 40, 40 * 80, 20 * 100]


def test_context_pairs_count_the_tokens_cached_before_each_chunk() -> None:
    model = make_model(block_size=16, num_blocks=64, max_num_batched_tokens=40)
    model.add_request("r", list(range(100)), [1])
    chunks = run(model).steps
    assert [s.features.context_pairs for s in chunks] == [0, 40 * 40, 20 * 80]
    # A prefix-cache hit is context too: 64 of the 70 tokens are cached (4 blocks of 16).
    model.add_request("hit", [*range(64), 7, 7, 7, 7, 7, 7], [1])
    (step,) = run(model).steps
    assert step.features == StepFeatures(
        prefill_tokens=6, attention_pairs=6 * 70, context_pairs=6 * 64, prefill_seqs=1
    )


def test_context_attention_prices_only_the_pairs_with_cached_context() -> None:
    timing = dataclasses.replace(TIMING, context_attention_s=1e-6)
    f = StepFeatures(prefill_tokens=6, attention_pairs=6 * 70, context_pairs=6 * 64)
    assert timing.step_time(f) == pytest.approx(TIMING.step_time(f) + 1e-6 * 6 * 64)
    # Zero by default, so a profile without it prices steps exactly as before the term.
    assert TIMING.context_attention_s == 0.0
    assert TIMING.step_time(f) == TIMING.step_time(dataclasses.replace(f, context_pairs=0))


def test_prefill_seqs_count_the_sequences_prefilling_in_a_step() -> None:
    model = make_model(block_size=16, num_blocks=64, max_num_batched_tokens=4096)
    for i in range(3):
        model.add_request(f"r{i}", list(range(100 * i, 100 * i + 50)), [1, 2])
    first, second = run(model).steps
    assert first.features.prefill_seqs == 3  # three prompts, one step
    assert second.features == StepFeatures(decode_seqs=3, kv_tokens_read=3 * 51)


def test_prefill_seq_s_prices_each_prefilling_sequence_and_defaults_to_zero() -> None:
    timing = dataclasses.replace(TIMING, prefill_seq_s=1e-3)
    f = StepFeatures(prefill_tokens=6, attention_pairs=6 * 70, prefill_seqs=2)
    assert timing.step_time(f) == pytest.approx(TIMING.step_time(f) + 2e-3)
    assert TIMING.prefill_seq_s == 0.0
    assert TIMING.step_time(f) == TIMING.step_time(dataclasses.replace(f, prefill_seqs=0))


def test_ttft_grows_with_uncached_tokens() -> None:
    model = make_model(block_size=16, num_blocks=512)
    system = list(range(10_000, 10_960))
    model.add_request("warm-up", [*system, 1], [1])
    run(model)
    ttfts = []
    for i, fresh in enumerate((16, 160, 480, 960)):
        model.add_request(
            f"r{i}", [*system, *range(50_000 * (i + 1), 50_000 * (i + 1) + fresh)], [1]
        )
        ttfts.append(run(model).ttft(f"r{i}"))
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == 4
    cold = make_model(block_size=16, num_blocks=512)
    cold.add_request("cold", [*system, *range(60_000, 60_016)], [1])
    assert run(cold).ttft("cold") > 5 * ttfts[0]  # the same prompt length, nothing cached


def test_ttft_grows_with_the_requests_ahead() -> None:
    def ttft_of_last(ahead: int) -> float:
        model = make_model(block_size=16, num_blocks=1024, max_num_batched_tokens=512)
        for i in range(ahead + 1):
            model.add_request(f"r{i}", list(range(1000 * i, 1000 * i + 400)), list(range(20)))
        return run(model).ttft(f"r{ahead}")

    ttfts = [ttft_of_last(ahead) for ahead in (0, 2, 4, 8)]
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == 4


def test_abort_frees_the_blocks_and_keeps_them_cached() -> None:
    model = make_model(block_size=16, num_blocks=64)
    prompt = list(range(100))
    model.add_request("r", prompt, list(range(50)))
    model.step()
    model.step()
    assert model.stats().kv_usage > 0
    assert model.abort("r")
    assert not model.abort("r")
    assert not model.abort("never-added")
    assert model.stats().kv_usage == 0.0
    assert model.stats().running == 0
    assert not model.has_work()
    model.add_request("again", prompt, [1])
    assert run(model).cached_tokens("again") == 96


def test_abort_a_waiting_request() -> None:
    model = make_model(block_size=16, num_blocks=64, max_num_seqs=1)
    model.add_request("a", [1, 2, 3], [1, 2])
    model.add_request("b", [4, 5, 6], [1, 2])
    model.step()
    assert model.stats().waiting == 1
    assert model.abort("b")
    result = run(model)
    assert all(t.request_id == "a" for s in result.steps for t in s.tokens)


def test_a_step_without_work_is_empty_and_free() -> None:
    result = make_model().step()
    assert result.duration_s == 0.0
    assert result.tokens == () and result.features == StepFeatures()


def _workload(model: EngineModel) -> None:
    for i in range(60):
        shared = list(range(100 * (i % 3), 100 * (i % 3) + 90))
        model.add_request(
            f"r{i}",
            [*shared, *range(9000 + i * 7, 9000 + i * 7 + i % 13 + 1)],
            [i % 5 + j for j in range(i % 9 + 1)],
        )


def test_same_inputs_give_identical_runs() -> None:
    runs = []
    for _ in range(2):
        model = make_model(block_size=4, num_blocks=80, max_num_batched_tokens=64, max_num_seqs=8)
        _workload(model)
        runs.append((run(model).steps, model.stats()))
    assert runs[0] == runs[1]
    assert runs[0][1].preemptions > 0 and runs[0][1].prefix_hits > 0


def test_from_profile() -> None:
    profile = get_profile("demo")
    model = EngineModel.from_profile(profile)
    assert (model.config, model.timing) == (profile.config, profile.timing)


def test_perf_smoke_5000_requests_with_shared_prefixes() -> None:
    """Not a benchmark: it only shows that replaying thousands of requests stays cheap."""
    profile = get_profile("h100-llama3-8b")
    model = EngineModel.from_profile(profile)
    prefixes = [list(range(1_000_000 * k, 1_000_000 * k + 800)) for k in range(1, 21)]
    started = time.perf_counter()
    for i in range(5000):
        suffix = range(50_000_000 + 200 * i, 50_000_000 + 200 * i + 200)
        model.add_request(f"r{i}", [*prefixes[i % 20], *suffix], [i % 500 + 300] * 8)
    result = run(model)
    elapsed = time.perf_counter() - started
    stats = model.stats()
    assert stats.generation_tokens == 5000 * 8
    assert stats.prefix_hits >= (5000 - 20) * 784  # every later request hits its prefix
    print(
        f"\nperf smoke: 5000 requests x 1000 tokens, {len(result.steps)} steps, "
        f"{elapsed:.2f} s wall ({5000 / elapsed:.0f} req/s), {result.ends[-1]:.1f} s simulated"
    )


def test_the_engine_model_imports_only_the_standard_library() -> None:
    code = (
        "import sys, sim.engine.model, sim.engine.profiles, sim.engine.tokenizer; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'httpx', 'starlette', 'uvicorn', 'pydantic', 'grpc', 'prometheus_client', "
        "'yaml', 'orjson', 'gateway', 'tokenizers', 'numpy'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == "[]\n"
