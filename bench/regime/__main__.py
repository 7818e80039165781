"""`python -m bench regime`: kvgate's default against other routers over a grid of regimes.

Each cell of the grid (`bench.regime.grid`: cache pressure × tenant popularity × traffic) is
a workload of `sim.workloads.family`, run live through every router in front of a fresh
emulated fleet (`--mode live`), replayed in the simulator with every kvgate policy and a model
of sglang-router (`--mode sim`; `bench.regime.peer_model`), or both from the same seed.
Simulated rows carry each run's TTFT floor (`bench.regime.floor`). Load is relative to
round-robin's saturation throughput, measured per cell in the simulator. Writes
`OUT/regime.json` (settings, cells, every row's TTFT mean/p50/p90, hit rate, max/mean load
share and errors, and the ratios of kvgate's default to sglang-router and round-robin) and
heat maps of those ratios (`OUT/heatmap_<mode>_vs_<baseline>.png`). `--quick` runs two cells
(`bench.regime.grid`); the axes are arguments (`--pressures`, `--loads`, ...). Peers are
installed into `.venv-peers/` on first use.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.peers import PeerInstall, ensure_peer
from bench.regime import live, peer_model, report, simulate
from bench.regime.grid import Cell, FleetSpec, GridAxes, full_grid, quick_grid
from sim.live.experiment import Workload
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable
from sim.workloads import family

# The default set: about 38 minutes live on 2 cores (a run of a closed-loop cell takes
# 20-40 s); kvgate:least-load, kvgate:session and the rest by --routers.
ROUTERS = (
    "kvgate:prefix-aware",
    "kvgate:estimated-ttft",
    "kvgate:round-robin",
    "sglang-router:cache_aware",
    "vllm-router:cache_aware",
)
MODES = ("live", "sim", "both")


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Run:
    """The map as it is filled in: cells, rows, failures; written out after every step."""

    def __init__(self, args: argparse.Namespace, cells: list[Cell], fleet: FleetSpec) -> None:
        self.args, self.cells, self.fleet = args, cells, fleet
        self.out = Path(args.out)
        self.routers = [tuple(r.split(":", 1)) for r in args.routers.split(",") if r]
        self.installs: dict[str, PeerInstall] = {}
        self.cell_docs: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.failed: list[str] = []
        self.started = time.monotonic()
        self._saturation: dict[tuple[float, str, int], float] = {}

    @property
    def modes(self) -> tuple[str, ...]:
        return ("live", "sim") if self.args.mode == "both" else (self.args.mode,)

    def saturation(self, cell: Cell) -> float:
        key = (cell.pressure, cell.popularity, cell.prefix_tokens)
        if key not in self._saturation:
            self._saturation[key] = simulate.saturation_rps(cell, self.fleet, self.args.seed)
        return self._saturation[key]

    def cell_doc(self, cell: Cell, saturation: float) -> dict[str, Any]:
        content = cell.family(self.fleet, self.args.seed, saturation)
        chats = family.chats(content)
        used = len({c.tenant for c in chats})
        offered = None
        if cell.loop == "open":  # over the span of the arrivals, ramp-up and tail included
            times = [
                t for turns in cell.open_arrivals(chats, saturation, self.args.seed) for t in turns
            ]
            offered = len(times) / (max(times) - min(times)) / saturation
        return {
            "name": cell.name,
            "row": cell.row,
            "pressure": cell.pressure,
            "pressure_exact": content.pressure(self.fleet.kv_tokens),
            "tenants": content.tenants,
            "popularity": cell.popularity,
            "prefix_tokens": cell.prefix_tokens,
            "conversations": content.conversations,
            # The chats reach only some tenants: the pressure of the prefixes they touch.
            "tenants_touched": used,
            "pressure_touched": used * cell.prefix_tokens / self.fleet.kv_tokens,
            "loop": cell.loop,
            "clients": cell.clients,
            "load": cell.load,
            "offered_load": offered,
            "round_robin_saturation_rps": saturation,
        }

    @property
    def seeds(self) -> list[int]:
        return [self.args.seed + k for k in range(self.args.repeats)]

    async def run_cell(self, cell: Cell) -> None:
        saturation = self.saturation(cell)
        doc = self.cell_doc(cell, saturation)
        ceilings = [
            simulate.cell_hit_ceiling(cell, self.fleet, seed, saturation) for seed in self.seeds
        ]
        doc["seeds"] = self.seeds
        doc["hit_ceiling"] = sum(ceilings) / len(ceilings)
        self.cell_docs.append(doc)
        _log(
            f"{cell.name}: {doc['conversations']} chats of {doc['tenants']} tenants × "
            f"{cell.prefix_tokens} tokens (pressure {doc['pressure_exact']:.2f}, "
            f"{doc['pressure_touched']:.2f} touched), round-robin saturates at "
            f"{saturation:.2f} requests/s; hit ceiling {doc['hit_ceiling']:.1%}"
        )
        for seed in self.seeds:
            await self.run_seed(cell, seed, saturation)

    async def run_seed(self, cell: Cell, seed: int, saturation: float) -> None:
        if "sim" in self.modes:
            policies = [p for name, p in self.routers if name == "kvgate"]
            if ("sglang-router", "cache_aware") in self.routers:
                policies.append(peer_model.PROFILE)  # the peer, as a model of its algorithm
            started = time.monotonic()
            for row in simulate.simulate_cell(cell, self.fleet, policies, seed, saturation):
                self.rows.append({"cell": cell.name, "seed": seed, **row})
            _log(f"  simulated {len(policies)} policies in {time.monotonic() - started:.1f} s")
        if "live" in self.modes:
            traffic = live.workload(cell, self.fleet, seed, saturation, self.args.slowdown)
            for name, policy in self.routers:
                await self.run_live(cell, traffic, name, policy, saturation=saturation, seed=seed)

    async def run_live(
        self,
        cell: Cell,
        traffic: Workload,
        name: str,
        policy: str,
        *,
        saturation: float,
        seed: int,
    ) -> None:
        _log(f"  live × {name} {policy} (seed {seed}): {traffic.requests} requests")
        if name not in self.installs:
            self.installs[name] = ensure_peer(name)
        try:
            result = await live.run_router(
                cell,
                self.fleet,
                traffic,
                self.installs[name],
                policy,
                slowdown=self.args.slowdown,
                log_dir=self.out / "logs",
                seed=seed if self.args.repeats > 1 else None,
            )
        except (RuntimeError, TimeoutError, OSError, httpx.HTTPError) as exc:
            # One router that will not start must not cost the others' results.
            self.failed.append(f"{cell.name} × {name} {policy}: {exc!r}"[:2000])
            _log(f"  FAILED: {self.failed[-1]}")
            return
        figures = live.figures(result, saturation, self.args.slowdown)
        self.rows.append(
            {
                "cell": cell.name,
                "seed": seed,
                "mode": "live",
                "router": name,
                "policy": policy,
                "version": self.installs[name].version,
                **figures,
            }
        )

    @property
    def ceilings(self) -> dict[str, float]:
        return {c["name"]: c["hit_ceiling"] for c in self.cell_docs}

    def write(self) -> None:
        doc = {
            "settings": {**vars(self.args), "fleet": vars_of(self.fleet)},
            "peers": {n: i.version for n, i in self.installs.items()},
            "wall_s": time.monotonic() - self.started,
            "definitions": report.DEFINITIONS,
            "cells": self.cell_docs,
            "rows": self.rows,
            "ratios": report.ratios(self.rows, self.ceilings),
            "failed": self.failed,
        }
        report.write_json(doc, self.out)


def vars_of(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "replicas": fleet.replicas,
        "profile": fleet.profile,
        "kv_tokens": fleet.kv_tokens,
        "kv_event_delay_s": fleet.kv_event_delay_s,
    }


async def run(args: argparse.Namespace, cells: list[Cell]) -> Run:
    fleet = FleetSpec(replicas=args.replicas, kv_event_delay_s=args.kv_event_delay)
    state = Run(args, cells, fleet)
    for i, cell in enumerate(cells):
        elapsed = time.monotonic() - state.started
        eta = f", ~{elapsed / i * (len(cells) - i) / 60:.0f} min left" if i else ""
        _log(f"[{i + 1}/{len(cells)}] {elapsed:.0f} s so far{eta}")
        await state.run_cell(cell)
        state.write()
    return state


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench regime",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    add("--quick", action="store_true", help="the issue's cell and a high-reuse cell only")
    add("--mode", choices=MODES, default="both", help="live, simulated or both (default: both)")
    add("--routers", default=",".join(ROUTERS), help="NAME:POLICY,...; kvgate's also simulated")
    add("--replicas", type=int, default=4, help="replicas of the demo profile (default: 4)")
    add("--seed", type=int, default=1, help="seed of the workloads (default: 1)")
    add(
        "--kv-event-delay",
        type=float,
        default=FleetSpec().kv_event_delay_s,
        metavar="S",
        help="sim: seconds from a step's end to its KV events in the precise index (%(default)g)",
    )
    add(
        "--repeats",
        type=_positive,
        default=1,
        help="runs of every cell, with seeds SEED, SEED+1, ...; ratios of their means (default 1)",
    )
    add("--conversations", type=int, help="chats per cell (default: 144 closed loop, >= 48 open)")
    d = GridAxes()
    add("--prefix-tokens", type=int, default=d.prefix_tokens, help="system prompt tokens")
    add("--pressures", type=_floats, default=d.pressures, help="prefix ÷ KV, e.g. 0.25,1.5,4")
    add("--popularities", type=_strs, default=d.popularities, help="closed slice: uniform,...")
    add("--clients", type=int, default=d.clients, help="closed slice: concurrent clients")
    add("--loads", type=_floats, default=d.loads, help="open slice: × round-robin saturation")
    add("--open-popularities", type=_strs, default=d.open_popularities, help="open slice's")
    add(
        "--slowdown",
        type=float,
        default=1.0,
        help="live engines (and open-loop arrivals) X times slower (default %(default)g)",
    )
    add("--out", default="out/bench/regime", help="output directory (default %(default)s)")
    return p.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


def grid(args: argparse.Namespace) -> list[Cell]:
    if args.quick:
        return quick_grid(args.prefix_tokens)
    axes = GridAxes(
        pressures=args.pressures,
        popularities=args.popularities,
        clients=args.clients,
        open_popularities=args.open_popularities,
        loads=args.loads,
        prefix_tokens=args.prefix_tokens,
    )
    return full_grid(axes)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cells = grid(args)
    if args.conversations:
        cells = [replace(c, conversations=args.conversations) for c in cells]
    state = asyncio.run(run(args, cells))
    table = report.ratios(state.rows, state.ceilings)
    print(report.format_rows(state.rows))
    print()
    print(report.format_ratios(table))
    try:
        paths = report.write_heatmaps(state.cell_docs, table, state.out)
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
        paths = []
    names = ", ".join(p.name for p in paths)
    wall = time.monotonic() - state.started
    print(f"\nwrote {state.out}/regime.json {names} in {wall:.0f} s")
    errors = any(r["errors"] for r in state.rows)
    return 1 if state.failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
