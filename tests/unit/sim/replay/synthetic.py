"""Small seeded traces and an engine profile small enough to queue, evict and preempt."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from routing import PluginRegistry, SchedulingContext
from routing.config.profiles import RoutingSection
from routing.traces import TraceRequest
from routing.types import EndpointSnapshot, RoutingRequest
from sim.engine.types import EngineConfig, EngineProfile, StepTimeCoefficients

BLOCK_TOKENS = 64  # trace blocks of 4 engine blocks
Register = Callable[[PluginRegistry], None]

SMALL = EngineProfile(
    name="test-small",
    description="a small engine for tests",
    source="chosen by hand",
    config=EngineConfig(
        block_size=16,
        num_blocks=640,
        max_num_seqs=16,
        max_num_batched_tokens=1024,
        max_model_len=4096,
    ),
    timing=StepTimeCoefficients(
        overhead_s=5e-3,
        prefill_token_s=1e-4,
        attention_s=1e-8,
        decode_seq_s=1e-4,
        kv_read_token_s=1e-7,
    ),
)


def tenant_trace(
    n: int,
    seed: int = 0,
    tenants: int = 6,
    rate: float = 12.0,
    prefix_blocks: int = 8,
    outputs: tuple[int, int] = (1, 80),
) -> list[TraceRequest]:
    """Requests of a few tenants, each with a shared system prompt of `prefix_blocks` trace
    blocks and a suffix of its own; Poisson arrivals."""
    rng = random.Random(seed)
    next_id = tenants * prefix_blocks
    t = 0.0
    out = []
    for _ in range(n):
        t += rng.expovariate(rate)
        tenant = rng.randrange(tenants)
        ids = list(range(tenant * prefix_blocks, (tenant + 1) * prefix_blocks))
        own = rng.randint(1, 6)
        ids += range(next_id, next_id + own)
        next_id += own
        input_tokens = (len(ids) - 1) * BLOCK_TOKENS + rng.randint(1, BLOCK_TOKENS)
        out.append(
            TraceRequest(
                arrival_s=t,
                input_tokens=input_tokens,
                output_tokens=rng.randint(*outputs),
                hash_ids=tuple(ids),
                block_tokens=BLOCK_TOKENS,
            )
        )
    return out


class RecordingScorer:
    """A scorer that scores nothing and remembers what each decision saw."""

    type_name = "recording-scorer"

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[tuple[float, tuple[EndpointSnapshot, ...]]] = []

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        self.seen.append((ctx.clock(), tuple(endpoints)))
        return {e.id: 0.0 for e in endpoints}


def recording(
    profile: str = "round-robin-picker",
) -> tuple[RoutingSection, RecordingScorer, Register]:
    """A routing section whose `recorded` profile runs the recorder (weight 0) before a picker,
    and the registration that provides the recorder."""
    recorder = RecordingScorer("recording-scorer")
    section = RoutingSection.model_validate(
        {
            "profiles": {
                "recorded": {
                    "scorers": [{"type": "recording-scorer", "weight": 0}],
                    "picker": {"type": profile},
                }
            }
        }
    )

    def register(registry: PluginRegistry) -> None:
        registry.register_scorer("recording-scorer", lambda name: recorder)

    return section, recorder, register
