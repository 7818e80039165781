"""Data-parallel engines in the replay: N ranks behind each endpoint, routed to or balanced.

`SimSettings.data_parallel_size` N makes each endpoint of the fleet N ranks, each an engine
with its own KV cache and queue (`SimReplica` `ID@r`, as `health.ranks` names them), sharing
the endpoint's API server and its metrics page (one scrape phase). `dp_routing` says who picks
the rank:
- `rank`: the gateway (kvgate with `dp_size`): every rank is a routing target of its own.
- `engine`: the engine, as vLLM's front end does for a gateway that does not know the ranks
  (`DpEndpoint.choose`: the rank with the least `4 × waiting + running`, ties in turn, as the
  emulator's `RankBalancer`). The gateway routes to the endpoint and sees its ranks' series
  combined as `adapters.metric_map` combines them: queues and blocks summed, KV usage averaged;
  its prefix index and precise index hold the endpoint as one.
`build_fleet` makes the replay's replicas, ranks included.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeAlias

from routing.types import EngineMetrics
from scoring.state.prefix_feed import kv_tokens
from sim.engine.model import EngineModel
from sim.engine.types import EngineConfig, EngineProfile
from sim.replay.replica import ApiServer, SimReplica
from sim.replay.settings import SimSettings


def rank_id(endpoint_id: str, rank: int) -> str:
    """Rank `rank` of an endpoint, named as the gateway names rank targets (`ID@r`)."""
    return f"{endpoint_id}@{rank}"


def endpoint_ids(settings: SimSettings) -> list[str]:
    """`replica-NN` (role both), `prefill-NN`, `decode-NN`: numbered within the role."""
    roles = settings.endpoint_roles()
    return [
        f"{'replica' if role == 'both' else role}-{i - roles.index(role):02d}"
        for i, role in enumerate(roles)
    ]


class DpEndpoint:
    """One data-parallel engine as a gateway unaware of its ranks sees it (module docstring)."""

    __slots__ = (
        "_cache",
        "_turn",
        "dispatched",
        "first",
        "id",
        "in_flight",
        "pending_prefill_tokens",
        "ranks",
        "scrape_phase_s",
        "url",
    )

    def __init__(self, endpoint_id: str, ranks: Sequence[SimReplica], first: int) -> None:
        if not ranks:
            raise ValueError("a data-parallel endpoint has at least one rank")
        self.id = endpoint_id
        self.url = f"sim://{endpoint_id}"
        self.ranks = tuple(ranks)
        self.first = first  # rank 0's position among the fleet's engines
        self.scrape_phase_s = ranks[0].scrape_phase_s
        self.in_flight = 0  # the gateway's counters, as `SimReplica`'s
        self.dispatched = 0
        self.pending_prefill_tokens = 0
        self._turn = 0
        self._cache: tuple[float, EngineMetrics] | None = None

    def choose(self) -> int:
        """The position (among the fleet's engines) of the rank the engine gives a request."""
        ranks = self.ranks
        n = len(ranks)
        start = self._turn % n
        self._turn += 1
        best, best_load = start, -1
        for k in range(n):
            r = (start + k) % n
            waiting, running, _ = ranks[r].engine.load()
            load = 4 * waiting + running
            if best_load < 0 or load < best_load:
                best, best_load = r, load
        ranks[best].dispatched += 1
        return self.first + best

    def kv_tokens(self) -> int | None:
        """The endpoint's KV capacity in tokens: its ranks' blocks summed."""
        config = self.ranks[0].engine.config
        return kv_tokens(sum(r.engine.config.num_blocks for r in self.ranks), config.block_size)

    def metrics_at(self, s: float) -> EngineMetrics:
        """The ranks' metrics at `s`, combined as one page's series are."""
        cached = self._cache
        if cached is not None and cached[0] == s:
            return cached[1]
        each = [r.metrics_at(s) for r in self.ranks]
        usage = [m.kv_usage for m in each if m.kv_usage is not None]
        metrics = EngineMetrics(
            scraped_at=s,
            waiting=sum(m.waiting or 0 for m in each),
            running=sum(m.running or 0 for m in each),
            kv_usage=sum(usage) / len(usage) if usage else None,
            block_size=each[0].block_size,
            num_blocks=sum(m.num_blocks or 0 for m in each),
        )
        self._cache = (s, metrics)
        return metrics

    def forget_before(self, s: float) -> None:
        for rank in self.ranks:
            rank.forget_before(s)


def balanced_endpoints(
    replicas: Sequence[SimReplica], settings: SimSettings, *, oracle: bool
) -> list[DpEndpoint]:
    """The fleet's engines (`replicas`, each endpoint's ranks in turn) as endpoints that balance
    their ranks, when the engines pick the rank (`dp_routing: engine`); else none."""
    n = settings.data_parallel_size
    if n == 1 or settings.dp_routing != "engine":
        return []
    if oracle:
        raise ValueError("the oracle reads each rank: route to ranks (dp_routing rank)")
    return [
        DpEndpoint(eid, replicas[e * n : (e + 1) * n], e * n)
        for e, eid in enumerate(endpoint_ids(settings))
    ]


Target: TypeAlias = SimReplica | DpEndpoint
"""What a gateway routes to in the replay: an engine (or rank), or a balancing endpoint."""


def build_fleet(
    profile: EngineProfile, settings: SimSettings, rng: random.Random, *, kv_events: bool
) -> list[SimReplica]:
    """A replica of each role, each with its engine and the phase of its scrapes; with
    data-parallel ranks, each endpoint's ranks in turn, sharing its API server and phase."""
    n = settings.data_parallel_size
    out = []
    for endpoint, role in zip(endpoint_ids(settings), settings.endpoint_roles(), strict=True):
        phase = rng.uniform(0.0, settings.scrape_interval_s)
        api_server = ApiServer()
        for rank in range(n):
            engine = EngineModel(
                _engine_config(profile, settings, role),
                profile.timing,
                kv_events=kv_events,
                native=settings.native,
            )
            rid = rank_id(endpoint, rank) if n > 1 else endpoint
            out.append(SimReplica(rid, engine, phase, api_server))
    return out


def _engine_config(profile: EngineProfile, settings: SimSettings, role: str) -> EngineConfig:
    """The profile's engine; an SGLang decode replica keeps no prefix cache (SGLang's P/D)."""
    if role == "decode" and settings.disaggregation.protocol == "sglang":
        return replace(profile.config, enable_prefix_caching=False)
    return profile.config
