"""The simulated half of the regime map: each cell replayed per kvgate policy (`sim.replay`).

- **Saturation** (`saturation_rps`): round-robin's throughput, in requests per second, in
  a closed loop (below) of `SATURATION_CLIENTS_PER_REPLICA` clients per replica over
  `SATURATION_CHATS` of the cell's chats (same seed): enough clients that every replica
  always has a queue (16, 32, 64 and 128 clients on 4 replicas gave 8.7, 8.5, 8.6 and
  8.4 requests/s at the issue's cell). An open-loop cell's rate is `load` × this; "load"
  is thus measured in the engine model, per cell, since the hit rate round-robin gets, and
  with it the fleet's capacity, depends on pressure and popularity. (A backlog of every
  request at once took minutes to replay: the engines' waiting queues grow long.)
- **Closed loop**: the simulator replays fixed arrival times, so a closed loop of C clients
  is replayed as the arrivals it would produce if every request took L seconds
  (`family.closed_arrivals`), with L found per policy by bisection as the fixed point
  L = mean end-to-end latency of the replay (Little's law with no think time: C clients
  then send C / L requests per second). The answers a live engine writes are stand-ins of
  the same length here, so a turn hits its previous prompt but not its previous answer.
- **Open loop**: the same arrivals live and simulated (`Cell.open_arrivals`).

- **Hit ceiling** (`hit_ceiling`): the hit rate of one unbounded cache that saw every
  request of the cell in order, which no router over any fleet can beat: each tenant's
  first prompt and each turn's new tokens are misses whatever the routing. (The stand-in
  answers never hit, so a live ceiling is higher by about one answer, 24 tokens, a turn.)

Each replay is the gateway's own routing code on the engine model (`sim.replay.Replay`),
with default settings (metrics scraped every 50 ms) but the fleet's KV-event delay (for
profiles that read the precise index).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.regime.grid import Cell, FleetSpec
from sim.engine.profiles import get_profile
from sim.percentile import percentile
from sim.replay import Replay, ReplayResult, SimSettings
from sim.traces import TraceRequest
from sim.workloads import family

SATURATION_CHATS = 192
SATURATION_CLIENTS_PER_REPLICA = 8
# Bisection bounds and steps for the closed loop's per-request latency (seconds).
LATENCY_LO_S, LATENCY_HI_S, BISECTIONS = 0.02, 60.0, 8


def replay(trace: Sequence[TraceRequest], policy: str, fleet: FleetSpec) -> ReplayResult:
    settings = SimSettings(replicas=fleet.replicas, kv_event_delay_s=fleet.kv_event_delay_s)
    return Replay(trace, policy, get_profile(fleet.profile), settings).run()


def saturation_rps(cell: Cell, fleet: FleetSpec, seed: int, chats: int = SATURATION_CHATS) -> float:
    """Round-robin's requests per second with every replica kept busy (see the docstring)."""
    content = replace(cell.family(fleet, seed), conversations=chats)
    clients = SATURATION_CLIENTS_PER_REPLICA * fleet.replicas
    result = closed_loop(family.chats(content), clients, "round-robin", fleet).result
    return result.requests / result.makespan_s


@dataclass(frozen=True, slots=True)
class ClosedLoopFit:
    """A closed loop replayed open loop at its fixed point."""

    latency_s: float  # per request, the fixed point
    result: ReplayResult

    @property
    def gap_s(self) -> float:
        """How far the replay's mean latency is from the assumed one."""
        return abs(mean_e2e(self.result) - self.latency_s)


def closed_loop(
    chats: Sequence[family.Chat], clients: int, policy: str, fleet: FleetSpec
) -> ClosedLoopFit:
    """Bisect (geometrically) on L for mean end-to-end latency = L (see the docstring)."""
    lo, hi = LATENCY_LO_S, LATENCY_HI_S
    best: ClosedLoopFit | None = None
    for _ in range(BISECTIONS):
        mid = math.sqrt(lo * hi)
        trace = family.chat_trace(
            chats, family.closed_arrivals(chats, clients, mid), fleet.block_tokens
        )
        fit = ClosedLoopFit(mid, replay(trace, policy, fleet))
        if best is None or fit.gap_s < best.gap_s:
            best = fit
        lo, hi = (mid, hi) if mean_e2e(fit.result) > mid else (lo, mid)
    assert best is not None
    return best


def mean_e2e(result: ReplayResult) -> float:
    e2e = result.log.e2e_s
    return sum(e2e) / len(e2e) if e2e else math.nan


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
    cell: Cell, fleet: FleetSpec, policies: Sequence[str], seed: int, saturation: float
) -> list[dict[str, Any]]:
    """One row per policy: the figures, and for a closed loop its fitted latency."""
    chats = family.chats(cell.family(fleet, seed, saturation))
    rows = []
    for policy in policies:
        extra: dict[str, Any] = {}
        if cell.loop == "closed":
            fit = closed_loop(chats, cell.clients, policy, fleet)
            result, extra["closed_loop_latency_s"] = fit.result, fit.latency_s
        else:
            arrivals = cell.open_arrivals(chats, saturation, seed)
            result = replay(family.chat_trace(chats, arrivals, fleet.block_tokens), policy, fleet)
        row = {"mode": "sim", "router": "kvgate", "policy": policy, **figures(result), **extra}
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
