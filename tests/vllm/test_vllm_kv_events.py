"""The precise index against real vLLM: does it predict every request's cached tokens exactly?

One vLLM CPU server (`bench.live_vllm`: the tiny dummy-weight model, 64 KV blocks of 32
tokens, a dummy LoRA adapter) publishes its KV-cache events on `ipc://` sockets; the
index follows them through the gateway's own subscriber. Requests go straight to vLLM, one at
a time, each predicted from the index before it is sent (`tests.vllm.harness`):

1. completions of token-id lists: six tenants' long shared prefixes (whole, or cut short)
   with unique suffixes, repeats, fresh prompts; ~10x the cache's tokens, so vLLM evicts;
2. mid-run the subscriber is stopped, requests go unseen, and it is started again: the gap
   is filled from vLLM's replay socket and the predictions stay exact; then bursts of
   concurrent requests, each followed by sequential ones checked against the index;
3. chats (one and two turns) whose token ids come from vLLM's `/tokenize`;
4. LoRA: the same prefixes under the adapter, cached apart from the base model's;
5. requests half of which ask for `kv_cache_report_mode: "full"` (vLLM then announces
   their cache hits again as `BlockStored`, which the index must not count as copies; a
   one-block re-announcement it cannot tell from a copy, and may over-predict by a block);
6. `/reset_prefix_cache`: `AllBlocksCleared` empties the index.

Writes out/vllm-events/vllm-events.json (figures and every mismatch with its delta) and
prints the figures. Needs `.venv-vllm/` (made on first use, ~4 min); `make test-vllm`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import httpx
import pytest

from bench import REPO_ROOT
from bench.live_vllm import LiveVllm, vllm_with_events
from tests.vllm.harness import BACKEND, EventTracker, Probe, Prober, summarize

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

OUT = REPO_ROOT / "out" / "vllm-events"
NUM_BLOCKS = 64  # x 32 tokens: 2048 tokens of KV cache
LORA = "lora-a"
TENANTS = 6
MAIN_REQUESTS = 200
BLIND_REQUESTS = 8
CHATS = 40
LORA_REQUESTS = 30
AFTER_RESET = 12
REPORT_FULL_REQUESTS = 60
BURSTS = 8
BURST_SIZE = 4
MIN_EXACT_PCT = 95.0


@pytest.fixture(scope="module")
def vllm() -> Iterator[LiveVllm]:
    with vllm_with_events(OUT, num_blocks=NUM_BLOCKS, loras=(LORA,)) as server:
        yield server


class Workload:
    """Token-id prompts sharing tenants' prefixes, and chat messages, from one seed."""

    def __init__(self, vocab: int, seed: int = 16) -> None:
        self.rng = random.Random(seed)
        self.vocab = vocab
        self.prefixes = [self.ids(self.rng.randrange(288, 700)) for _ in range(TENANTS)]
        self.recent: list[list[int]] = []
        words = re.findall(r"[A-Za-z]{3,}", (REPO_ROOT / "README.md").read_text())
        self.words = sorted(set(words))
        self.systems = [self.text(self.rng.randrange(150, 350)) for _ in range(4)]

    def ids(self, n: int) -> list[int]:
        return [self.rng.randrange(3, self.vocab) for _ in range(n)]

    def text(self, words: int) -> str:
        return " ".join(self.rng.choice(self.words) for _ in range(words))

    def tenant(self) -> int:
        return min(int(self.rng.expovariate(0.45)), TENANTS - 1)  # skewed popularity

    def prompt(self) -> list[int]:
        r = self.rng.random()
        if r < 0.15 and self.recent:
            return list(self.rng.choice(self.recent[-10:]))  # an exact repeat
        if r < 0.25:
            ids = self.ids(self.rng.randrange(32, 400))  # nobody's prefix
        else:
            prefix = self.prefixes[self.tenant()]
            if r < 0.40:
                prefix = prefix[: self.rng.randrange(1, len(prefix))]  # cut anywhere
            ids = prefix + self.ids(self.rng.randrange(8, 160))
        self.recent.append(ids)
        return ids

    def max_tokens(self) -> int:
        return self.rng.choice((1, 1, 2, 4, 8))


async def test_precise_index_predicts_vllm_cached_tokens(vllm: LiveVllm) -> None:
    started = time.monotonic()
    work = Workload(vllm.spec.vocab_size)
    tracker = EventTracker(vllm.events, vllm.model)
    figures: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=120.0) as client:
        prober = Prober(client, vllm.url, vllm.model, vllm.block_size, tracker)
        tracker.start()
        await _connected(prober, work)
        try:
            figures = await _run(prober, work, figures)
        finally:
            await tracker.stop()
            figures.update(_figures(vllm, prober, tracker, started))
            _write(figures)
    _check(figures, tracker)


async def _connected(prober: Prober, work: Workload) -> None:
    """Until the subscriber gets batches (a SUB socket misses what is published before it has
    joined), then a reset so the index and the cache start empty together."""
    deadline = time.monotonic() + 30
    while not prober.tracker.subscriber.counters.batches:
        assert time.monotonic() < deadline, "no KV-event batch from vLLM in 30 s"
        await prober.send_blind(work.ids(64))
        await prober.settle(barrier=False)  # its batch may come before the subscription
    await _reset(prober)


async def _reset(prober: Prober) -> None:
    """`/reset_prefix_cache`; vLLM publishes the clear at its next step, so make one."""
    clears = prober.tracker.events["AllBlocksCleared"]
    await prober.reset_prefix_cache()
    await prober.send_blind([5, 6, 7])  # less than a block: stores nothing
    await prober.settle()
    assert prober.tracker.events["AllBlocksCleared"] == clears + 1
    assert prober.tracker.index.blocks(BACKEND) == 0


async def _run(prober: Prober, work: Workload, figures: dict[str, Any]) -> dict[str, Any]:
    tracker = prober.tracker
    for i in range(MAIN_REQUESTS):
        if i == MAIN_REQUESTS // 2:
            figures["replay"] = await _replay(prober, work)
        await prober.completion("tokens", work.prompt(), max_tokens=work.max_tokens())

    for _ in range(BURSTS):  # concurrent requests, then is the index still exact?
        burst = [work.prompt() for _ in range(BURST_SIZE)]
        await prober.settle()
        await asyncio.gather(*(prober.send_blind(ids, max_tokens=4) for ids in burst))
        for _ in range(3):
            await prober.completion("after-burst", work.prompt(), max_tokens=work.max_tokens())

    replies: list[tuple[list[dict[str, str]], str]] = []
    for _ in range(CHATS):
        if replies and work.rng.random() < 0.3:  # a second turn of an earlier chat
            messages, reply = work.rng.choice(replies)
            messages = [*messages, {"role": "assistant", "content": reply}]
        else:
            messages = [{"role": "system", "content": work.rng.choice(work.systems)}]
        messages = [*messages, {"role": "user", "content": work.text(work.rng.randrange(5, 60))}]
        _, reply = await prober.chat("chat", messages, max_tokens=work.rng.choice((4, 8, 16)))
        replies.append((messages, reply))

    for i in range(LORA_REQUESTS):
        model = LORA if i % 3 else prober.model
        prompt = work.prefixes[work.tenant()] + work.ids(work.rng.randrange(8, 100))
        await prober.completion("lora", prompt, model=model, max_tokens=2)
    stored_under_lora = tracker.lora_stored[LORA]

    full = {"kv_cache_report_mode": "full"}
    for i in range(REPORT_FULL_REQUESTS):
        prompt = work.prompt()
        await prober.completion("report-full", prompt, xargs=full if i % 2 else None)

    await _reset(prober)
    for i in range(AFTER_RESET):
        prompt = work.prefixes[i % 3] + work.ids(40)
        await prober.completion("after-reset", prompt)
    return {**figures, "lora_blocks_stored": stored_under_lora}


async def _replay(prober: Prober, work: Workload) -> dict[str, Any]:
    """Stop the subscriber, send requests it cannot see, start it again: the next live batch
    shows a gap, which the replay socket fills."""
    tracker = prober.tracker
    await prober.settle()
    before = asdict(tracker.subscriber.counters)
    await tracker.stop()
    for _ in range(BLIND_REQUESTS):
        await prober.send_blind(work.prompt(), max_tokens=2)
    tracker.start()
    deadline = time.monotonic() + 30
    c = tracker.subscriber.counters
    while c.gaps == before["gaps"]:
        assert time.monotonic() < deadline, "no gap seen after the subscriber's restart"
        await prober.send_blind(work.ids(64))  # new blocks: a live batch
        await prober.settle(barrier=False)
    while c.replayed + c.missed == before["replayed"] + before["missed"]:
        assert time.monotonic() < deadline, "the gap was never filled"
        await asyncio.sleep(0.05)
    await prober.settle()
    return {
        "blind_requests": BLIND_REQUESTS,
        "gaps": c.gaps - before["gaps"],
        "replayed_batches": c.replayed - before["replayed"],
        "missed_batches": c.missed - before["missed"],
    }


def _figures(
    vllm: LiveVllm, prober: Prober, tracker: EventTracker, started: float
) -> dict[str, Any]:
    probes = prober.probes
    phases: dict[str, list[Probe]] = {}
    for p in probes:
        phases.setdefault(p.phase, []).append(p)
    return {
        "vllm": vllm.versions,
        "model": vllm.spec.describe(),
        "kv_blocks": vllm.num_blocks,
        "block_size": vllm.block_size,
        "lora": list(vllm.loras),
        "quiet_s": prober.quiet_s,
        "barrier": {
            "waits": len(prober.barrier_waits),
            "max_wait_s": round(max(prober.barrier_waits, default=0.0), 3),
            "timeouts": prober.barrier_timeouts,
        },
        **summarize(probes, vllm.block_size),
        "by_phase": {
            name: {k: v for k, v in summarize(ps, vllm.block_size).items() if k != "mismatches"}
            for name, ps in phases.items()
        },
        **tracker.figures(),
        "seconds": round(time.monotonic() - started, 1),
    }


def _write(figures: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "vllm-events.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    shown = {k: v for k, v in figures.items() if k not in ("mismatches", "by_phase")}
    print(f"\nprecise index vs vLLM ({path}):")
    for key, value in shown.items():
        print(f"  {key}: {value}")
    for name, row in figures.get("by_phase", {}).items():
        print(f"  phase {name}: {row}")
    for m in figures.get("mismatches", [])[:20]:
        print(f"  mismatch: {m}")


def _check(figures: dict[str, Any], tracker: EventTracker) -> None:
    assert figures["exact_pct"] >= MIN_EXACT_PCT, figures["mismatches"]
    assert figures["requests"] >= MAIN_REQUESTS + CHATS + LORA_REQUESTS
    assert figures["with_hits"] > figures["requests"] // 3  # the cache is hit, often
    assert figures["partial_hits"] > 10  # and not only whole prompts
    assert tracker.removed_blocks > 0, "vLLM evicted nothing: the cache is too large"
    assert tracker.events["AllBlocksCleared"] >= 2
    replay = figures["replay"]
    assert replay["gaps"] >= 1 and replay["replayed_batches"] >= 1
    assert replay["missed_batches"] == 0
    assert figures["lora_blocks_stored"] > 0
    assert figures["by_phase"]["lora"]["with_hits"] > 0
    assert figures["by_phase"]["chat"]["with_hits"] > 0
    assert figures["index"]["reannounced_blocks"] > 0  # report mode "full" was exercised
    # What the index still gets wrong there: a one-block re-announcement, which it cannot tell
    # from a second copy (see scoring/state/precise_index.py): the block stays held after eviction.
    for m in figures["mismatches"]:
        if m["phase"] == "report-full":
            assert m["delta"] == figures["block_size"], m
    assert figures["by_phase"]["after-burst"]["exact_pct"] >= MIN_EXACT_PCT
    after = figures["by_phase"]["after-reset"]
    assert after["exact"] == after["requests"]
