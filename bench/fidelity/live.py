"""The live half of the fidelity check: one live experiment per policy (`sim.live`).

A fresh fleet (`kvgate emulate`) and gateway (`kvgate serve --config … --record …`) per
policy; the trace's requests are sent open loop at their arrival times; TTFT is measured by
the client from the stream. The replicas' own counters over the run give the hit rate and,
from their TTFT histogram's sum and count, the engines' mean TTFT from the request's arrival
at the engine, so that the client's TTFT splits into engine time and what HTTP, the gateway
and the client add on top; their inter-token latency's show how much longer than modelled
the emulated steps took.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sim.live.experiment import FleetLauncher, kvgate_router, open_loop, run_experiment
from sim.live.scrape import ReplicaReport, summed
from sim.workloads import TimedRequest

PROGRESS_EVERY_S = 5.0
SETTLE_SCRAPES = 4  # scrape periods waited once the gateway is ready: its metrics are fresh


@dataclass(frozen=True, slots=True)
class LiveRun:
    """What one live run measured."""

    policy: str
    ttfts_s: tuple[float, ...]  # client-side, requests that succeeded, ascending
    errors: int
    counters: ReplicaReport  # the fleet's counters over the run, summed over replicas
    requests_per_replica: tuple[int, ...]
    wall_s: float
    record_path: Path
    load_average: float  # the machine's 1-minute load average at the end of the run

    @property
    def engine_ttft_mean_s(self) -> float:
        c = self.counters
        return c.ttft_sum_s / c.ttft_count if c.ttft_count else float("nan")

    @property
    def engine_itl_mean_s(self) -> float:
        """The engines' mean gap between tokens: their steps' real length, slips included."""
        c = self.counters
        return c.itl_sum_s / c.itl_count if c.itl_count else float("nan")


@dataclass(frozen=True, slots=True)
class LiveFleet:
    """How to start the fleet and the gateway for one live run."""

    fleet: FleetLauncher
    config_path: Path
    scrape_interval_s: float
    out_dir: Path
    roles: tuple[str, ...] = ()  # a P/D pool's, for the gateway's backends (`PdFleet.roles`)


async def run_live(
    setup: LiveFleet, policy: str, requests: list[TimedRequest], tag: str = "chats"
) -> LiveRun:
    record = setup.out_dir / f"recorded-{tag}-{policy}.jsonl"
    record.unlink(missing_ok=True)  # the gateway appends
    extra = ("--config", str(setup.config_path), "--record", str(record))
    # The gateway stops (flushing the recording) before run_experiment returns.
    result = await run_experiment(
        setup.fleet,
        kvgate_router(
            policy, extra, settle_s=SETTLE_SCRAPES * setup.scrape_interval_s, roles=setup.roles
        ),
        open_loop("trace", requests),
        label=f"live-{tag}-{policy}",
        log_dir=setup.out_dir / "logs",
        progress_every_s=PROGRESS_EVERY_S,
    )
    return LiveRun(
        policy=policy,
        ttfts_s=tuple(result.ttfts_s),
        errors=len(result.errors),
        counters=summed(result.replicas),
        requests_per_replica=tuple(result.requests_per_replica),
        wall_s=result.wall_s,
        record_path=record,
        load_average=os.getloadavg()[0],
    )
