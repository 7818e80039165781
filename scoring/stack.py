"""The routing stack, assembled once for the gateway and the simulator alike.

registry → built-in plugins → TTFT model → stateful plugins (over the prefix index and the
TTFT model) → caller's extra plugins → scheduler with every effective profile → prefix feed.
The composition root passes its clock and RNG (wall clock in the gateway, virtual time in
the simulator) and may pass its own index (the simulator's oracle reads the engines' caches).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from routing import PluginRegistry, Scheduler
from scoring.builtin import register_builtins
from scoring.precise_index import PreciseIndex
from scoring.prefix_feed import PrefixFeed
from scoring.prefix_index import PrefixIndex
from scoring.profiles import RoutingSection, build_scheduler
from scoring.stateful_plugins import register_stateful_plugins
from scoring.ttft_model import OnlineTtftModel, TtftCoefficients


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
    precise = PreciseIndex() if precise is None else precise
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
