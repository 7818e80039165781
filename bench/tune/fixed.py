"""The best fixed profile of each phase, found offline: every phase's trace replayed alone
under the named built-in profiles and every one-knob variant of the default (`sim.tune`),
over a few seeds; the lowest mean TTFT wins."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.regime.grid import FleetSpec
from bench.tune.phases import Phase, trace
from routing.config.profiles import BUILTIN_PROFILES, RoutingSection
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import LocalRunner
from sim.tune.candidates import Candidate, named, variants
from sim.tune.evaluate import FleetShape, evaluate

NAMED = ("prefix-aware", "least-load", "estimated-ttft", "session", "precise-prefix")


@dataclass(frozen=True, slots=True)
class PhaseSweep:
    """One phase's candidates, best first, by mean TTFT over seeds (simulated)."""

    phase: str
    ranked: tuple[tuple[Candidate, float], ...]

    @property
    def best(self) -> Candidate:
        return self.ranked[0][0]


def candidates() -> list[Candidate]:
    default = Candidate("prefix-aware", BUILTIN_PROFILES["prefix-aware"])
    return [*named(RoutingSection(), NAMED), *variants(default)]


def sweep_phases(
    phases: Sequence[Phase], fleet: FleetSpec, seed: int, seeds: int = 2
) -> list[PhaseSweep]:
    shape = FleetShape.of(fleet.replicas, fleet.profile)
    found = []
    pool = candidates()
    for phase in phases:
        requests = trace([phase], fleet, seed)
        ev = evaluate(requests, pool, shape, SimSettings(), seeds=seeds, runner=LocalRunner(1))
        means = [statistics.fmean(m) for m in ev.ttft_mean_s]
        ranked = sorted(zip(pool, means, strict=True), key=lambda cm: cm[1])
        found.append(PhaseSweep(phase.name, tuple(ranked)))
    return found
