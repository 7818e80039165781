"""The precise index fed by a real vLLM's KV-cache events, and requests checked against it.

`EventTracker` runs a `health.kv_events.KvEventSubscriber` whose callback applies every batch
to a `scoring.state.precise_index.PreciseIndex` and counts the events. `Prober` sends requests one
at a time; before each it waits until the index has caught up with the previous request,
predicts the cached prompt tokens from the index (`depth` of the prompt's token-block keys,
through `cached_tokens`) and compares with the response's
`usage.prompt_tokens_details.cached_tokens`.

Caught up: vLLM publishes a step's events before that step's output reaches the client, but
on a loaded machine its publisher thread can lag the response. So the wait is a barrier and
a quiet period: every full block of the tokens the previous request computed (its prompt and
all but its last output token, from `return_token_ids`) must be held in the index (the
batch of its last step has arrived, and batches arrive in order), then no batch for `quiet_s`
(a step that stored nothing new, e.g. a prompt all cached, is seen by the quiet period only).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from adapters.kv_events import KvEventBatch
from health.kv_events import KvEventsSettings, KvEventSubscriber
from routing.kv_events import BlockRemoved, BlockStored
from scoring.state.precise_index import PreciseIndex, cached_tokens
from scoring.state.token_blocks import root_key, token_block_keys

BACKEND = "vllm-0"


class EventTracker:
    """One backend's events into a `PreciseIndex`; stoppable and restartable (the subscriber,
    and so its sequence numbering, is kept across restarts: a restart is a gap to replay)."""

    def __init__(self, settings: KvEventsSettings, model: str) -> None:
        self.model = model
        self.index = PreciseIndex(speculative_ttl_s=0.0)
        self.subscriber = KvEventSubscriber(BACKEND, settings, self._on_batch)
        self.events: Counter[str] = Counter()
        self.stored_blocks = 0
        self.removed_blocks = 0  # evictions: blocks in BlockRemoved events
        self.lora_stored: Counter[str] = Counter()  # blocks stored under each adapter
        self.last_batch = 0.0  # time.monotonic() of the last batch applied
        self._task: asyncio.Task[None] | None = None

    def _on_batch(self, backend: str, batch: KvEventBatch) -> None:
        self.index.apply(backend, batch.events, self.model)
        for event in batch.events:
            self.events[type(event).__name__] += 1
            if isinstance(event, BlockStored):
                self.stored_blocks += len(event.block_hashes)
                if event.lora_name:
                    self.lora_stored[event.lora_name] += len(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                self.removed_blocks += len(event.block_hashes)
        self.last_batch = time.monotonic()

    def start(self) -> None:
        assert self._task is None
        self._task = asyncio.create_task(self.subscriber.run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def figures(self) -> dict[str, Any]:
        c = self.index.counters(BACKEND)
        return {
            "events": dict(self.events),
            "stored_blocks": self.stored_blocks,
            "removed_blocks": self.removed_blocks,
            "lora_stored_blocks": dict(self.lora_stored),
            "index": asdict(c) if c is not None else None,
            "index_blocks_now": self.index.blocks(BACKEND),
            "subscriber": asdict(self.subscriber.counters),
        }


@dataclass(slots=True)
class Probe:
    phase: str
    model: str
    prompt_tokens: int
    depth: int  # leading blocks the index holds
    predicted: int
    actual: int
    held: str = ""  # per prompt block, "1" if the index held it before the request

    @property
    def exact(self) -> bool:
        return self.predicted == self.actual


@dataclass
class Prober:
    """Sequential requests to one vLLM, each predicted from the index before it is sent."""

    client: httpx.AsyncClient
    url: str
    model: str
    block_size: int
    tracker: EventTracker
    quiet_s: float = 0.15
    barrier_timeout_s: float = 10.0
    probes: list[Probe] = field(default_factory=list)
    last_response: float = 0.0
    barrier_waits: list[float] = field(default_factory=list)  # seconds, when not at once
    barrier_timeouts: int = 0
    # (model, token ids) the previous request computed: its blocks must reach the index (of
    # concurrent requests, the last to finish: the others' blocks may be evicted by then)
    _computed: tuple[str, list[int]] | None = None

    async def settle(self, barrier: bool = True) -> None:
        """Wait until the previous request's blocks are in the index (unless `barrier` is
        False: when its events may be lost) and no batch has come for `quiet_s` since the
        last response."""
        computed, self._computed = self._computed, None
        if barrier and computed is not None:
            model, ids = computed
            keys = token_block_keys(ids, self.block_size, root_key(model))
            started = time.monotonic()
            while self.tracker.index.depth(BACKEND, keys) < len(keys):
                waited = time.monotonic() - started
                if waited > self.barrier_timeout_s:
                    self.barrier_timeouts += 1
                    break
                await asyncio.sleep(0.005)
            if (waited := time.monotonic() - started) > 0.001:
                self.barrier_waits.append(waited)
        while True:
            idle = time.monotonic() - max(self.tracker.last_batch, self.last_response)
            if idle >= self.quiet_s:
                return
            await asyncio.sleep(self.quiet_s - idle)

    def predict(self, ids: list[int], model: str) -> tuple[int, int, str]:
        """(depth, cached tokens) the index predicts for a prompt of `ids` under `model`, and
        which of its blocks the index holds."""
        keys = token_block_keys(ids, self.block_size, root_key(model))
        depth = self.tracker.index.depth(BACKEND, keys)
        held = "".join("1" if self.tracker.index.depth(BACKEND, [k]) else "0" for k in keys)
        return depth, cached_tokens(depth, len(ids), self.block_size), held

    async def completion(
        self,
        phase: str,
        ids: list[int],
        *,
        max_tokens: int = 1,
        model: str | None = None,
        xargs: dict[str, str] | None = None,
    ) -> Probe:
        """A `/v1/completions` request of token ids (`xargs`: vLLM's `vllm_xargs`), predicted
        and measured."""
        model = model or self.model
        await self.settle()
        depth, predicted, held = self.predict(ids, model)
        body: dict[str, Any] = {"model": model, "prompt": ids, "max_tokens": max_tokens}
        if xargs:
            body["vllm_xargs"] = xargs
        usage = await self._complete(body)
        assert usage["prompt_tokens"] == len(ids)
        return self._record(Probe(phase, model, len(ids), depth, predicted, 0, held), usage)

    async def chat(
        self, phase: str, messages: list[dict[str, str]], *, max_tokens: int = 1
    ) -> tuple[Probe, str]:
        """A chat request: its ids from vLLM's `/tokenize` (chat template applied), predicted,
        then sent as `/v1/chat/completions`; the probe and the reply's text."""
        await self.settle()
        tok = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        resp = await self.client.post(self.url + "/tokenize", json=tok)
        ids: list[int] = resp.raise_for_status().json()["tokens"]
        depth, predicted, held = self.predict(ids, self.model)
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "return_token_ids": True,
        }
        resp = await self.client.post(self.url + "/v1/chat/completions", json=body)
        data = resp.raise_for_status().json()
        self.last_response = time.monotonic()
        assert data["prompt_token_ids"] == ids, "chat: /tokenize and the request's ids differ"
        self._computed = (self.model, ids + data["choices"][0]["token_ids"][:-1])
        probe = Probe("chat", self.model, len(ids), depth, predicted, 0, held)
        return self._record(probe, data["usage"]), data["choices"][0]["message"]["content"] or ""

    async def send_blind(self, ids: list[int], max_tokens: int = 1) -> None:
        """A request nothing is predicted for (while the subscriber is down, or to make vLLM
        step and publish what it has queued)."""
        await self._complete({"model": self.model, "prompt": ids, "max_tokens": max_tokens})

    async def reset_prefix_cache(self, attempts: int = 5) -> None:
        for attempt in range(attempts):
            resp = await self.client.post(self.url + "/reset_prefix_cache")
            resp.raise_for_status()
            if not resp.content or resp.json().get("success", True):
                self._computed = None  # what it computed is gone
                return
            await asyncio.sleep(0.5 * (attempt + 1))
        raise AssertionError("/reset_prefix_cache kept failing")

    async def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a completion of token ids (`body["prompt"]`); its usage."""
        body = {**body, "return_token_ids": True}
        resp = await self.client.post(self.url + "/v1/completions", json=body)
        data = resp.raise_for_status().json()
        self.last_response = time.monotonic()
        self._computed = (body["model"], body["prompt"] + data["choices"][0]["token_ids"][:-1])
        usage: dict[str, Any] = data["usage"]
        return usage

    def _record(self, probe: Probe, usage: dict[str, Any]) -> Probe:
        details = usage.get("prompt_tokens_details") or {}
        probe.actual = int(details.get("cached_tokens") or 0)
        self.probes.append(probe)
        return probe


def summarize(probes: list[Probe], block_size: int) -> dict[str, Any]:
    """Exact matches, hits and mismatches (with their deltas) of a list of probes; a partial
    hit is one below the most the prompt could have had cached."""
    exact = sum(p.exact for p in probes)
    mismatches = [
        {"request": i, **asdict(p), "delta": p.predicted - p.actual}
        for i, p in enumerate(probes)
        if not p.exact
    ]
    return {
        "requests": len(probes),
        "exact": exact,
        "exact_pct": round(100 * exact / len(probes), 2) if probes else None,
        "with_hits": sum(p.actual > 0 for p in probes),
        "partial_hits": sum(
            0 < p.actual < cached_tokens(p.prompt_tokens, p.prompt_tokens, block_size)
            for p in probes
        ),
        "cached_tokens_actual": sum(p.actual for p in probes),
        "cached_tokens_predicted": sum(p.predicted for p in probes),
        "prompt_tokens": sum(p.prompt_tokens for p in probes),
        "mismatches": mismatches,
    }
