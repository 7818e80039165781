"""vLLM v1 scheduling behaviour, observed through EngineModel's public surface."""

from __future__ import annotations

import pytest

from tests.unit.sim.engine.driving import make_model, run


@pytest.mark.parametrize(("prompt_len", "cached"), [(96, 80), (97, 96), (100, 96), (16, 0)])
def test_a_repeated_prompt_hits_all_but_its_last_token_in_whole_blocks(
    prompt_len: int, cached: int
) -> None:
    model = make_model(block_size=16, num_blocks=64)
    prompt = list(range(1000, 1000 + prompt_len))
    model.add_request("first", prompt, [7])
    first = run(model)
    model.add_request("again", prompt, [7])
    again = run(model)
    assert first.cached_tokens("first") == 0
    assert again.cached_tokens("again") == cached  # floor((len - 1) / bs) * bs
    assert again.steps[0].features.prefill_tokens == prompt_len - cached
    stats = model.stats()
    assert stats.prefix_queries == 2 * prompt_len
    assert stats.prefix_hits == cached


def test_a_shared_prefix_hits_only_its_full_blocks() -> None:
    model = make_model(block_size=16, num_blocks=64)
    system = list(range(500, 540))  # 2.5 blocks
    model.add_request("a", [*system, 1, 2, 3], [7])
    run(model)
    model.add_request("b", [*system, 4, 5, 6], [7])
    assert run(model).cached_tokens("b") == 32


def test_prefix_caching_disabled_never_hits_nor_counts() -> None:
    model = make_model(block_size=16, num_blocks=64, enable_prefix_caching=False)
    prompt = list(range(100))
    for name in ("a", "b"):
        model.add_request(name, prompt, [7])
        assert run(model).cached_tokens(name) == 0
    assert (model.stats().prefix_queries, model.stats().prefix_hits) == (0, 0)


def test_chunked_prefill_respects_the_token_budget() -> None:
    model = make_model(block_size=16, num_blocks=64, max_num_batched_tokens=64)
    model.add_request("a", list(range(200)), [1, 2, 3])
    model.add_request("b", list(range(1000, 1100)), [4, 5])
    result = run(model)
    for step in result.steps:
        scheduled = step.features.prefill_tokens + step.features.decode_seqs
        assert scheduled <= 64
    assert [s.features.prefill_tokens for s in result.steps[:4]] == [64, 64, 64, 64]
    # Step 4 finishes a's prompt (8 tokens) and gives b the rest of the budget (56).
    assert [a.request_id for a in result.steps[3].admitted] == ["b"]
    assert [t.request_id for t in result.steps[3].tokens] == ["a"]
    assert result.steps[4].features.decode_seqs == 1  # a decodes beside b's last chunk
    assert result.steps[4].features.prefill_tokens == 44
    assert [(t.request_id, t.index) for t in result.steps[4].tokens] == [("a", 1), ("b", 0)]


def test_max_num_seqs_caps_the_running_requests() -> None:
    model = make_model(block_size=16, num_blocks=256, max_num_seqs=2)
    for i in range(5):
        model.add_request(f"r{i}", list(range(i * 100, i * 100 + 40)), [1, 2, 3, 4])
    admitted: list[str] = []
    while model.has_work():
        step = model.step()
        admitted += [a.request_id for a in step.admitted]
        assert model.stats().running <= 2
        assert step.features.prefill_tokens // 40 + step.features.decode_seqs <= 2
    assert admitted == ["r0", "r1", "r2", "r3", "r4"]  # FCFS


def test_running_out_of_blocks_preempts_the_newest_and_everything_completes() -> None:
    # 8 blocks of 4 tokens; each request grows to 15 tokens (4 blocks): 4 cannot coexist.
    model = make_model(block_size=4, num_blocks=8, max_num_batched_tokens=64)
    outputs = {f"r{i}": [100 * i + j for j in range(10)] for i in range(4)}
    for i, (request_id, output) in enumerate(outputs.items()):
        model.add_request(request_id, [i * 10 + j for j in range(6)], output)
    result = run(model)

    preempted = [rid for step in result.steps for rid in step.preempted]
    assert preempted
    assert model.stats().preemptions == len(preempted)
    assert model.stats().kv_usage == 0.0
    for request_id, output in outputs.items():
        events = result.tokens(request_id)
        assert [t.index for t in events] == list(range(10))
        assert [t.token_id for t in events] == output
        assert [t.finished for t in events] == [False] * 9 + [True]
    # At 9 tokens each, r0 needs a third block: r3 (the newest) is preempted; r1 fits in
    # r3's freed blocks; r2 then finds none and, being last, preempts itself.
    first = next(i for i, step in enumerate(result.steps) if step.preempted)
    assert result.steps[first].preempted == ("r3", "r2")
    assert [t.request_id for t in result.steps[first].tokens] == ["r0", "r1"]
    # Each went to the front of the queue: r2 first. They recompute prompt + 3 outputs.
    resumed = [a for s in result.steps[first + 1 :] for a in s.admitted]
    assert [(a.request_id, a.resumed, a.prompt_tokens) for a in resumed] == [
        ("r2", True, 9),
        ("r3", True, 9),
    ]


def test_no_admissions_in_a_step_that_preempts() -> None:
    model = make_model(block_size=4, num_blocks=8, max_num_batched_tokens=64)
    for i in range(4):
        model.add_request(f"r{i}", [i * 10 + j for j in range(6)], list(range(10)))
    for step in run(model).steps:
        if step.preempted:
            assert not step.admitted


def test_preempted_lookups_are_counted_apart_as_vllm_does() -> None:
    model = make_model(block_size=4, num_blocks=8, max_num_batched_tokens=64)
    for i in range(4):
        model.add_request(f"r{i}", [i * 10 + j for j in range(6)], list(range(10)))
    result = run(model)
    stats = model.stats()
    assert stats.prefix_queries == 4 * 6  # first admissions: the prompts
    resumed = [a for s in result.steps for a in s.admitted if a.resumed]
    assert resumed
    assert stats.preempted_prefix_queries == sum(a.prompt_tokens for a in resumed)
    assert stats.preempted_prefix_hits == sum(a.cached_tokens for a in resumed)


def test_blocks_filled_by_generated_tokens_are_cached() -> None:
    model = make_model(block_size=16, num_blocks=64)
    prompt = list(range(2000, 2040))  # 2 full blocks + 8
    output = list(range(3000, 3030))  # KV computed for 40 + 29 tokens: 4 full blocks
    model.add_request("turn1", prompt, output)
    run(model)
    follow_up = [*prompt, *output, *range(4000, 4020)]
    model.add_request("turn2", follow_up, [1])
    assert run(model).cached_tokens("turn2") == 64  # beyond the 32 of the original prompt


def test_waiting_head_blocks_later_requests_when_its_blocks_do_not_fit() -> None:
    model = make_model(block_size=4, num_blocks=10, max_num_batched_tokens=64)
    model.add_request("big", list(range(24)), list(range(8)))  # 8 blocks at the end
    while model.stats().running == 0:
        model.step()
    model.add_request("large", list(range(100, 124)), [1])  # 6 blocks: does not fit now
    model.add_request("tiny", [9], [1])  # would fit, but FCFS keeps it behind
    step = model.step()
    assert step.admitted == ()
    assert model.stats().waiting == 2
