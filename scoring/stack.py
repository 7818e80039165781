"""The routing stack, assembled once for the gateway and the simulator alike.

registry → built-in plugins → TTFT model → stateful plugins (over the prefix index and the
TTFT model) → caller's extra plugins → scheduler with every effective profile → prefix feed.
The composition root passes its clock and RNG (wall clock in the gateway, virtual time in
the simulator) and may pass its own index (the simulator's oracle reads the engines' caches).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from routing import PluginRegistry, Profile, Scheduler, WeightedScorer
from routing.config.profiles import ProfileSpec, RoutingSection, effective_profiles
from routing.registry import PluginError
from scoring.builtin import register_builtins
from scoring.fused import fused_path
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_feed import PrefixFeed
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from scoring.stateful_plugins import register_stateful_plugins


@dataclass(frozen=True, slots=True)
class RoutingStack:
    """Everything one router decides with, and the state it keeps between decisions."""

    registry: PluginRegistry
    scheduler: Scheduler
    index: PrefixIndex
    ttft_model: OnlineTtftModel
    feed: PrefixFeed
    precise: PreciseIndex  # fed from the engines' KV-cache events, where they publish them


def build_routing_stack(
    section: RoutingSection,
    clock: Callable[[], float],
    rng: random.Random,
    *,
    index: PrefixIndex | None = None,
    register: Callable[[PluginRegistry], None] | None = None,
    precise: PreciseIndex | None = None,
) -> RoutingStack:
    """Build the stack for `section`; plugin errors raise `routing.registry.PluginError`."""
    index = PrefixIndex() if index is None else index
    if precise is None:
        precise = PreciseIndex(section.prefix.speculative_ttl_s)
    t = section.ttft
    ttft_model = OnlineTtftModel(TtftCoefficients(t.overhead_s, t.prefill_token_s), t.decay)
    registry = PluginRegistry()
    register_builtins(registry)
    register_stateful_plugins(registry, index, ttft_model, precise)
    if register is not None:
        register(registry)
    scheduler = build_scheduler(section, registry, clock, rng)
    feed = PrefixFeed(section.prefix, index, ttft_model if t.learn else None)
    return RoutingStack(registry, scheduler, index, ttft_model, feed, precise)


def build_scheduler(
    section: RoutingSection,
    registry: PluginRegistry,
    clock: Callable[[], float],
    rng: random.Random,
) -> Scheduler:
    """Instantiate every effective profile (fresh plugins per profile) into a Scheduler."""
    profiles = {
        name: _build_profile(name, spec, registry)
        for name, spec in effective_profiles(section).items()
    }
    return Scheduler(profiles, section.policy, clock, rng)


def _build_profile(name: str, spec: ProfileSpec, registry: PluginRegistry) -> Profile:
    try:
        filters = tuple(
            registry.make_filter(f.type, f.instance_name, _frozen(f.params)) for f in spec.filters
        )
        scorers = tuple(
            WeightedScorer(
                registry.make_scorer(s.type, s.instance_name, _frozen(s.params)), s.weight
            )
            for s in spec.scorers
        )
        p = spec.picker
        picker = registry.make_picker(p.type, p.instance_name, _frozen(p.params))
    except PluginError as exc:
        raise PluginError(f"profile {name!r}: {exc}") from exc
    profile = Profile(name=name, picker=picker, filters=filters, scorers=scorers)
    fast = fused_path(profile)  # the same decisions in one compiled pass, where it applies
    return profile if fast is None else replace(profile, fast=fast)


def _frozen(params: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(params))  # plugins get a read-only copy, never the spec's dict
