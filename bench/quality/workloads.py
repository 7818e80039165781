"""The benchmark workloads (synthetic multi-tenant chats, a Mooncake trace slice) and the
emulated fleet each runs on; shared by `bench.quality` and `bench_routing`."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from sim.engine.tokenizer import BuiltinTokenizer
from sim.loadgen import RunStats, TimedRequest, run_conversations, run_timed
from sim.traces import load_mooncake, prompt_token_ids, time_scaled
from sim.workload import multi_tenant_chats

MODEL = "kvgate-bench"
Runner = Callable[[str, dict[str, str], RunStats], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Workload:
    """A replayable workload and the fleet it runs on."""

    name: str
    profile: str
    emulator_args: tuple[str, ...]
    speedup: float
    requests: int
    run: Runner  # (router URL, headers every request carries, stats)


def synthetic(conversations: int, rate: float, seed: int) -> Workload:
    """Multi-tenant chats: 16 tenants, 1,500-token system prompts, four turns each."""
    convs = multi_tenant_chats(
        seed=seed,
        tenants=16,
        conversations=conversations,
        turns=4,
        system_tokens=1500,
        rate_per_s=rate,
    )

    async def run(url: str, headers: dict[str, str], stats: RunStats) -> None:
        await run_conversations(
            url, MODEL, convs, stats, lambda c: {**headers, "x-session-id": c.id}
        )

    turns = sum(len(c.user_turns) for c in convs)
    return Workload("synthetic", "demo", (), 1.0, turns, run)


def text_prompt(ids: list[int], vocabulary: list[str]) -> str:
    """Text that the emulator's tokenizer reads back as one word per id: equal ids, equal
    words, so requests that share trace blocks share a text prefix (and its KV blocks)."""
    return "".join(vocabulary[t % len(vocabulary)] for t in ids)


def mooncake(
    trace: Path, count: int, rate_scale: float, max_output: int, as_text: bool = True
) -> Workload:
    """The first `count` trace requests (those that fit 32k tokens) as streamed completions:
    text prompts (`as_text`; sglang-router rejects token ids) or vLLM-style token-id lists."""
    vocabulary = [piece for _, piece in BuiltinTokenizer().generation_vocabulary()]
    timed = [
        TimedRequest(
            r.arrival_s,
            "/v1/completions",
            orjson.dumps(
                {
                    "model": MODEL,
                    "prompt": (
                        text_prompt(prompt_token_ids(r), vocabulary)
                        if as_text
                        else prompt_token_ids(r)
                    ),
                    "stream": True,
                    "max_tokens": max(1, min(r.output_tokens, max_output)),
                }
            ),
        )
        for r in time_scaled(load_mooncake(trace, limit=count), rate_scale)
        if r.input_tokens + max_output <= 32_768
    ]

    async def run(url: str, headers: dict[str, str], stats: RunStats) -> None:
        await run_timed(url, [dataclasses.replace(t, headers=headers) for t in timed], stats)

    # H100 timing slowed 10× (speedup 0.1) so two shared cores can drive it; 16,384 KV blocks
    # of 16 tokens per replica (~19 average prompts), so the cache is contended; 32k context.
    args = ("--num-gpu-blocks", "16384", "--max-model-len", "32768")
    return Workload("mooncake", "h100-llama3-8b", args, 0.1, len(timed), run)
