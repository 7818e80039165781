"""Plugin protocols: Filter, Scorer, Picker, and the context they run in.

A scheduling cycle runs filters (each narrows the candidate list), then every weighted scorer
(each returns a score in [0, 1] per endpoint; the scheduler clamps), then one picker that ranks
the survivors by their weighted totals. Plugins must not mutate their inputs, must not do I/O,
and must take time and randomness only from the `SchedulingContext`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from routing.types import EndpointScores, EndpointSnapshot, RoutingRequest


@dataclass(frozen=True, slots=True)
class SchedulingContext:
    """Injected clock (seconds, monotonic) and RNG for one scheduling cycle."""

    clock: Callable[[], float]
    rng: random.Random


class Filter(Protocol):
    """Removes endpoints that must not serve the request."""

    name: str

    def filter(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Sequence[EndpointSnapshot]: ...


class Scorer(Protocol):
    """Scores each endpoint in [0, 1]; higher is better. Keys are endpoint ids."""

    name: str

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]: ...


class Picker(Protocol):
    """Ranks scored endpoints, best first. The first is the target, the rest are fallbacks."""

    name: str

    def pick(
        self,
        request: RoutingRequest,
        scored: Sequence[EndpointScores],
        ctx: SchedulingContext,
    ) -> Sequence[str]: ...
