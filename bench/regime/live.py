"""The live half of the regime map: each cell through each router in front of a fresh fleet.

One `sim.live` experiment per (cell, router): a fresh `kvgate emulate` fleet (cold caches),
the router (kvgate with a policy, or a peer from `bench.peers`), the cell's chats as
streamed chat completions — closed loop by `clients` clients in turn, or open loop at the
same arrival times the simulator replays — and the replicas' own counters for the hit
rate. With `slowdown` the engines run that many times slower than the profile and an open
loop's arrivals are stretched to match, so the load is unchanged and less of the TTFT is
the 2-core machine's own CPU contention (see `bench.fidelity`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.jitter import jittered
from bench.peers import PeerInstall, peer_router
from bench.regime.grid import Cell, FleetSpec
from sim.live.experiment import (
    ExperimentResult,
    Fleet,
    Workload,
    closed_loop,
    open_loop,
    run_experiment,
)
from sim.workloads import family

MODEL = "kvgate-regime"
PROGRESS_EVERY_S = 10.0


def workload(
    cell: Cell,
    fleet: FleetSpec,
    seed: int,
    saturation_rps: float,
    slowdown: float,
    *,
    jitter: tuple[float, int] | None = None,
) -> Workload:
    """The cell's chats as live traffic; an open loop's rate is `load` × saturation.
    `jitter` (max seconds, seed): each open-loop request sent up to `max` later
    (`bench.jitter`), a fresh draw of the run's ms-scale timing that repeats exactly with the
    same seed; a closed loop has no schedule to jitter."""
    chats = family.chats(cell.family(fleet, seed, saturation_rps))
    if cell.loop == "closed":
        return closed_loop(cell.name, MODEL, family.conversations(chats), clients=cell.clients)
    arrivals = cell.open_arrivals(chats, saturation_rps, seed, slowdown)
    requests = family.chat_requests(chats, arrivals, MODEL)
    if jitter is not None:
        requests = jittered(requests, *jitter, at="at_s")
    return open_loop(cell.name, requests)


async def run_router(
    cell: Cell,
    fleet: FleetSpec,
    traffic: Workload,
    install: PeerInstall,
    policy: str,
    *,
    slowdown: float,
    log_dir: Path,
    seed: int | None = None,
) -> ExperimentResult:
    return await run_experiment(
        Fleet(fleet.replicas, fleet.profile, MODEL, speedup=1 / slowdown),
        peer_router(install, policy),
        traffic,
        label=f"{cell.name}{'' if seed is None else f'-s{seed}'}/{install.name}-{policy}",
        log_dir=log_dir,
        progress_every_s=PROGRESS_EVERY_S,
    )


def figures(result: ExperimentResult, saturation_rps: float, slowdown: float) -> dict[str, Any]:
    """The map's figures from one live run, with the load it carried."""
    return {**result.figures(), "load": result.throughput_rps * slowdown / saturation_rps}
