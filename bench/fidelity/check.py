"""One policy's fidelity check: the live run, the simulation of the trace, and the simulation
of what the gateway recorded during the live run.

- **sim: trace** replays the very trace the load generator sent, at its scheduled times:
  the simulator's prediction before anything ran.
- **sim: recording** replays the file `kvgate serve --record` wrote during the live run: the
  arrivals as the gateway saw them, token counts and block hashes as recorded, never the
  prompt. This is the record → simulate round trip an operator would use.

A case with repetitions (`PolicySeries`) has one such check per repetition, and is judged
on the means over them (`compare.averaged`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench.fidelity.compare import (
    ArrivalJitter,
    Errors,
    RunMetrics,
    arrival_jitter,
    averaged,
    compare,
    relative_error,
)
from bench.fidelity.live import LiveRun
from routing.traces import TraceRequest, load_trace
from sim.engine.types import EngineProfile
from sim.replay import Replay, SimSettings


@dataclass(frozen=True, slots=True)
class SimRun:
    """One simulated replay, reduced to what the check compares."""

    ttfts_s: tuple[float, ...]
    metrics: RunMetrics
    requests_per_replica: tuple[int, ...]
    rejected: int
    itl_mean_s: float  # pooled over every gap between tokens, as the engines' histogram


def simulate(
    trace: Sequence[TraceRequest], policy: str, profile: EngineProfile, settings: SimSettings
) -> SimRun:
    result = Replay(trace, policy, profile, settings).run()
    ttfts = tuple(sorted(result.log.ttft_s))
    return SimRun(
        ttfts_s=ttfts,
        metrics=RunMetrics.of(ttfts, result.prefix_hits, result.prefix_queries),
        requests_per_replica=result.dispatched,
        rejected=result.rejected,
        itl_mean_s=result.itl.total_s / result.itl.count if result.itl.count else math.nan,
    )


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """Live against both simulations, for one policy."""

    policy: str
    live: LiveRun
    live_metrics: RunMetrics
    sim: SimRun  # the trace as scheduled
    recorded: SimRun  # the gateway's recording of the live run
    recorded_requests: int
    recorded_tokens_match: bool  # (input, output) token counts equal the trace's
    jitter: ArrivalJitter  # of the recorded arrivals around the schedule (NaN: counts differ)
    case: str = "chats"  # the workload (`bench.fidelity.workload`)
    modelled_outside_s: float = 0.0  # what the simulation adds to a TTFT outside the engines
    repetition: int = 0  # of the case's repetitions (`Case.repetition`)
    prefill: int = 0  # a P/D pool's prefill replicas, the first ones

    def split_shares(self) -> tuple[float, float, float] | None:
        """A P/D case's share of requests split (live, sim: trace, sim: recording): the
        requests its prefill replicas served over all requests; None for other cases."""
        if not self.prefill:
            return None
        p = self.prefill

        def share(per_replica: Sequence[int], requests: int) -> float:
            return sum(per_replica[:p]) / requests if requests else math.nan

        return (
            share(self.live.requests_per_replica, self.live_metrics.requests),
            share(self.sim.requests_per_replica, self.sim.metrics.requests),
            share(self.recorded.requests_per_replica, self.recorded.metrics.requests),
        )

    @property
    def sim_errors(self) -> Errors:
        return compare(self.live_metrics, self.sim.metrics)

    @property
    def recorded_errors(self) -> Errors:
        return compare(self.live_metrics, self.recorded.metrics)

    @property
    def client_overhead_s(self) -> float:
        """Mean client TTFT minus the engines' own mean TTFT: what HTTP, the gateway and the
        client add (the simulator models it with the probe's terms, `bench.fidelity.probe`)."""
        return self.live_metrics.ttft_mean_s - self.live.engine_ttft_mean_s

    @property
    def step_stretch(self) -> float:
        """The engines' mean ITL over the simulated one: how much longer the emulator's steps
        took in real time than modelled (late wake-ups of a busy process)."""
        modelled = self.sim.itl_mean_s
        return self.live.engine_itl_mean_s / modelled if modelled > 0 else math.nan

    @property
    def engine_ttft_error(self) -> float:
        """Relative error of the simulated engines' mean TTFT (without the time modelled
        outside them) against the engines' own mean."""
        engines = self.sim.metrics.ttft_mean_s - self.modelled_outside_s
        return relative_error(engines, self.live.engine_ttft_mean_s)


@dataclass(frozen=True, slots=True)
class PolicySeries:
    """One policy's checks on one case, one per repetition, and the figures it is judged on:
    each side's mean over the repetitions of each run's figures."""

    checks: tuple[PolicyCheck, ...]

    @property
    def case(self) -> str:
        return self.checks[0].case

    @property
    def policy(self) -> str:
        return self.checks[0].policy

    @property
    def live_metrics(self) -> RunMetrics:
        return averaged([c.live_metrics for c in self.checks])

    @property
    def sim_metrics(self) -> RunMetrics:
        return averaged([c.sim.metrics for c in self.checks])

    @property
    def recorded_metrics(self) -> RunMetrics:
        return averaged([c.recorded.metrics for c in self.checks])

    @property
    def sim_errors(self) -> Errors:
        return compare(self.live_metrics, self.sim_metrics)

    @property
    def recorded_errors(self) -> Errors:
        return compare(self.live_metrics, self.recorded_metrics)


def series(checks: Sequence[PolicyCheck]) -> list[PolicySeries]:
    """`checks` grouped by (case, policy), in order of first appearance."""
    groups: dict[tuple[str, str], list[PolicyCheck]] = {}
    for c in checks:
        groups.setdefault((c.case, c.policy), []).append(c)
    return [PolicySeries(tuple(g)) for g in groups.values()]


def check_policy(
    live: LiveRun,
    trace: Sequence[TraceRequest],
    profile: EngineProfile,
    settings: SimSettings,
    case: str = "chats",
    *,
    repetition: int = 0,
    prefill: int = 0,
) -> PolicyCheck:
    """Simulate `trace` and the live run's recording with the live run's policy."""
    recording = load_trace(live.record_path)
    c = live.counters
    return PolicyCheck(
        policy=live.policy,
        live=live,
        live_metrics=RunMetrics.of(live.ttfts_s, c.prefix_hits, c.prefix_queries),
        sim=simulate(trace, live.policy, profile, settings),
        recorded=simulate(recording, live.policy, profile, settings),
        recorded_requests=len(recording),
        recorded_tokens_match=_token_counts(recording) == _token_counts(trace),
        jitter=_jitter(trace, recording),
        case=case,
        modelled_outside_s=_outside_mean_s(trace, profile, settings),
        repetition=repetition,
        prefill=prefill,
    )


def _outside_mean_s(
    trace: Sequence[TraceRequest], profile: EngineProfile, settings: SimSettings
) -> float:
    """The mean time a simulation adds to a TTFT outside the engines (`sim.replay`)."""
    tokens = sum(r.input_tokens for r in trace) / len(trace) if trace else 0.0
    fixed = profile.frontend.request_overhead_s + settings.gateway_overhead_s
    return fixed + settings.gateway_overhead_token_s * tokens


def _jitter(trace: Sequence[TraceRequest], recording: Sequence[TraceRequest]) -> ArrivalJitter:
    if len(trace) != len(recording):  # failed requests are not recorded: no pairing
        return ArrivalJitter(math.nan, math.nan, math.nan)
    return arrival_jitter([r.arrival_s for r in trace], [r.arrival_s for r in recording])


def _token_counts(trace: Sequence[TraceRequest]) -> Counter[tuple[int, int]]:
    return Counter((r.input_tokens, r.output_tokens) for r in trace)
