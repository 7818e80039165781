"""Small builders for scoring tests: endpoints, requests, scored lists, contexts, registries."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from routing import (
    EndpointScores,
    EndpointSnapshot,
    EngineMetrics,
    PluginRegistry,
    RoutingRequest,
    SchedulingContext,
)
from scoring.builtin import register_builtins
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from scoring.stateful_plugins import register_stateful_plugins


def endpoint(endpoint_id: str, in_flight: int = 0) -> EndpointSnapshot:
    return EndpointSnapshot(
        id=endpoint_id,
        url=f"http://{endpoint_id}.test:8000",
        models=frozenset({"m"}),
        in_flight=in_flight,
    )


def request(session_key: str | None = None) -> RoutingRequest:
    return RoutingRequest(model="m", request_id="r1", session_key=session_key)


def scored(totals: Mapping[str, float]) -> list[EndpointScores]:
    return [EndpointScores(i, {"s": t}, t) for i, t in totals.items()]


def context(seed: int = 0) -> SchedulingContext:
    return SchedulingContext(clock=lambda: 100.0, rng=random.Random(seed))


def metered(endpoint_id: str, in_flight: int = 0, **fields: Any) -> EndpointSnapshot:
    """An endpoint with engine metrics `fields` (EngineMetrics keywords), scraped at t=100."""
    metrics = EngineMetrics(scraped_at=100.0, **fields)
    return replace(endpoint(endpoint_id, in_flight), metrics=metrics)


def registry(
    index: PrefixIndex | None = None, ttft_model: OnlineTtftModel | None = None
) -> PluginRegistry:
    """Every built-in and stateful plugin, as the gateway registers them (fresh state if None)."""
    built = PluginRegistry()
    register_builtins(built)
    ttft_model = ttft_model or OnlineTtftModel(TtftCoefficients(0.02, 2e-4))
    register_stateful_plugins(built, index or PrefixIndex(), ttft_model)
    return built
