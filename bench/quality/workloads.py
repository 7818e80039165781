"""The quality benchmark's workloads (synthetic multi-tenant chats, a Mooncake trace slice)
and the emulated fleet each runs on."""

from __future__ import annotations

from pathlib import Path

from routing.traces import load_mooncake
from sim.live.experiment import Fleet, Workload, closed_loop, open_loop
from sim.traces import time_scaled
from sim.workloads import closed_loop_chats, timed_requests

MODEL = "kvgate-bench"
MAX_CONTEXT = 32_768  # the Mooncake fleet's --max-model-len


def synthetic(conversations: int, rate: float, seed: int, replicas: int) -> tuple[Workload, Fleet]:
    """Closed-loop multi-tenant chats: 16 tenants, 1,500-token system prompts, four turns
    each, on the `demo` profile."""
    convs = closed_loop_chats(
        seed=seed,
        tenants=16,
        conversations=conversations,
        turns=4,
        system_tokens=1500,
        rate_per_s=rate,
    )
    return closed_loop("synthetic", MODEL, convs), Fleet(replicas, "demo", MODEL)


def mooncake(
    trace: Path, count: int, rate_scale: float, max_output: int, replicas: int
) -> tuple[Workload, Fleet]:
    """The first `count` trace requests (those that fit the context) open loop at their own
    rate, as streamed completions with text prompts (sglang-router rejects token ids)."""
    requests = [
        r
        for r in time_scaled(load_mooncake(trace, limit=count), rate_scale)
        if r.input_tokens + max_output <= MAX_CONTEXT
    ]
    timed = timed_requests(requests, MODEL, as_text=True, max_output=max_output)
    # H100 timing slowed 10× (speedup 0.1) so two shared cores can drive it; 16,384 KV blocks
    # of 16 tokens per replica (~19 average prompts), so the cache is contended; 32k context.
    args = ("--num-gpu-blocks", "16384", "--max-model-len", str(MAX_CONTEXT))
    fleet = Fleet(replicas, "h100-llama3-8b", MODEL, speedup=0.1, extra_args=args)
    return open_loop("mooncake", timed), fleet
