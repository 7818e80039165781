"""Several gateways in one replay: each with its own routing state, shared or not.

`kvgate sim --gateways N` puts N gateways in front of the simulated fleet, as a deployment behind
a load balancer would. Each `SimGateway` has its own routing stack, P/D planner (a fleet with
prefill replicas) and counters per replica (`ReplicaView`: in-flight requests and pending
prefill, what its scheduler's `EndpointSnapshot`s show); a lone gateway counts on the
`SimReplica`s themselves.

Requests reach the gateways by `spread`: `request` (default), round-robin by request, so any turn
of a chat may land on any gateway; `session`, every request of a session on one gateway (a
stable hash of the session key; requests without one round-robin), as a sticky load balancer.

Their routing state is shared (`sim.replay.sharing`, each change after a sync delay) or not (each
learns from its own dispatches and answers). The precise index is one for all: the engines' KV
events feed it alike for every gateway (speculations included).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from routing import PluginRegistry
from routing.traces import TraceRequest
from routing.types import EndpointSnapshot, EngineMetrics
from scoring.pd.planner import PdPlanner, new_link_model
from scoring.stack import RoutingStack, build_routing_stack
from scoring.state.precise_index import PreciseIndex
from scoring.state.prefix_index import PrefixIndex
from sim.replay.settings import SPREADS, SimSettings


class Counters(Protocol):
    """What one gateway counts for one engine replica (`SimReplica` or `ReplicaView`)."""

    @property
    def id(self) -> str: ...

    @property
    def url(self) -> str: ...

    in_flight: int
    pending_prefill_tokens: int


class ReplicaView:
    """One gateway's own counters for one engine replica."""

    __slots__ = ("id", "in_flight", "pending_prefill_tokens", "url")

    def __init__(self, replica_id: str, url: str) -> None:
        self.id = replica_id
        self.url = url
        self.in_flight = 0
        self.pending_prefill_tokens = 0


@dataclass(slots=True)
class SimGateway:
    """One gateway replica: its routing stack, its counters, its last snapshots."""

    stack: RoutingStack
    views: Sequence[Counters]  # by replica position
    roles: Sequence[str] = ()  # by replica position (empty: every one `both`)
    planner: PdPlanner | None = None  # a fleet with prefill replicas: P/D placement
    shown: list[EndpointSnapshot | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.shown = [None] * len(self.views)

    def snapshot(
        self, position: int, metrics: EngineMetrics | None, models: frozenset[str]
    ) -> EndpointSnapshot:
        """Replica `position` as this gateway's scheduler sees it, with `metrics` (as scraped)
        and its own counters. A snapshot is a frozen value: the last one is shown again if
        nothing changed."""
        shown = self.shown[position]
        view = self.views[position]
        if (
            shown is None
            or shown.metrics is not metrics
            or shown.in_flight != view.in_flight
            or shown.pending_prefill_tokens != view.pending_prefill_tokens
            or shown.models != models
        ):
            shown = self.shown[position] = EndpointSnapshot(
                id=view.id,
                url=view.url,
                models=models,
                engine="vllm",
                metrics=metrics,
                in_flight=view.in_flight,
                pending_prefill_tokens=view.pending_prefill_tokens,
                role=self.roles[position] if self.roles else "both",
            )
        return shown


def build_gateways(
    settings: SimSettings,
    clock: Callable[[], float],
    rng: random.Random,
    replicas: Sequence[Counters],
    *,
    index: PrefixIndex | None,
    register: Callable[[PluginRegistry], None] | None,
    precise: PreciseIndex | None,
) -> list[SimGateway]:
    """`settings.gateways` gateways on `settings.routing`; the first routes with `rng` (and,
    alone, counts on `replicas`), the others with RNGs of their own from `settings.seed`."""
    count = settings.gateways
    roles = settings.roles()
    section = settings.disaggregation
    out = []
    for g in range(count):
        stack = build_routing_stack(
            settings.routing,
            clock,
            rng if g == 0 else random.Random(f"{settings.seed}:gateway-{g}"),
            index=index,
            register=register,
            precise=precise,
        )
        views = replicas if count == 1 else [ReplicaView(r.id, r.url) for r in replicas]
        planner = None
        if settings.prefill:  # as `gateway.compose` builds it
            planner = PdPlanner(
                section, stack.index, stack.ttft_model, new_link_model(section),
                settings.routing.prefix.chars_per_token,
            )  # fmt: skip
        out.append(SimGateway(stack, views, roles if settings.prefill else (), planner))
    return out


class Spread:
    """Which gateway receives each request (see the module docstring)."""

    __slots__ = ("_by_session", "_count", "_next")

    def __init__(self, count: int, spread: str) -> None:
        if spread not in SPREADS:
            raise ValueError(f"spread must be one of {', '.join(SPREADS)}, got {spread!r}")
        self._count = count
        self._by_session = spread == "session"
        self._next = 0

    def pick(self, request: TraceRequest) -> int:
        if self._by_session and request.session:
            return zlib.crc32(request.session.encode()) % self._count
        g = self._next
        self._next = (g + 1) % self._count
        return g
