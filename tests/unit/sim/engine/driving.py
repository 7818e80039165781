"""Drive an EngineModel to completion in virtual time and answer questions about the run."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.engine.model import EngineModel
from sim.engine.types import EngineConfig, StepResult, StepTimeCoefficients, TokenEvent

TIMING = StepTimeCoefficients(
    overhead_s=0.01,
    prefill_token_s=1e-4,
    attention_s=1e-8,
    decode_seq_s=1e-4,
    kv_read_token_s=1e-7,
)


def make_model(**config: int | bool) -> EngineModel:
    return EngineModel(EngineConfig(**config), TIMING)  # type: ignore[arg-type]


@dataclass
class Run:
    steps: list[StepResult] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)  # virtual time at the end of each step

    def tokens(self, request_id: str) -> list[TokenEvent]:
        return [t for s in self.steps for t in s.tokens if t.request_id == request_id]

    def ttft(self, request_id: str, start: float = 0.0) -> float:
        for step, end in zip(self.steps, self.ends, strict=True):
            if any(t.request_id == request_id and t.index == 0 for t in step.tokens):
                return end - start
        raise AssertionError(f"{request_id} emitted no first token")

    def cached_tokens(self, request_id: str) -> int:
        return next(
            a.cached_tokens
            for s in self.steps
            for a in s.admitted
            if a.request_id == request_id and not a.resumed
        )


def run(model: EngineModel, max_steps: int = 1_000_000, clock: float = 0.0) -> Run:
    """Step until the model has no work; `clock` is the virtual time at the start."""
    result = Run()
    while model.has_work():
        assert len(result.steps) < max_steps, "model did not finish"
        step = model.step()
        clock += step.duration_s
        result.steps.append(step)
        result.ends.append(clock)
    return result
