"""The simulated half of the regime map: each cell replayed per kvgate policy (`sim.replay`).

- **Saturation** (`saturation_rps`): round-robin's throughput in a closed loop of
  `SATURATION_CLIENTS_PER_REPLICA` clients per replica over `SATURATION_CHATS` of the cell's
  chats (enough that every replica always has a queue). An open-loop cell's rate is `load` ×
  this, measured per cell since round-robin's hit rate, hence capacity, depends on the cell.
- **Closed loop**: C users take the chats in order, each turn sent when the previous one is
  answered (`sim.replay.ClosedLoop`); answers are stand-ins of the same length, so a turn hits
  its previous prompt but not its previous answer. **Open loop**: `Cell.open_arrivals`.
- **sglang-router**: a model of `cache_aware` (`bench.regime.peer_model`), rows marked `model`.
- **Hit ceiling** (`hit_ceiling`): the hit rate of one unbounded cache fed every request in
  order, which no router can beat (stand-in answers never hit: live, ~24 tokens a turn more).

Replays run the gateway's routing on the engine model (`sim.replay.Replay`) with default
settings (metrics every 50 ms) but the fleet's KV-event delay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.regime import floor, peer_model
from bench.regime.grid import Cell, FleetSpec
from routing import RoutingRequest
from routing.config.profiles import RoutingSection
from routing.percentile import percentile
from routing.traces import TraceRequest
from sim.engine.profiles import get_profile
from sim.replay import ClosedLoop, Replay, ReplayResult, SimSettings
from sim.workloads import family

SATURATION_CHATS = 192
SATURATION_CLIENTS_PER_REPLICA = 8


@dataclass(frozen=True, slots=True)
class SimRun:
    """One replay, with when it sent each request of its trace and that request's TTFT."""

    trace: Sequence[TraceRequest]
    result: ReplayResult
    sent_s: Sequence[float]  # sent_s[i]: when trace[i] was routed
    ttft_s: Sequence[float]  # ttft_s[i]: its first token's wait (NaN: rejected)

    def floors(self, fleet: FleetSpec) -> list[float]:
        """Each request's TTFT floor (`bench.regime.floor`) at the instants this run sent it."""
        return floor.floors(self.trace, self.sent_s, get_profile(fleet.profile))


class Timings:
    """A `ReplayObserver` that keeps each request's routing instant and TTFT."""

    def __init__(self, n: int) -> None:
        self.sent = [math.nan] * n
        self.ttft = [math.nan] * n

    def decided(self, now: float, request: RoutingRequest, *_: object) -> None:
        self.sent[int(request.request_id)] = now

    def first_token(self, now: float, request_id: str) -> None:
        i = int(request_id)
        self.ttft[i] = now - self.sent[i]

    def finished(self, now: float, request_id: str) -> None:
        pass


def replay(
    trace: Sequence[TraceRequest],
    policy: str,
    fleet: FleetSpec,
    routing: RoutingSection | None = None,
    loop: ClosedLoop | None = None,
) -> SimRun:
    """One replay of `policy`: a profile of `routing` (default: the built-ins) or the SGLang
    model's (`peer_model.PROFILE`), which every replay can run."""
    settings = SimSettings(
        replicas=fleet.replicas,
        kv_event_delay_s=fleet.kv_event_delay_s,
        routing=peer_model.routing_section(routing),
    )
    profile = get_profile(fleet.profile)
    seen = Timings(len(trace))
    result = Replay(
        trace, policy, profile, settings, register=peer_model.register, observer=seen, loop=loop
    ).run()
    return SimRun(trace, result, seen.sent, seen.ttft)


def saturation_rps(cell: Cell, fleet: FleetSpec, seed: int, chats: int = SATURATION_CHATS) -> float:
    """Round-robin's requests per second with every replica kept busy (see the docstring)."""
    content = replace(cell.family(fleet, seed), conversations=chats)
    clients = SATURATION_CLIENTS_PER_REPLICA * fleet.replicas
    result = closed_loop(family.chats(content), clients, "round-robin", fleet).result
    return result.requests / result.makespan_s


def closed_loop(
    chats: Sequence[family.Chat],
    clients: int,
    policy: str,
    fleet: FleetSpec,
    routing: RoutingSection | None = None,
) -> SimRun:
    """`clients` users sending the chats' turns, each when the previous one is answered
    (`sim.replay.ClosedLoop`, as `sim.live.client.run_closed_loop` does live)."""
    trace, turns = family.closed_loop_trace(chats, fleet.block_tokens)
    return replay(trace, policy, fleet, routing, ClosedLoop(clients, turns))


def figures(result: ReplayResult) -> dict[str, Any]:
    """The figures every row of the map has, from one replay."""
    ttfts = sorted(result.log.ttft_s)
    shares = result.dispatched
    mean_share = sum(shares) / len(shares) if shares else 0.0
    return {
        "requests": result.requests,
        "errors": result.rejected,
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else math.nan,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "hit_rate": result.prefix_hits / result.prefix_queries if result.prefix_queries else 0.0,
        "max_mean_share": max(shares) / mean_share if mean_share else math.nan,
        "requests_per_replica": list(shares),
        "throughput_rps": result.requests / result.makespan_s if result.makespan_s else 0.0,
    }


def simulate_cell(
    cell: Cell,
    fleet: FleetSpec,
    policies: Sequence[str],
    seed: int,
    saturation: float,
    *,
    routing: RoutingSection | None = None,
) -> list[dict[str, Any]]:
    """One row per policy (a profile of `routing`, or `peer_model.PROFILE`, whose row is
    sglang-router's, marked `model`): the figures, and the TTFT floor at the run's own
    arrivals (`bench.regime.floor`), which no router sending as this one did can beat."""
    chats = family.chats(cell.family(fleet, seed, saturation))
    rows = []
    for policy in policies:
        if cell.loop == "closed":
            run = closed_loop(chats, cell.clients, policy, fleet, routing)
        else:
            arrivals = cell.open_arrivals(chats, saturation, seed)
            trace = family.chat_trace(chats, arrivals, fleet.block_tokens)
            run = replay(trace, policy, fleet, routing)
        who: dict[str, Any] = {"router": "kvgate", "policy": policy}
        if policy == peer_model.PROFILE:
            who = {"router": "sglang-router", "policy": "cache_aware", "model": True}
        floors = sorted(run.floors(fleet))
        row = {
            "mode": "sim",
            **who,
            **figures(run.result),
            "ttft_floor_mean_s": sum(floors) / len(floors) if floors else math.nan,
            "ttft_floor_p90_s": percentile(floors, 90),
        }
        row["load"] = row["throughput_rps"] / saturation
        rows.append(row)
    return rows


def hit_ceiling(trace: Sequence[TraceRequest]) -> float:
    """Hit tokens ÷ prompt tokens of one unbounded cache fed `trace` in arrival order."""
    seen: set[int] = set()
    hit = total = 0
    for r in sorted(trace, key=lambda r: r.arrival_s):
        matched = 0
        for block in r.hash_ids:
            if block not in seen:
                break
            matched += 1
        hit += min(matched * r.block_tokens, r.input_tokens)
        total += r.input_tokens
        seen.update(r.hash_ids)
    return hit / total if total else 0.0


def cell_hit_ceiling(cell: Cell, fleet: FleetSpec, seed: int, saturation: float) -> float:
    """`hit_ceiling` of the cell's chats (a closed loop's turn order: any latency will do,
    the ceiling hardly depends on it)."""
    chats = family.chats(cell.family(fleet, seed, saturation))
    if cell.loop == "closed":
        arrivals = family.closed_arrivals(chats, cell.clients, 1.0)
    else:
        arrivals = cell.open_arrivals(chats, saturation, seed)
    return hit_ceiling(family.chat_trace(chats, arrivals, fleet.block_tokens))
