"""The scheduler runner: filters → weighted scorers → picker, per named profile.

A `Profile` is one wiring of plugins. The `Scheduler` holds the named profiles, the injected
clock and RNG, and runs one cycle per request. It never mutates the snapshots it is given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from routing.protocols import Filter, Picker, SchedulingContext, Scorer
from routing.types import Decision, EndpointScores, EndpointSnapshot, RoutingRequest


class UnknownProfileError(KeyError):
    """Raised when a request names a profile the scheduler does not have."""


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    """A scorer and its weight in the profile's weighted sum."""

    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class Profile:
    """One scheduling pipeline."""

    name: str
    picker: Picker
    filters: tuple[Filter, ...] = ()
    scorers: tuple[WeightedScorer, ...] = field(default=())

    def run(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Decision:
        candidates = list(endpoints)
        filtered_out: dict[str, str] = {}
        for flt in self.filters:
            kept = list(flt.filter(request, candidates, ctx))
            kept_ids = {e.id for e in kept}
            for e in candidates:
                if e.id not in kept_ids:
                    filtered_out[e.id] = flt.name
            candidates = kept
            if not candidates:
                break
        scored = self._score(request, candidates, ctx)
        ranked = tuple(self.picker.pick(request, scored, ctx)) if scored else ()
        return Decision(
            profile=self.name,
            ranked=ranked,
            scores=scored,
            filtered_out=MappingProxyType(filtered_out),
        )

    def _score(
        self,
        request: RoutingRequest,
        candidates: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> tuple[EndpointScores, ...]:
        if not candidates:
            return ()
        per_scorer: list[tuple[str, float, Mapping[str, float]]] = [
            (ws.scorer.name, ws.weight, ws.scorer.score(request, candidates, ctx))
            for ws in self.scorers
        ]
        out = []
        for e in candidates:
            scores: dict[str, float] = {}
            total = 0.0
            for name, weight, result in per_scorer:
                s = _clamp(result.get(e.id, 0.0))
                scores[name] = s
                total += weight * s
            out.append(EndpointScores(e.id, MappingProxyType(scores), total))
        return tuple(out)


def _clamp(x: float) -> float:
    if math.isnan(x):  # NaN scores count as the worst
        return 0.0
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


class Scheduler:
    """Runs a named profile for each request, with the injected clock and RNG."""

    def __init__(
        self,
        profiles: Mapping[str, Profile],
        default_profile: str,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        if default_profile not in profiles:
            raise UnknownProfileError(default_profile)
        self._profiles = dict(profiles)
        self.default_profile = default_profile
        self._ctx = SchedulingContext(clock=clock, rng=rng)

    @property
    def profiles(self) -> Mapping[str, Profile]:
        return MappingProxyType(self._profiles)

    def schedule(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        profile: str | None = None,
    ) -> Decision:
        name = profile or self.default_profile
        try:
            chosen = self._profiles[name]
        except KeyError:
            raise UnknownProfileError(name) from None
        return chosen.run(request, endpoints, self._ctx)
