"""The engine model: vLLM v1's scheduling, paged KV cache and prefix caching, in virtual time.

`EngineModel` is pure: no clock, no I/O, no randomness. A caller adds requests (`add_request`
with token ids, or `add_request_hashed` with the hashes of the prompt's full blocks only:
O(blocks)), calls `step()` while `has_work()`, and advances its clock by each step's
`duration_s`; `advance()` fast-forwards runs of decode-only steps in closed form
(`sim.engine.decode_run`), else steps. A step plans the batch (`BatchScheduler.schedule`: running
requests, then admissions, preempting when blocks run out); advances every scheduled request,
one that reaches its known tokens emitting a token at the step's end (the first at the end of
the step completing the prefill); frees the blocks of requests that emitted their last (they
stay cached); and prices itself, linear in its features (`sim.engine.types`). For P/D,
`external_tokens` (D: KV transferred in), `hold`/`release` (P) and `cached_prefix_blocks`.
With `kv_events=True` the cache's changes are recorded (`sim.engine.kv_events`) and taken with
`take_kv_events()` after each step. `native` picks the KV cache (`sim.engine.kv_store`): None,
the compiled one if built; False, the Python reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from routing.kv_events import KvEvent
from sim.engine import decode_run
from sim.engine.batch_scheduler import BatchScheduler, StepPlan
from sim.engine.decode_run import DecodeRun
from sim.engine.kv_cache import chain_block_hashes
from sim.engine.kv_events import KVEventLog
from sim.engine.kv_store import KVCache
from sim.engine.request import EngineRequest
from sim.engine.types import (
    EngineConfig,
    EngineProfile,
    EngineStats,
    StepFeatures,
    StepResult,
    StepTimeCoefficients,
    TokenEvent,
)


def _check_config(config: EngineConfig) -> None:
    for name in (
        "block_size",
        "num_blocks",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
    ):
        if getattr(config, name) < 1:
            raise ValueError(f"EngineConfig.{name} must be positive, got {getattr(config, name)}")


class EngineModel:
    """One simulated vLLM engine (see the module docstring)."""

    def __init__(
        self,
        config: EngineConfig,
        timing: StepTimeCoefficients,
        kv_events: bool = False,
        native: bool | None = None,
    ) -> None:
        _check_config(config)
        self.config = config
        self.timing = timing
        self._scheduler = BatchScheduler(config, native)
        if kv_events:
            self._scheduler.kv_cache.events = KVEventLog(config.block_size)
        self._requests: dict[str, EngineRequest] = {}
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._version = 0  # bumped by every change: a DecodeRun plan is valid for one version
        self._hashed = 0  # hashed requests added, to key their output blocks
        self._by_source = [0, 0, 0]  # prompt tokens: local compute, local cache hit, external

    @classmethod
    def from_profile(cls, profile: EngineProfile) -> EngineModel:
        return cls(profile.config, profile.timing)

    @property
    def kv_cache(self) -> KVCache:
        return self._scheduler.kv_cache

    def add_request(
        self,
        request_id: str,
        prompt: Sequence[int],
        output: Sequence[int],
        *,
        external_tokens: int = 0,
        hold: bool = False,
    ) -> None:
        """Queue a request that will generate exactly `output` (like ignore_eos, max_tokens).

        Request ids must be unique among unfinished and held requests. `external_tokens` K
        (0 ≤ K ≤ len(prompt)): the KV of the prompt's first K tokens arrives computed from
        another engine (the caller waits out the transfer before adding). At admission, the
        blocks past the engine's own prefix-cache hits that hold them are allocated, filled
        and committed to the prefix cache without compute or token budget; the rest of the
        prompt, and at least its last token (as vLLM recomputes it), is prefilled. Stats count
        the K tokens past the hits as `prompt_tokens_external`. `hold`: when the request
        finishes, its blocks stay referenced (counted in usage, `held_blocks`) until `release`.
        """
        self._check_new(request_id, len(prompt), len(output), external_tokens)
        request = EngineRequest(
            request_id=request_id,
            tokens=(*prompt, *output),
            prompt_len=len(prompt),
            output_len=len(output),
            external_tokens=external_tokens,
            hold=hold,
        )
        self._queue(request)

    def add_request_hashed(
        self,
        request_id: str,
        prompt_len: int,
        block_hashes: Sequence[int],
        output_len: int,
        *,
        external_tokens: int = 0,
        hold: bool = False,
    ) -> None:
        """Queue a request known by the chained hashes of its prompt's full blocks only.

        `block_hashes` has `prompt_len // block_size` entries; equal hashes must mean equal
        prefixes (as `chain_block_hashes` gives). The blocks that hold generated tokens get
        hashes of their own, chained from the prompt's and unique to this request: they are
        committed to the prefix cache like any block, but no other request hits them.
        `external_tokens` and `hold` as for `add_request`.
        """
        self._check_new(request_id, prompt_len, output_len, external_tokens)
        bs = self.config.block_size
        if len(block_hashes) != prompt_len // bs:
            raise ValueError(
                f"request {request_id!r}: {len(block_hashes)} block hashes for a prompt of "
                f"{prompt_len} tokens in blocks of {bs} (expected {prompt_len // bs})"
            )
        hashes = list(block_hashes)
        self._hashed += 1
        parent = hashes[-1] if hashes else 0
        for index in range(len(hashes), (prompt_len + output_len) // bs):
            parent = hash((parent, -self._hashed, index))
            hashes.append(parent)
        request = EngineRequest.hashed(request_id, prompt_len, output_len, hashes)
        request.external_tokens = external_tokens
        request.hold = hold
        self._queue(request)

    def _check_new(
        self, request_id: str, prompt_len: int, output_len: int, external_tokens: int = 0
    ) -> None:
        if prompt_len < 1:
            raise ValueError(f"request {request_id!r}: the prompt is empty")
        if output_len < 1:
            raise ValueError(f"request {request_id!r}: output must have at least one token")
        if request_id in self._requests or request_id in self._scheduler.held:
            raise ValueError(f"request {request_id!r} is already in the engine")
        if not 0 <= external_tokens <= prompt_len:
            raise ValueError(
                f"request {request_id!r}: external_tokens {external_tokens} outside "
                f"[0, {prompt_len}]"
            )
        total = prompt_len + output_len
        if total > self.config.max_model_len:
            raise ValueError(
                f"request {request_id!r}: {prompt_len} prompt + {output_len} output tokens "
                f"exceed max_model_len {self.config.max_model_len}"
            )
        # The last output token is sampled but never computed, so it needs no slot.
        blocks_needed = -(-(total - 1) // self.config.block_size)
        if blocks_needed > self.config.num_blocks:
            raise ValueError(
                f"request {request_id!r} needs {blocks_needed} KV blocks; the cache has "
                f"{self.config.num_blocks}"
            )

    def _queue(self, request: EngineRequest) -> None:
        self._requests[request.request_id] = request
        self._scheduler.add(request)
        self._version += 1

    def abort(self, request_id: str) -> bool:
        """Drop an unfinished request; its blocks go to the free queue, still cached."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return False
        self._scheduler.remove(request)
        self._version += 1
        return True

    def release(self, request_id: str) -> bool:
        """Free the blocks a finished `hold` request kept (they stay cached, as a finished
        request's do); False if it holds none (unknown, unfinished or released)."""
        if not self._scheduler.release(request_id):
            return False
        self._version += 1
        return True

    def held_blocks(self, request_id: str) -> tuple[int, ...]:
        """The block ids a finished `hold` request keeps, in prompt order (empty if none)."""
        request = self._scheduler.held.get(request_id)
        return tuple(request.blocks) if request is not None else ()

    def cached_prefix_blocks(self, prompt: Sequence[int]) -> int:
        """How many of the prompt's leading full blocks the prefix cache holds (held or
        free); what a transfer of the prompt's KV to this engine can skip."""
        return self.cached_prefix_blocks_hashed(chain_block_hashes(prompt, self.config.block_size))

    def cached_prefix_blocks_hashed(self, block_hashes: Sequence[int]) -> int:
        """`cached_prefix_blocks` for a prompt known by its full blocks' chained hashes."""
        if not self.config.enable_prefix_caching:
            return 0
        return self._scheduler.kv_cache.find_cached_prefix(block_hashes)

    def has_work(self) -> bool:
        return bool(self._requests)

    def step(self) -> StepResult:
        """Plan, compute and price one step. Without work, or while the waiting requests
        need blocks that held requests keep: an empty step of 0 s (`StepResult.idle`); the
        caller then waits for a `release` (or a new request)."""
        self._version += 1
        plan = self._scheduler.schedule()
        if not plan.chunks:
            if self._requests and not plan.preempted and not self._scheduler.held:
                raise RuntimeError("engine model stalled with unfinished requests")
            return StepResult(0.0, StepFeatures(), preempted=tuple(plan.preempted))
        features, tokens = self._compute(plan)
        return StepResult(
            duration_s=self.timing.step_time(features),
            features=features,
            tokens=tuple(tokens),
            admitted=tuple(plan.admitted),
            preempted=tuple(plan.preempted),
        )

    def plan_decode_run(self, max_duration_s: float = math.inf) -> DecodeRun | None:
        """The decode-only steps ahead, planned without side effects (None: the next step is
        not decode-only). Step i ≥ 1 is included only if it starts before `max_duration_s`.
        """
        return decode_run.plan(self._scheduler, self.timing, max_duration_s, self._version)

    def apply_decode_run(self, run: DecodeRun, steps: int | None = None) -> tuple[str, ...]:
        """Commit the first `steps` steps of `run` (all by default); returns the ids of the
        requests that finished. The engine must not have changed since `run` was planned."""
        n = run.steps if steps is None else steps
        if run.version != self._version:
            raise RuntimeError("the engine changed since this decode run was planned")
        if not 1 <= n <= run.steps:
            raise ValueError(f"steps must be in [1, {run.steps}], got {n}")
        finished = decode_run.apply(self._scheduler, run, n)
        for request in finished:
            del self._requests[request.request_id]
        self._scheduler.finish(finished)
        self._generation_tokens += run.decode_seqs * n
        self._version += 1
        return tuple(r.request_id for r in finished)

    def advance(self, max_duration_s: float = math.inf) -> StepResult | DecodeRun:
        """A whole decode-only run if one is ahead (see `plan_decode_run`), else `step()`."""
        run = self.plan_decode_run(max_duration_s)
        if run is None:
            return self.step()
        self.apply_decode_run(run)
        return run

    def take_kv_events(self) -> list[KvEvent]:
        """KV-cache events since the last call, oldest first (always empty unless the
        model was made with `kv_events=True`)."""
        log = self._scheduler.kv_cache.events
        return log.take() if log is not None else []

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block, as vLLM's `/reset_prefix_cache`; False (nothing done)
        while a request holds blocks."""
        self._version += 1
        return self._scheduler.kv_cache.reset_prefix_cache()

    def load(self) -> tuple[int, int, int]:
        """(waiting, running, free KV blocks): the gauges, cheaper than `stats()`."""
        scheduler = self._scheduler
        return len(scheduler.waiting), len(scheduler.running), scheduler.kv_cache.num_free_blocks

    def stats(self) -> EngineStats:
        scheduler = self._scheduler
        return EngineStats(
            running=len(scheduler.running),
            waiting=len(scheduler.waiting),
            kv_usage=scheduler.kv_cache.usage,
            block_size=self.config.block_size,
            num_blocks=self.config.num_blocks,
            prefix_queries=scheduler.prefix_queries,
            prefix_hits=scheduler.prefix_hits,
            preemptions=scheduler.preemptions,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
            preempted_prefix_queries=scheduler.preempted_prefix_queries,
            preempted_prefix_hits=scheduler.preempted_prefix_hits,
            prompt_tokens_local_compute=self._by_source[0],
            prompt_tokens_local_cache_hit=self._by_source[1],
            prompt_tokens_external=self._by_source[2],
            held_blocks=sum(len(r.blocks) for r in scheduler.held.values()),
        )

    def _count_sources(self, request: EngineRequest) -> None:
        sources = request.prompt_sources or (request.prompt_len, 0, 0)
        for i, tokens in enumerate(sources):
            self._by_source[i] += tokens

    def _compute(self, plan: StepPlan) -> tuple[StepFeatures, list[TokenEvent]]:
        prefill_tokens = attention_pairs = decode_seqs = kv_tokens_read = context_pairs = 0
        prefill_seqs = 0
        tokens: list[TokenEvent] = []
        finished: list[EngineRequest] = []
        for chunk in plan.chunks:
            request = chunk.request
            computed = chunk.num_computed_before + chunk.num_tokens
            if chunk.prefill:
                prefill_tokens += chunk.num_tokens
                attention_pairs += chunk.num_tokens * computed
                context_pairs += chunk.num_tokens * chunk.num_computed_before
                prefill_seqs += 1
            else:
                decode_seqs += 1
                kv_tokens_read += computed
            request.num_computed = computed
            if computed < request.num_tokens:
                continue  # a prefill chunk short of the end samples nothing
            index = request.emit()
            if index == 0:
                self._prompt_tokens += request.prompt_len
                self._count_sources(request)
            done = index + 1 == request.output_len
            tokens.append(TokenEvent(request.request_id, index, request.output_token(index), done))
            if done:
                finished.append(request)
                del self._requests[request.request_id]
        self._generation_tokens += len(tokens)
        self._scheduler.finish(finished)
        features = StepFeatures(
            prefill_tokens,
            attention_pairs,
            decode_seqs,
            kv_tokens_read,
            context_pairs,
            prefill_seqs,
        )
        return features, tokens
