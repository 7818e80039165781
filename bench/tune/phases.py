"""The regime-switch workload: phases of the chat family that change cache pressure, tenant
popularity and load, one after another, open loop.

A phase is `seconds` long: chats of its tenants (`pressure` × the fleet's KV tokens over
`prefix_tokens`-token system prompts, picked by `popularity`) start as a Poisson process at
`rps` requests a second over 2–4 turns (`THINK_S` apart on average). `trace` is the whole
run for the simulator (`write_trace`: as a recording), `requests` the same turns as streamed
chat completions for a live fleet; every phase has its own tenants (its own seed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.regime.grid import THINK_S, FleetSpec
from routing.traces import TraceRequest
from routing.traces.recorded import encode_header, encode_request
from sim.workloads import family
from sim.workloads.family import Arrivals, Chat, FamilyCell, tenants_for_pressure
from sim.workloads.open_loop import TimedRequest

MODEL = "kvgate-tune"


@dataclass(frozen=True, slots=True)
class Phase:
    """One regime of the run."""

    name: str
    pressure: float
    popularity: str
    rps: float
    seconds: float
    prefix_tokens: int = 2048


# High reuse at moderate load (the default's ground); long Zipf prompts at twice the KV
# capacity near saturation; a hot tenant among many at high load; high reuse again.
DEFAULT_PHASES = (
    Phase("reuse", 0.25, "uniform", 6.0, 60.0),
    Phase("long", 2.0, "zipf", 11.0, 60.0, prefix_tokens=4096),
    Phase("hot", 1.5, "hot", 14.0, 60.0),
    Phase("reuse-again", 0.25, "uniform", 6.0, 60.0),
)

# The same, with the middle phase under heavy KV pressure (4× the fleet's KV in 4,096-token
# system prompts of Zipf-popular tenants) at a load the fleet still serves: where the
# simulator finds the default ~1.6× slower than its variant with twice the prefix-match
# weight, so that what a tuner wins shows; longer, so that it has time to.
PRESSURE_PHASES = (
    Phase("reuse", 0.25, "uniform", 6.0, 60.0),
    Phase("pressure", 4.0, "zipf", 9.0, 150.0, prefix_tokens=4096),
    Phase("hot", 1.5, "hot", 14.0, 60.0),
    Phase("reuse-again", 0.25, "uniform", 6.0, 60.0),
)

# The pressure phase ten minutes long, between high reuse and high reuse again: a tuner
# needs a window or more to see a regime, so its lag costs a phase (W / P)·(r − 1) of the
# best profile's mean TTFT (docs/self-tuning.md); at P = 600 s a tuner with windows of
# W = 60 s (15-s windows of this phase are too noisy to rank profiles) can come within 5% of
# the phase's best profile where the default is up to 1.5× slower.
LONG_PHASES = (
    Phase("reuse", 0.25, "uniform", 6.0, 60.0),
    Phase("pressure", 4.0, "zipf", 9.0, 600.0, prefix_tokens=4096),
    Phase("reuse-again", 0.25, "uniform", 6.0, 120.0),
)
FAMILIES = {"regimes": DEFAULT_PHASES, "pressure": PRESSURE_PHASES, "long": LONG_PHASES}


def scaled(phases: Sequence[Phase], seconds: float | None, rate: float) -> list[Phase]:
    """The phases with another length (None: their own) and their rates times `rate`."""
    return [
        Phase(p.name, p.pressure, p.popularity, p.rps * rate, seconds or p.seconds, p.prefix_tokens)
        for p in phases
    ]


def phase_chats(
    phases: Sequence[Phase], fleet: FleetSpec, seed: int
) -> tuple[list[Chat], Arrivals, list[tuple[str, float, float]]]:
    """Every phase's chats, their arrivals on the run's clock, and each phase's span."""
    chats: list[Chat] = []
    arrivals: list[tuple[float, ...]] = []
    spans = []
    start = 0.0
    for k, p in enumerate(phases):
        tenants = tenants_for_pressure(p.pressure, p.prefix_tokens, fleet.kv_tokens)
        starts = math.ceil(p.seconds * p.rps / 3.0)  # 2-4 turns: 3 on average
        cell = FamilyCell(tenants, p.prefix_tokens, p.popularity, starts, seed=seed * 100 + k)
        mine = family.chats(cell)
        times = family.open_arrivals(mine, p.rps, THINK_S, seed * 100 + k + 1)
        for chat, t in zip(mine, times, strict=True):
            if t[0] < p.seconds:
                chats.append(chat)
                arrivals.append(tuple(start + x for x in t))
        spans.append((p.name, start, start + p.seconds))
        start += p.seconds
    return chats, tuple(arrivals), spans


def trace(phases: Sequence[Phase], fleet: FleetSpec, seed: int) -> list[TraceRequest]:
    chats, arrivals, _ = phase_chats(phases, fleet, seed)
    return family.chat_trace(chats, arrivals, fleet.block_tokens)


def write_trace(path: Path, phases: Sequence[Phase], fleet: FleetSpec, seed: int) -> Path:
    """The run as a kvgate recording (for `kvgate sim tune --trace PATH`)."""
    lines = [encode_header(datetime.now(UTC), fleet.block_tokens, 4.0)]
    lines += [encode_request(r) for r in trace(phases, fleet, seed)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    return path


def requests(phases: Sequence[Phase], fleet: FleetSpec, seed: int) -> list[TimedRequest]:
    chats, arrivals, _ = phase_chats(phases, fleet, seed)
    return family.chat_requests(chats, arrivals, MODEL)
