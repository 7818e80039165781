"""SGLang's `cache_aware` router as a model the simulator can run beside kvgate's policies.

The live map runs the real sglang-router; this model, of sglang-router 0.3.2's documented
algorithm and defaults (`launch_router --help`), lets a simulated sweep rank kvgate against it:

- load = the router's own requests in flight on each worker;
- imbalanced when `max_load − min_load > balance_abs_threshold` (64) and `max_load >
  min_load × balance_rel_threshold` (1.5): the least-loaded worker;
- otherwise the longest prefix match over one approximate tree per worker, fed with every
  prompt at routing time, never with answers: match rate = matched ÷ prompt length; above
  `cache_threshold` (0.3) the worker that matched most, else the one with the smallest tree.

Approximations: the tree is kvgate's prefix index, unbounded (SGLang's 64M characters, pruned
every 60 s, never fill in a cell), in hashed blocks; ties go to the first candidate. The scorer
picks by itself (1 for its choice, 0 elsewhere), recording it as it scores (not for dry runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from routing import (
    EndpointSnapshot,
    PluginRegistry,
    RoutingRequest,
    SchedulingContext,
    ScoreColumn,
    endpoint_ids,
)
from routing.config.profiles import PluginSpec, ProfileSpec, RoutingSection
from routing.params import Bounds
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex

PROFILE = "sglang-model"  # the profile the simulator runs for `sglang-router:cache_aware`
SCORER = "sglang-cache-aware-model"
UNBOUNDED_BLOCKS = 1 << 40


@dataclass(frozen=True, slots=True)
class SglangParams:
    cache_threshold: Annotated[float, Bounds(ge=0.0, le=1.0)] = 0.3
    balance_abs_threshold: Annotated[int, Bounds(ge=0)] = 64
    balance_rel_threshold: Annotated[float, Bounds(ge=1.0)] = 1.5


class SglangCacheAwareModel:
    """SGLang's cache_aware choice as a one-hot score (see the module docstring)."""

    Params = SglangParams

    def __init__(self, name: str, tree: PrefixIndex, params: SglangParams) -> None:
        self.name = name
        self._tree = tree
        self._p = params

    def choose(self, request: RoutingRequest, endpoints: Sequence[EndpointSnapshot]) -> int:
        """The index of the endpoint SGLang would pick."""
        loads = [e.in_flight for e in endpoints]
        lo, hi = min(loads), max(loads)
        p = self._p
        if hi - lo > p.balance_abs_threshold and hi > lo * p.balance_rel_threshold:
            return loads.index(lo)
        ids = endpoint_ids(endpoints)
        hashes = request.prefix_hashes
        if hashes:
            depths = self._tree.match_list(hashes, ids)
            best = max(range(len(ids)), key=depths.__getitem__)
            base = request.prefix_block_chars
            rate = covered_chars(depths[best], base) / covered_chars(len(hashes), base)
            if rate > p.cache_threshold:
                return best
        sizes = self._tree.fill_list(ids)  # ∝ blocks recorded, weighted by length
        return sizes.index(min(sizes))

    def score(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointSnapshot],
        ctx: SchedulingContext,
    ) -> Mapping[str, float]:
        ids = endpoint_ids(endpoints)
        chosen = self.choose(request, endpoints)
        if request.prefix_hashes:
            self._tree.record(ids[chosen], request.prefix_hashes)
        return ScoreColumn(ids, [1.0 if i == chosen else 0.0 for i in range(len(ids))], True)


def register(registry: PluginRegistry) -> None:
    """Register the model's scorer with a fresh, unbounded tree (one per replay)."""
    tree = PrefixIndex(default_capacity_blocks=UNBOUNDED_BLOCKS)
    registry.register_scorer(SCORER, SglangCacheAwareModel, deps=(tree,))


def routing_section(base: RoutingSection | None = None) -> RoutingSection:
    """`base` (default: the defaults) with the model's profile added."""
    base = RoutingSection() if base is None else base
    profile = ProfileSpec(
        scorers=[PluginSpec(type=SCORER)], picker=PluginSpec(type="max-score-picker")
    )
    return base.model_copy(update={"profiles": {**base.profiles, PROFILE: profile}})
