"""One scheduling decision per step, as vLLM v1's `Scheduler.schedule()` makes it (FCFS).

Each request has `num_tokens` known and `num_computed` computed tokens (no separate prefill and
decode phases); a step hands out `max_num_batched_tokens` tokens to close the gaps:
1. Running requests first, in admission order, `min(num_tokens − num_computed, budget)` each;
   when no block is left after evicting free cached ones, the last admitted running request is
   preempted (recompute: blocks freed, outputs kept, to the waiting queue's front), down to itself.
2. Then, only if nobody was preempted, waiting requests in FCFS order while fewer than
   `max_num_seqs` run and budget remains: a prefix-cache lookup (at most `(num_tokens − 1) //
   block_size` blocks) skips cached tokens, the rest gets `min(uncached, budget)` (chunked
   prefill); a request whose blocks do not fit stops admission (head-of-line).
3. Every block the step fills with known tokens, generated ones included, is committed to the
   prefix cache as its slots are allocated, so blocks are shared from the step computing them.
Prefix-cache counters follow vLLM's `PrefixCacheStats` (at admission, in known tokens; after a
preemption in `preempted_*`). P/D: `loaded_tokens` (D's transferred KV), `held` (P's blocks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from sim.engine.block_runs import Piece, clipped, shifted
from sim.engine.kv_store import new_kv_cache
from sim.engine.request import EngineRequest
from sim.engine.types import Admission, EngineConfig


class ScheduledChunk(NamedTuple):
    """Tokens of one request computed in the planned step (a tuple: built per token)."""

    request: EngineRequest
    num_tokens: int
    num_computed_before: int  # context already in the cache when the chunk starts
    prefill: bool  # part of a (re)computed prefix, not a one-token decode


@dataclass(slots=True)
class StepPlan:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    admitted: list[Admission] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)


class BatchScheduler:
    """Waiting queue, running list, the KV cache and the counters vLLM keeps beside them."""

    def __init__(self, config: EngineConfig, native: bool | None = None) -> None:
        self.config = config
        self.kv_cache = new_kv_cache(config.num_blocks, config.block_size, native)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preempted_prefix_queries = 0
        self.preempted_prefix_hits = 0
        self.preemptions = 0
        self.held: dict[str, EngineRequest] = {}  # finished, blocks kept (see `release`)

    def add(self, request: EngineRequest) -> None:
        self.waiting.append(request)

    def remove(self, request: EngineRequest) -> None:
        """Drop an unfinished request (abort): free its blocks, keep them cached."""
        if request in self.running:
            self.running.remove(request)
            self._release(request)
        else:
            self.waiting.remove(request)

    def finish(self, requests: Sequence[EngineRequest]) -> None:
        """Free the blocks of requests that emitted their last token, in that order."""
        if not requests:
            return
        for request in requests:
            if request.hold:
                self.held[request.request_id] = request
            else:
                self._release(request)
        done = set(requests)
        self.running = [r for r in self.running if r not in done]

    def release(self, request_id: str) -> bool:
        """Free the blocks a finished `hold` request kept (they stay cached); False if none."""
        request = self.held.pop(request_id, None)
        if request is None:
            return False
        self._release(request)
        return True

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self._schedule_running(plan)
        if not plan.preempted:
            self._schedule_waiting(plan, budget)
        return plan

    def _schedule_running(self, plan: StepPlan) -> int:
        budget = self.config.max_num_batched_tokens
        running = self.running
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            num_new = min(request.num_tokens - request.num_computed, budget)
            while not self._allocate(request, num_new):
                victim = running.pop()
                self._preempt(victim)
                plan.preempted.append(victim.request_id)
                if victim is request:
                    return budget
            plan.chunks.append(
                ScheduledChunk(request, num_new, request.num_computed, request.prefilling)
            )
            budget -= num_new
            index += 1
        return budget

    def _schedule_waiting(self, plan: StepPlan, budget: int) -> None:
        block_size = self.config.block_size
        caching = self.config.enable_prefix_caching
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            hits: list[int] = []
            if caching:
                max_blocks = (request.num_tokens - 1) // block_size
                hits = self.kv_cache.cached_blocks(request.block_hashes(block_size)[:max_blocks])
            cached = len(hits) * block_size
            loaded = loaded_tokens(request, cached)
            num_new = min(request.num_tokens - cached - loaded, budget)
            if not self._allocate(request, loaded + num_new, hits):
                break
            self.waiting.popleft()
            self.running.append(request)
            request.num_computed = cached + loaded
            request.prefilling = True
            resumed = request.num_preemptions > 0
            if caching:
                self._record_lookup(request.num_tokens, cached, resumed)
            if request.prompt_sources is None:
                request.prompt_sources = _prompt_sources(request, cached)
            request.external_tokens = 0  # loaded once: after a preemption it recomputes
            plan.admitted.append(
                Admission(request.request_id, request.num_tokens, cached, resumed, loaded)
            )
            plan.chunks.append(ScheduledChunk(request, num_new, cached + loaded, True))
            budget -= num_new

    def _allocate(self, request: EngineRequest, num_new: int, hits: Sequence[int] = ()) -> bool:
        """vLLM's `allocate_slots`: blocks for the computed, hit and new tokens, or False."""
        kv = self.kv_cache
        block_size = self.config.block_size
        total = request.num_computed + len(hits) * block_size + num_new
        required = -(-total // block_size) - len(request.blocks) - len(hits)
        if hits:
            # Touching a hit that sits in the free queue uses up a free block too.
            if max(required, 0) + kv.num_evictable(hits) > kv.num_free_blocks:
                return False
            request.runs += shifted(kv.touch(hits), len(request.blocks))
            request.blocks.extend(hits)
            request.num_committed_blocks = len(request.blocks)
        elif required > kv.num_free_blocks:
            return False
        full_blocks = 0
        if self.config.enable_prefix_caching:
            full_blocks = min(total, request.num_tokens) // block_size
        start = request.num_committed_blocks
        if required > 0 and start == len(request.blocks) < full_blocks:
            # Only new blocks fill up: allocate and commit them in one go.
            all_hashes = request.block_hashes(block_size)
            hashes = all_hashes[start:full_blocks]
            origin = (request.tokens, all_hashes, start)
            self._add_blocks(request, *kv.allocate_runs(required, hashes, origin))
            request.num_committed_blocks = full_blocks
            return True
        if required > 0:
            self._add_blocks(request, *kv.allocate_runs(required))
        if full_blocks > start:
            self._commit(request, full_blocks)
        return True

    @staticmethod
    def _add_blocks(request: EngineRequest, blocks: list[int], pieces: list[Piece]) -> None:
        request.runs += shifted(pieces, len(request.blocks))
        request.blocks += blocks

    def _commit(self, request: EngineRequest, num_full_blocks: int) -> None:
        start = request.num_committed_blocks
        hashes = request.block_hashes(self.config.block_size)
        self.kv_cache.cache_blocks(
            request.blocks[start:num_full_blocks],
            hashes[start:num_full_blocks],
            clipped(request.runs, start, num_full_blocks),
            (request.tokens, hashes, start),
        )
        request.num_committed_blocks = num_full_blocks

    def _preempt(self, request: EngineRequest) -> None:
        self._release(request)
        request.num_computed = 0
        request.prefilling = False
        request.num_preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(request)

    def _release(self, request: EngineRequest) -> None:
        self.kv_cache.free(request.blocks, request.runs)
        request.blocks = []
        request.runs = []
        request.num_committed_blocks = 0

    def _record_lookup(self, queries: int, hits: int, resumed: bool) -> None:
        if resumed:
            self.preempted_prefix_queries += queries
            self.preempted_prefix_hits += hits
        else:
            self.prefix_queries += queries
            self.prefix_hits += hits


def loaded_tokens(request: EngineRequest, cached: int) -> int:
    """Tokens past `cached` ones the request's (first) admission loads from outside: its
    external tokens but the last known one, which is recomputed (as vLLM does). Their blocks
    are allocated and committed like computed ones, with no token budget and no compute."""
    return max(0, min(request.external_tokens, request.num_tokens - 1) - cached)


def _prompt_sources(request: EngineRequest, cached: int) -> tuple[int, int, int]:
    """(local compute, local cache hit, external) prompt tokens, as vLLM counts them: all
    external tokens past the hits count as transferred, the recomputed last one included."""
    external = max(0, min(request.external_tokens, request.prompt_len) - cached)
    return request.prompt_len - cached - external, cached, external
