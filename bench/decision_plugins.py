"""Per-plugin split of one routing decision, for `python -m bench decision`.

The default profile's filters, scorers and picker run behind a `Timed` wrapper that takes
`perf_counter_ns` around each call; `scheduler` is the schedule stage less the plugins (the
runner's weighted sum, the candidates' ids, the wrappers' own calls). `python -m bench
decision` runs every other decision on such a copy of the scheduler, so that the stage
timings (the other decisions) carry no wrapper. The copy has no compiled pass
(`scoring.fused`): these are the plugins' own times, the pass's reference. The first scorer
to look the prompt up in the prefix index pays for the lookup (`estimated-ttft-scorer` in
the default profile; the others reuse it), so the stage table's `match` column is part of
that scorer's time.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from routing import EndpointSnapshot, Profile, RoutingRequest, Scheduler, WeightedScorer
from routing.percentile import percentile
from routing.protocols import SchedulingContext


class Timed:
    """A filter, scorer or picker that records how long each call took (ns) in `times`."""

    def __init__(self, plugin: Any, times: dict[str, list[int]]) -> None:
        self.name = plugin.name
        self._plugin = plugin
        self._times = times[plugin.name]

    def filter(
        self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot], ctx: SchedulingContext
    ) -> Sequence[EndpointSnapshot]:
        t0 = time.perf_counter_ns()
        out: Sequence[EndpointSnapshot] = self._plugin.filter(request, endpoints, ctx)
        self._times.append(time.perf_counter_ns() - t0)
        return out

    def score(
        self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot], ctx: SchedulingContext
    ) -> Any:
        t0 = time.perf_counter_ns()
        out = self._plugin.score(request, endpoints, ctx)
        self._times.append(time.perf_counter_ns() - t0)
        return out

    def pick(self, request: RoutingRequest, scored: Any, ctx: SchedulingContext) -> Sequence[str]:
        t0 = time.perf_counter_ns()
        out: Sequence[str] = self._plugin.pick(request, scored, ctx)
        self._times.append(time.perf_counter_ns() - t0)
        return out


def timed_scheduler(scheduler: Scheduler, seed: int = 7) -> tuple[Scheduler, dict[str, list[int]]]:
    """A copy of `scheduler` whose default profile's plugins are `Timed`, and their times."""
    times: dict[str, list[int]] = defaultdict(list)
    p = scheduler.profiles[scheduler.default_profile]
    filters = tuple(Timed(f, times) for f in p.filters)  # in pipeline order: the table's
    scorers = tuple(WeightedScorer(Timed(s.scorer, times), s.weight) for s in p.scorers)
    profile = Profile(name=p.name, picker=Timed(p.picker, times), filters=filters, scorers=scorers)
    copy = Scheduler({p.name: profile}, p.name, time.monotonic, random.Random(seed))
    return copy, times


def plugin_medians(
    times: dict[str, list[int]], schedule_ns: Sequence[int], skip: int
) -> dict[str, float]:
    """Median µs per plugin (its first `skip` calls left out, as the warm-up), and
    `scheduler`: the median schedule stage less the plugins' medians."""
    out = {name: percentile(ns[skip:], 50) / 1000 for name, ns in times.items() if ns[skip:]}
    out["scheduler"] = percentile(schedule_ns, 50) / 1000 - sum(out.values())
    return out
