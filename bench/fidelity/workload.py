"""The fidelity check's settings and trace.

The trace is seeded open-loop synthetic chats of tenants with long shared system prompts
(`sim.workloads.open_loop_chats`), in blocks of the engine's own KV block size. The live run
sends each request as a streaming `/v1/completions` call whose prompt is token ids
synthesised from the block ids (`sim.workloads.timed_requests`: equal ids, equal tokens), so
the emulated engines see exactly the prefix sharing the simulator replays, with no tokenizer
in between, and the gateway, hashing token ids at 4 bytes a token, sees it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from sim.engine.types import EngineProfile, StepTimeCoefficients
from sim.traces import TraceRequest, time_scaled
from sim.workloads import open_loop_chats

MODEL = "kvgate-fidelity"


@dataclass(frozen=True, slots=True)
class FidelitySettings:
    """Fleet, policies and workload of one fidelity check (defaults: `make fidelity`)."""

    replicas: int = 4
    profile: str = "demo"
    policies: tuple[str, ...] = ("round-robin", "prefix-aware")
    out_dir: Path = Path("out/fidelity")
    seed: int = 1
    sessions: int = 40
    turns: int = 4
    tenants: int = 8
    rate_per_s: float = 1.5  # sessions started per second
    think_s: float = 4.0  # mean gap between a session's turns
    system_tokens: int = 1500
    user_tokens: int = 100
    output_tokens: int = 24
    sim_seed: int = 0  # the simulator's scrape phases and random pickers
    # Engines and arrivals this many times slower on both sides: the same utilisation, with
    # a smaller share of TTFT in HTTP overhead and CPU contention, which are not modelled.
    slowdown: float = 3.0
    gateway_config: dict[str, object] = field(
        default_factory=lambda: {
            # The gateway's defaults, written out so both sides provably read the same values.
            "health": {"scrape_interval_s": 0.05, "metrics_stale_after_s": 0.2},
            # One log line per request costs gateway CPU that the simulator does not model.
            "server": {"access_log": False},
        }
    )


def build_trace(s: FidelitySettings, block_tokens: int) -> list[TraceRequest]:
    trace = open_loop_chats(
        seed=s.seed,
        sessions=s.sessions,
        turns=s.turns,
        tenants=s.tenants,
        rate_per_s=s.rate_per_s,
        think_s=s.think_s,
        system_tokens=s.system_tokens,
        user_tokens=s.user_tokens,
        output_tokens=s.output_tokens,
        block_tokens=block_tokens,
        model=MODEL,
    )
    return trace if s.slowdown == 1 else time_scaled(trace, 1 / s.slowdown)


def slowed(profile: EngineProfile, factor: float) -> EngineProfile:
    """`profile` with every step `factor` times longer: what `kvgate emulate --speedup
    1/factor` serves (step time is linear in its coefficients)."""
    if factor == 1:
        return profile
    t = profile.timing
    timing = StepTimeCoefficients(*(getattr(t, f.name) * factor for f in fields(t)))
    return replace(profile, timing=timing)
