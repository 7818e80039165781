"""Routing framework: request and endpoint types, plugin protocols, the scheduler and registry.

Pure and synchronous (stdlib only): no I/O, no wall clock, no global RNG. The gateway and the
offline simulator both drive it with snapshots, an injected clock and an injected RNG.
"""

from routing.protocols import Filter, Picker, SchedulingContext, Scorer
from routing.registry import PluginRegistry
from routing.scheduler import Profile, Scheduler, WeightedScorer
from routing.types import (
    Candidates,
    Decision,
    EndpointScores,
    EndpointSnapshot,
    EngineMetrics,
    Health,
    RoutingRequest,
    ScoreColumn,
    ScoreTable,
    endpoint_ids,
)

__all__ = [
    "Candidates",
    "Decision",
    "EndpointScores",
    "EndpointSnapshot",
    "EngineMetrics",
    "Filter",
    "Health",
    "Picker",
    "PluginRegistry",
    "Profile",
    "RoutingRequest",
    "Scheduler",
    "SchedulingContext",
    "ScoreColumn",
    "ScoreTable",
    "Scorer",
    "WeightedScorer",
    "endpoint_ids",
]
