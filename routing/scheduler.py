"""The scheduler runner: filters → weighted scorers → picker, per named profile.

A `Profile` is one wiring of plugins. The `Scheduler` holds the named profiles, the injected
clock and RNG, and runs one cycle per request. It never mutates the snapshots it is given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, mul
from types import MappingProxyType
from typing import cast

from routing.protocols import Filter, Picker, SchedulingContext, Scorer
from routing.types import (
    Candidates,
    Decision,
    EndpointScores,
    EndpointSnapshot,
    LazyMapping,
    RoutingRequest,
    ScoreColumn,
    ScoreTable,
)

_compiled_totals: Callable[[list[list[float]], list[float], int], list[float]] | None
_compiled_unit: Callable[[list[float]], bool] | None
try:
    from routing.columns_native import in_unit_interval as _compiled_unit
    from routing.columns_native import weighted_totals as _compiled_totals
except ImportError:  # not built (no C compiler): the reference runs
    _compiled_totals = _compiled_unit = None


class UnknownProfileError(KeyError):
    """Raised when a request names a profile the scheduler does not have."""


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    """A scorer and its weight in the profile's weighted sum."""

    scorer: Scorer
    weight: float


FastPath = Callable[
    [RoutingRequest, Sequence[EndpointSnapshot], SchedulingContext], Decision | None
]
"""A profile's plugins computed at once (`scoring.fused`): the same decision as theirs, or None
where it does not apply (the plugins then run)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One scheduling pipeline. `fast`, when set, makes the same decision as the plugins in
    fewer steps; the plugins are its reference and run wherever it answers None."""

    name: str
    picker: Picker
    filters: tuple[Filter, ...] = ()
    scorers: tuple[WeightedScorer, ...] = field(default=())
    fast: FastPath | None = field(default=None, compare=False, repr=False)

    def run(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Decision:
        fast = self.fast
        if fast is not None:
            decision = fast(request, endpoints, ctx)
            if decision is not None:
                return decision
        candidates = list(endpoints)
        steps: list[_Step] = []
        for flt in self.filters:
            kept = flt.filter(request, candidates, ctx)
            if kept is not candidates:  # a filter that removes nobody may return its input
                kept = list(kept)
                if kept != candidates:  # equal (element by element, by identity first)
                    steps.append((candidates, kept, flt.name))
                candidates = kept
            if not candidates:
                break
        scored = self._score(request, candidates, ctx)
        ranked = tuple(self.picker.pick(request, scored, ctx)) if scored else ()
        return Decision(self.name, ranked, scored, filtered_out(steps))  # by position

    def _score(
        self,
        request: RoutingRequest,
        candidates: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Sequence[EndpointScores]:
        if not candidates:
            return ()
        candidates = Candidates(candidates)
        ids = candidates.ids
        columns: list[Sequence[float]] = []
        weights: list[float] = []
        names: list[str] = []
        for ws in self.scorers:  # weights and names gathered here, not by two comprehensions
            weights.append(ws.weight)
            names.append(ws.scorer.name)
            result = ws.scorer.score(request, candidates, ctx)
            column: Sequence[float]
            if type(result) is ScoreColumn and result.ids is ids:
                column = result.column
                if not (result.unit or _in_unit_interval(column)):
                    column = [_clamp(x) for x in column]
            else:
                column = list(map(result.get, ids, repeat(0.0)))
                if not _in_unit_interval(column):
                    column = [_clamp(x) for x in column]
            columns.append(column)
        totals = _totals(columns, weights, len(ids))
        return ScoreTable(ids, names, columns, totals)


_Step = tuple[list[EndpointSnapshot], list[EndpointSnapshot], str]  # before, after, filter
_NONE_FILTERED: Mapping[str, str] = MappingProxyType({})


def filtered_out(steps: list[_Step]) -> Mapping[str, str]:
    """Endpoint id → the filter that removed it, from each filter step that removed some:
    (its input, its output, its name)."""
    return _FilteredOut(steps) if steps else _NONE_FILTERED


class _FilteredOut(LazyMapping[str]):
    """Endpoint id → the filter that removed it, worked out on first read from the filters'
    inputs and outputs (immutable snapshots): the gateway reads it only when no endpoint
    passed, so most decisions never pay for it."""

    __slots__ = ("_steps",)

    def __init__(self, steps: list[_Step]) -> None:
        super().__init__()
        self._steps = steps

    def _build(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for before, after, name in self._steps:
            kept_ids = {e.id for e in after}
            for e in before:
                if e.id not in kept_ids:
                    out[e.id] = name
        self._steps = []
        return out


def weighted_totals(
    columns: Sequence[Sequence[float]], weights: Sequence[float], n: int
) -> list[float]:
    """Per endpoint, `total += weight × score` in scorer order from 0.0 (a weight of 1
    multiplies nothing: 1.0 × x is x). The reference for `routing.columns_native`."""
    # Column by column, maps chained and run once at the end: the same float results as
    # the loop per endpoint, without a Python step per endpoint.
    totals: Iterable[float] = [0.0] * n
    for weight, column in zip(weights, columns, strict=True):
        weighted = column if weight == 1.0 else map(mul, repeat(weight), column)
        totals = map(add, totals, weighted)
    return list(totals)


def _totals(columns: list[Sequence[float]], weights: list[float], n: int) -> list[float]:
    if _compiled_totals is not None:
        for c in columns:  # a loop, not all() over a generator: no function object per call
            if type(c) is not list:
                break
        else:
            return _compiled_totals(cast("list[list[float]]", columns), weights, n)  # no alias
    return weighted_totals(columns, weights, n)


def _in_unit_interval(column: Sequence[float]) -> bool:
    if _compiled_unit is not None and type(column) is list:
        return _compiled_unit(column)
    return in_unit_interval(column)


def in_unit_interval(column: Sequence[float]) -> bool:
    """Whether every score of a (non-empty) column is in [0, 1], none NaN. The reference for
    `routing.columns_native.in_unit_interval`."""
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
