"""One window of recorded traffic replayed under each candidate profile and seed.

The fleet's shape (`FleetShape`): replica count, and a named engine profile's timing with the
KV capacity and block size the live engines report. Seed 0 replays the window as recorded;
seed k > 0 shifts each arrival by up to ± one mean gap (uniform, seeded) and starts the
scrapes at another phase: the spread of a candidate's gain over seeds is the proposal's
uncertainty. A window is replayed after its lead-in (`Span`: the traffic of the seconds before
it, routed by the profile that ran through most of it (`ran_most`), for every candidate
alike), so it starts on the queues and caches it inherited; only the window's requests are
measured (without a lead-in, it starts cold). The replays run through the sweep's runners
(this process, or a Ray cluster). `fidelity` compares the live profile's replayed mean TTFT
with the mean the gateway observed for the same requests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from routing.traces import TraceRequest
from sim.engine.profiles import get_profile
from sim.engine.types import EngineProfile
from sim.replay.cli import fit_profile
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import RunSpec, SweepRunner
from sim.tune.candidates import Candidate


@dataclass(frozen=True, slots=True)
class FleetShape:
    """What the replays run on: `replicas` engines of `engine` (timing and KV cache)."""

    replicas: int
    engine: EngineProfile

    @classmethod
    def of(
        cls,
        replicas: int,
        profile: str,
        block_size: int | None = None,
        num_blocks: int | None = None,
    ) -> FleetShape:
        """A named engine profile with the scraped KV block size and count (when known)."""
        engine = get_profile(profile)
        config = engine.config
        if block_size:
            config = replace(config, block_size=block_size)
        if num_blocks:
            config = replace(config, num_blocks=num_blocks)
        return cls(replicas, replace(engine, config=config))

    def describe(self) -> str:
        c = self.engine.config
        return (
            f"{self.replicas} replicas of {self.engine.name} "
            f"({c.num_blocks:,} blocks of {c.block_size} tokens)"
        )


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Each candidate's replayed mean TTFT (seconds) per seed, in candidate order."""

    candidates: tuple[Candidate, ...]
    ttft_mean_s: tuple[tuple[float, ...], ...]  # [candidate][seed]
    requests: int  # measured (the window's)
    observed_ttft_mean_s: float | None  # what the gateway saw (recordings with ttft_s)
    cpu_s: float  # the replays' CPU seconds
    lead_in_requests: int = 0  # replayed before the window, not measured

    def of(self, name: str) -> tuple[float, ...] | None:
        for c, means in zip(self.candidates, self.ttft_mean_s, strict=True):
            if c.name == name:
                return means
        return None

    def of_candidate(self, candidate: Candidate) -> tuple[float, ...] | None:
        """The means of `candidate`, by name or else by profile (a duplicate profile is
        evaluated once, under its first name)."""
        found = self.of(candidate.name)
        if found is not None:
            return found
        for c, means in zip(self.candidates, self.ttft_mean_s, strict=True):
            if c.profile == candidate.profile:
                return means
        return None

    @property
    def fidelity(self) -> float | None:
        """Replayed / observed mean TTFT of the live profile (the first candidate), first
        seed (0: the window as recorded); 1.0 is a perfect replay, None without observed
        TTFTs."""
        observed = self.observed_ttft_mean_s
        if not observed or not self.ttft_mean_s:
            return None
        return self.ttft_mean_s[0][0] / observed


def window(trace: Sequence[TraceRequest], end_s: float, length_s: float) -> list[TraceRequest]:
    """The requests arriving in (end_s - length_s, end_s], their arrivals from the first."""
    start = end_s - length_s
    picked = [r for r in trace if start < r.arrival_s <= end_s]
    if not picked:
        return []
    t0 = picked[0].arrival_s
    return [replace(r, arrival_s=r.arrival_s - t0) for r in picked]


@dataclass(frozen=True, slots=True)
class Span:
    """A window and its lead-in: `requests`, arrivals from the first, of which the first
    `lead` are the lead-in's; `lead_in` routes those (None: each candidate itself)."""

    requests: list[TraceRequest]
    lead: int = 0
    lead_in: Candidate | None = None

    @property
    def measured(self) -> list[TraceRequest]:
        """The window's requests (as replayed: arrivals from the lead-in's first)."""
        return self.requests[self.lead :]

    @property
    def measure_from_s(self) -> float:
        """The first measured arrival (0.0 without a lead-in)."""
        if not self.lead or self.lead >= len(self.requests):
            return 0.0
        return self.requests[self.lead].arrival_s


def span(
    trace: Sequence[TraceRequest],
    end_s: float,
    length_s: float,
    lead_in_s: float,
    lead_in: Candidate | None = None,
) -> Span:
    """The window (end_s - length_s, end_s] after the lead-in's (end_s - length_s - lead_in_s,
    end_s - length_s], arrivals from the first; no requests without one in the window."""
    if lead_in_s < 0:
        raise ValueError(f"lead_in_s must be >= 0, not {lead_in_s}")
    start = end_s - length_s
    picked = [r for r in trace if start - lead_in_s < r.arrival_s <= end_s]
    lead = sum(r.arrival_s <= start for r in picked)
    if lead == len(picked):
        return Span([])
    t0 = picked[0].arrival_s
    return Span([replace(r, arrival_s=r.arrival_s - t0) for r in picked], lead, lead_in)


def ran_most(
    history: Sequence[tuple[float, Candidate]], start_s: float, lead_in_s: float
) -> Candidate:
    """The profile that ran longest in the lead-in (start_s - lead_in_s, start_s]; `history`:
    (since, profile) in order of time, the first since -inf."""
    lo = start_s - lead_in_s
    untils = [since for since, _ in history[1:]] + [math.inf]
    spans = [
        (min(u, start_s) - max(since, lo), c) for (since, c), u in zip(history, untils, strict=True)
    ]
    return max(spans, key=lambda t: t[0])[1]


def perturbed(trace: Sequence[TraceRequest], seed: int) -> list[TraceRequest]:
    """Seed 0: the trace; else every arrival moved by up to ± the mean gap, re-sorted."""
    if seed == 0 or len(trace) < 2:
        return list(trace)
    rng = random.Random(seed)
    gap = (trace[-1].arrival_s - trace[0].arrival_s) / (len(trace) - 1)
    moved = [replace(r, arrival_s=max(0.0, r.arrival_s + rng.uniform(-gap, gap))) for r in trace]
    return sorted(moved, key=lambda r: r.arrival_s)


def evaluate(
    trace: Sequence[TraceRequest] | Span,
    candidates: Sequence[Candidate],
    shape: FleetShape,
    base: SimSettings,
    *,
    seeds: int,
    runner: SweepRunner,
    first_seed: int = 0,
) -> Evaluation:
    """Replay `trace` (a window, or a `Span`: a window after its lead-in) under every
    candidate for seeds `first_seed`.. (`seeds` of them; `base`: the scrape cadence and SLO;
    replicas, routing and the lead-in are set here)."""
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError("candidate names must be distinct")
    part = trace if isinstance(trace, Span) else Span(list(trace))
    trace, start, lead_in = part.requests, part.measure_from_s, part.lead_in
    profiles = {**base.routing.profiles}
    if lead_in is not None:
        profiles[lead_in.name] = lead_in.profile
    profiles.update({c.name: c.profile for c in candidates})
    means = [[0.0] * seeds for _ in candidates]
    cpu = 0.0
    engine = fit_profile(shape.engine, trace)[0] if trace else shape.engine
    for column, seed in enumerate(range(first_seed, first_seed + seeds)):
        specs = []
        for i, c in enumerate(candidates):
            routing = base.routing.model_copy(update={"policy": c.name, "profiles": profiles})
            settings = replace(base, replicas=shape.replicas, routing=routing, seed=seed)
            if start > 0:
                lead = lead_in.name if lead_in is not None else None
                settings = replace(settings, measure_from_s=start, lead_in_policy=lead)
            specs.append(RunSpec(i, c.name, c.name, 1.0, settings))
        traces = {1.0: perturbed(trace, seed)}
        for index, summary in runner.run(specs, traces, engine):
            means[index][column] = summary.ttft_mean_s
            cpu += summary.sim_cpu_seconds
    measured = part.measured
    observed = [r.ttft_s for r in measured if r.ttft_s is not None]
    return Evaluation(
        tuple(candidates),
        tuple(tuple(m) for m in means),
        len(measured),
        sum(observed) / len(observed) if observed else None,
        cpu,
        part.lead,
    )
