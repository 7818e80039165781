"""The engine model: vLLM v1's scheduling, paged KV cache and prefix caching, in virtual time.

`EngineModel` is pure: no clock, no I/O, no randomness. A caller (the HTTP emulator, the
offline replayer) adds requests, calls `step()` while `has_work()`, and advances its own
clock by each step's `duration_s`. A step:

1. plans the batch (`Scheduler.schedule`: running requests, then admissions, with
   preemption when blocks run out);
2. computes it: every scheduled request advances `num_computed`; one that reaches its
   known tokens samples the next output token, emitted at the end of the step (the first,
   index 0, at the end of the step that completes the prefill);
3. frees the blocks of requests that emitted their last token (they stay cached);
4. prices the step with the linear model of `StepTimeCoefficients` over its features:
   P, uncached prompt (or recompute) tokens; A = Σ chunk_len × (context before + chunk_len);
   D, decoding sequences; K = Σ their context lengths including the token being decoded.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine.kv_cache import PagedKVCache
from sim.engine.request import EngineRequest
from sim.engine.scheduler import Scheduler, StepPlan
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

    def __init__(self, config: EngineConfig, timing: StepTimeCoefficients) -> None:
        _check_config(config)
        self.config = config
        self.timing = timing
        self._scheduler = Scheduler(config)
        self._requests: dict[str, EngineRequest] = {}
        self._prompt_tokens = 0
        self._generation_tokens = 0

    @classmethod
    def from_profile(cls, profile: EngineProfile) -> EngineModel:
        return cls(profile.config, profile.timing)

    @property
    def kv_cache(self) -> PagedKVCache:
        return self._scheduler.kv_cache

    def add_request(self, request_id: str, prompt: Sequence[int], output: Sequence[int]) -> None:
        """Queue a request that will generate exactly `output` (like ignore_eos, max_tokens).

        Request ids must be unique among unfinished requests.
        """
        if not prompt:
            raise ValueError(f"request {request_id!r}: the prompt is empty")
        if not output:
            raise ValueError(f"request {request_id!r}: output must have at least one token")
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already in the engine")
        total = len(prompt) + len(output)
        if total > self.config.max_model_len:
            raise ValueError(
                f"request {request_id!r}: {len(prompt)} prompt + {len(output)} output tokens "
                f"exceed max_model_len {self.config.max_model_len}"
            )
        # The last output token is sampled but never computed, so it needs no slot.
        blocks_needed = -(-(total - 1) // self.config.block_size)
        if blocks_needed > self.config.num_blocks:
            raise ValueError(
                f"request {request_id!r} needs {blocks_needed} KV blocks; the cache has "
                f"{self.config.num_blocks}"
            )
        request = EngineRequest(
            request_id=request_id,
            tokens=(*prompt, *output),
            prompt_len=len(prompt),
            output_len=len(output),
        )
        self._requests[request_id] = request
        self._scheduler.add(request)

    def abort(self, request_id: str) -> bool:
        """Drop an unfinished request; its blocks go to the free queue, still cached."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return False
        self._scheduler.remove(request)
        return True

    def has_work(self) -> bool:
        return bool(self._requests)

    def step(self) -> StepResult:
        """Plan, compute and price one step. Without work: an empty step of 0 s."""
        plan = self._scheduler.schedule()
        if not plan.chunks:
            if self._requests and not plan.preempted:
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
        )

    def _compute(self, plan: StepPlan) -> tuple[StepFeatures, list[TokenEvent]]:
        prefill_tokens = attention_pairs = decode_seqs = kv_tokens_read = 0
        tokens: list[TokenEvent] = []
        finished: list[EngineRequest] = []
        for chunk in plan.chunks:
            request = chunk.request
            computed = chunk.num_computed_before + chunk.num_tokens
            if chunk.prefill:
                prefill_tokens += chunk.num_tokens
                attention_pairs += chunk.num_tokens * computed
            else:
                decode_seqs += 1
                kv_tokens_read += computed
            request.num_computed = computed
            if computed < request.num_tokens:
                continue  # a prefill chunk short of the end samples nothing
            index = request.emit()
            if index == 0:
                self._prompt_tokens += request.prompt_len
            done = index + 1 == request.output_len
            tokens.append(
                TokenEvent(
                    request.request_id, index, request.tokens[request.prompt_len + index], done
                )
            )
            if done:
                finished.append(request)
                del self._requests[request.request_id]
        self._generation_tokens += len(tokens)
        self._scheduler.finish(finished)
        features = StepFeatures(prefill_tokens, attention_pairs, decode_seqs, kv_tokens_read)
        return features, tokens
