"""The scheduler runner: filters → weighted scorers → picker, per named profile.

A `Profile` is one wiring of plugins. The `Scheduler` holds the named profiles, the injected
clock and RNG, and runs one cycle per request. It never mutates the snapshots it is given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, mul
from types import MappingProxyType

from routing.protocols import Filter, Picker, SchedulingContext, Scorer
from routing.types import Decision, EndpointScores, EndpointSnapshot, RoutingRequest, ScoreTable


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
            if kept != candidates:  # equal (element by element, by identity first): none gone
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
    ) -> Sequence[EndpointScores]:
        if not candidates:
            return ()
        ids = [e.id for e in candidates]
        totals = [0.0] * len(ids)
        columns = []
        # Column by column, each pass a map over a list: per endpoint this is the weighted
        # sum `total += weight × clamp(score)` in scorer order, with the same float results.
        for ws in self.scorers:
            result = ws.scorer.score(request, candidates, ctx)
            column = list(map(result.get, ids, repeat(0.0)))
            if not _in_unit_interval(column):
                column = [_clamp(x) for x in column]
            columns.append(column)
            totals = list(map(add, totals, map(mul, repeat(ws.weight), column)))
        names = [ws.scorer.name for ws in self.scorers]
        return ScoreTable(ids, names, columns, totals)


def _in_unit_interval(column: list[float]) -> bool:
    # A NaN anywhere makes the sum NaN (min and max may step over it).
    return min(column) >= 0.0 and max(column) <= 1.0 and not math.isnan(sum(column))


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
