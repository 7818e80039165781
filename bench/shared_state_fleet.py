"""`python -m bench shared-state-fleet`: N gateways sharing routing state against one gateway.

Each run is a regime-map cell (`bench.regime.grid`: 144 chats in a closed loop of 16 clients,
`pP-POP-closed16`, or an open loop at 50% or 90% of round-robin's saturation, `-open50`,
`-open90`) on a fresh `kvgate emulate` fleet, prefix-aware, in a setup of `bench.precise.run`:
`one` gateway; `none`, `--gateways` sharing nothing; `redis`, sharing through a redis-server;
`workers`, `kvgate serve --workers N`; `control`, as `redis` but every client on the first
gateway (what N processes cost here); `outage`, as `redis` with the redis-server killed
`--outage-at` s in and restarted empty `--outage-for` s later. Clients spread over the
gateways (`--spread client`: client i to gateway i mod N; `request`: each request to the
next). Prints per cell hit rate, mean and p90 TTFT, errors, ratios to one gateway's in the
same seed and each gateway's lag of the others' changes; writes `shared_state_fleet.json` and
a PNG to `--out`. `--jitters 1,2,3` reruns open-loop seeds with requests up to `--jitter-ms`
late (docs/decisions/0026-mirror-bounded-by-kv-size.md); `--sim-delays 0,0.005` runs the same
cells in the simulator (`kvgate sim --gateways N --sync-delay S`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.precise.run import run
from bench.redis_outage import RedisOutage
from bench.regime.grid import CLIENTS, Cell, FleetSpec

SETUPS = ("one", "none", "redis", "control", "workers", "outage")


def _cells(names: str) -> list[Cell]:
    every = [
        Cell(p, pop, "closed", clients=CLIENTS)
        for p in (0.25, 1.5, 4.0)
        for pop in ("uniform", "zipf", "hot")
    ] + [
        Cell(p, pop, "open", load=load)
        for p in (0.25, 1.5, 4.0)
        for pop in ("uniform", "zipf", "hot")
        for load in (0.5, 0.9)
    ]
    chosen = [c for c in every if c.name in names.split(",")]
    if not chosen:
        raise SystemExit(f"no cell among {names!r}; known: {', '.join(c.name for c in every)}")
    return chosen


async def _one(
    setup: str,
    cell: Cell,
    seed: int,
    args: argparse.Namespace,
    logs: Path,
    *,
    jitter: int | None = None,
) -> dict[str, Any]:
    n = args.gateways
    outage = RedisOutage(args.outage_at, args.outage_for) if setup == "outage" else None
    row = await run(
        cell,
        FleetSpec(replicas=args.replicas, profile="demo"),
        "prefix-aware",
        seed=seed,
        slowdown=args.slowdown,
        log_dir=logs,
        gateways=1 if setup in ("one", "workers") else n,
        events=False,
        redis=setup in ("redis", "outage", "control"),
        spread=args.spread,
        workers=n if setup == "workers" else 1,
        outage=outage,
        front=0 if setup == "control" else None,
        jitter=None if jitter is None else (args.jitter_ms / 1000, jitter),
    )
    return {"setup": setup, **row}


def lag_line(sharing: dict[str, Any] | None) -> str:
    """The run's sharing lags, gateway by gateway (p50/p99 ms), or "" when nothing was shared."""
    if not sharing:
        return ""

    def fmt(lags: list[dict[str, Any] | None] | None) -> str:
        parts = [f"{s['p50']:.1f}/{s['p99']:.1f}" if s and s.get("n") else "—" for s in lags or []]
        return " ".join(parts) or "—"

    return (
        f"lag p50/p99 ms per gateway: events {fmt(sharing.get('events_lag_ms'))}; "
        f"load reports {fmt(sharing.get('load_lag_ms'))}"
    )


def _range(values: list[float], fmt: str) -> str:
    if not values:
        return "—"
    mean = statistics.fmean(values)
    return f"{mean:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def one_gateway_means(rows: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[float, float]]:
    """(cell, seed) → one gateway's mean hit rate and mean TTFT over its runs (several with
    `--jitters`): what every run of that cell and seed is divided by, one gateway's own runs
    too, whose ratios are then the noise of one gateway's outcome over arrival jitter."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r["setup"] == "one":
            runs.setdefault((r["cell"], r["seed"]), []).append(r)
    return {
        key: (
            statistics.fmean(r["hit_rate"] for r in rs),
            statistics.fmean(r["ttft_mean_s"] for r in rs),
        )
        for key, rs in runs.items()
    }


def _spread(values: list[float]) -> str:
    """Mean ± standard error (with two values or more), and the range."""
    if len(values) < 2:
        return _range(values, ".2f")
    se = statistics.stdev(values) / len(values) ** 0.5
    mean = statistics.fmean(values)
    return f"{mean:.2f} ± {se:.2f} ({min(values):.2f}–{max(values):.2f})"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| cell | setup | hit rate | ÷ one gateway | mean TTFT s | ÷ one gateway | p90 TTFT s "
        "| errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = one_gateway_means(rows)
    for cell in dict.fromkeys(r["cell"] for r in rows):
        for setup in SETUPS:
            rs = [r for r in rows if r["cell"] == cell and r["setup"] == setup]
            if not rs:
                continue
            ones = [base.get((cell, r["seed"])) for r in rs]
            hit_ratio = [r["hit_rate"] / o[0] for r, o in zip(rs, ones, strict=True) if o]
            ttft_ratio = [r["ttft_mean_s"] / o[1] for r, o in zip(rs, ones, strict=True) if o]
            lines.append(
                f"| {cell} | {setup} | {_range([r['hit_rate'] * 100 for r in rs], '.1f')} % "
                f"| {_range(hit_ratio, '.3f')} | {_range([r['ttft_mean_s'] for r in rs], '.3f')} "
                f"| {_spread(ttft_ratio)} | {_range([r['ttft_p90_s'] for r in rs], '.3f')} "
                f"| {sum(r['errors'] for r in rs)} |"
            )
    for r in rows:
        o = r.get("outage")
        if o and "before" in o:
            parts = [
                f"{w} {o[w]['hit_rate']:.1%} ({o[w]['requests']} requests)"
                for w in ("before", "during", "after")
                if w in o
            ]
            lines.append(
                f"outage {r['cell']} seed {r['seed']}: Redis down at {o['down_s']:.1f} s, back at "
                f"{o['back_s']:.1f} s; hit rate " + ", ".join(parts) + f"; errors {r['errors']}"
            )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        from sim.plots import pyplot

        plt = pyplot()
    except Exception:  # plotting is optional (kvgate[plots])
        print("matplotlib not installed: plot skipped", file=sys.stderr)
        return
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    setups = [s for s in SETUPS if any(r["setup"] == s for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(1, len(setups))
    for ax, (key, label) in zip(
        axes, (("hit_rate", "hit rate"), ("ttft_mean_s", "mean TTFT (s)")), strict=True
    ):
        for j, setup in enumerate(setups):
            xs, ys = [], []
            for i, cell in enumerate(cells):
                vals = [r[key] for r in rows if r["cell"] == cell and r["setup"] == setup]
                if vals:
                    xs.append(i + j * width)
                    ys.append(statistics.fmean(vals))
            ax.bar(xs, ys, width, label=setup)
        ax.set_xticks([i + width * (len(setups) - 1) / 2 for i in range(len(cells))])
        ax.set_xticklabels(cells, fontsize=8, rotation=25, ha="right")
        ax.set_title(label)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def simulate(args: argparse.Namespace) -> int:
    """The cells through simulated gateways (see the module docstring)."""
    from bench.regime import simulate as regime_sim
    from sim.engine.profiles import get_profile
    from sim.replay import ClosedLoop, Replay, SimSettings
    from sim.workloads import family

    fleet = FleetSpec(replicas=args.replicas, profile="demo")
    delays = [float(d) for d in args.sim_delays.split(",") if d]
    runs = [("one", 1, 0.0, True)] + [
        (f"shared, {d * 1000:g} ms", args.gateways, d, True) for d in delays
    ]
    runs.append(("nothing shared", args.gateways, 0.0, False))
    print(
        "| cell | seed | gateways | hit rate | mean TTFT s | max/mean |\n|---|---|---|---|---|---|"
    )
    for cell in _cells(args.cells):
        for seed in (int(s) for s in args.seeds.split(",")):
            sat = regime_sim.saturation_rps(cell, fleet, seed)
            chats = family.chats(cell.family(fleet, seed, sat))
            if cell.loop == "closed":
                trace, turns = family.closed_loop_trace(chats, fleet.block_tokens)
            else:
                arrivals = cell.open_arrivals(chats, sat, seed)
                trace, turns = family.chat_trace(chats, arrivals, fleet.block_tokens), ()
            # As the live clients spread: a closed loop's client keeps its chats on one
            # gateway; an open loop's requests go round-robin whatever `--spread` says.
            sticky = args.spread == "client" and cell.loop == "closed"
            spread = "session" if sticky else "request"
            for name, n, delay, shared in runs:
                settings = SimSettings(
                    replicas=fleet.replicas,
                    kv_event_delay_s=fleet.kv_event_delay_s,
                    gateways=n,
                    sync_delay_s=delay,
                    shared=shared,
                    spread=spread,
                )
                loop = ClosedLoop(cell.clients, turns) if cell.loop == "closed" else None
                result = Replay(
                    trace, "prefix-aware", get_profile(fleet.profile), settings, loop=loop
                ).run()
                f = regime_sim.figures(result)
                cells = (cell.name, seed, name, f"{f['hit_rate']:.1%}", f"{f['ttft_mean_s']:.3f}")
                print("| " + " | ".join(map(str, cells)), end="", flush=True)
                print(f" | {f['max_mean_share']:.2f} |", flush=True)
    return 0


async def _main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    setups = [s for s in args.setups.split(",") if s]
    if unknown := [s for s in setups if s not in SETUPS]:
        raise SystemExit(f"unknown setups {unknown}; known: {', '.join(SETUPS)}")
    jitters: list[int | None] = [int(j) for j in args.jitters.split(",") if j] or [None]
    todo = [
        (cell, seed, jitter, setup)
        for cell in _cells(args.cells)
        for seed in (int(s) for s in args.seeds.split(","))
        for jitter in (jitters if cell.loop == "open" else [None])
        for setup in setups
    ]
    rows = []
    for i, (cell, seed, jitter, setup) in enumerate(todo, 1):
        print(
            f"[fleet {time.strftime('%H:%M:%S')}] {i}/{len(todo)}: {cell.name} seed {seed} "
            + ("" if jitter is None else f"jitter {jitter} ")
            + setup,
            flush=True,
        )
        row = await _one(setup, cell, seed, args, out / "logs", jitter=jitter)
        rows.append(row)
        print(
            f"  hit {row['hit_rate']:.1%}, mean TTFT {row['ttft_mean_s']:.3f} s, "
            f"errors {row['errors']}" + (f", outage {row['outage']}" if "outage" in row else ""),
            flush=True,
        )
        if lags := lag_line(row.get("sharing")):
            print(f"  {lags}", flush=True)
    doc = {
        "command": ["python", "-m", "bench", "shared-state-fleet", *sys.argv[1:]],
        "params": vars(args),
        "rows": rows,
    }
    (out / "shared_state_fleet.json").write_text(json.dumps(doc, indent=1, default=str))
    print(table(rows))
    plot(rows, out / "shared_state_fleet.png")
    print(f"wrote {out / 'shared_state_fleet.json'}", file=sys.stderr)
    return 1 if any(r["errors"] for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench shared-state-fleet", description=__doc__)
    p.add_argument("--gateways", type=int, default=4)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument(
        "--setups", default="one,none,redis", help=f"comma-separated: {', '.join(SETUPS)}"
    )
    p.add_argument("--cells", default="p1.5-zipf-closed16,p1.5-hot-closed16")
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--spread", choices=["client", "request"], default="client")
    p.add_argument("--slowdown", type=float, default=1.0, help="engines this many times slower")
    p.add_argument("--outage-at", type=float, default=5.0, help="s into the run Redis is killed")
    p.add_argument("--outage-for", type=float, default=5.0, help="s it stays down")
    p.add_argument(
        "--jitters",
        default="",
        help="open loops: run each seed once per jitter seed (comma-separated), each request "
        "sent up to --jitter-ms later",
    )
    p.add_argument("--jitter-ms", type=float, default=5.0)
    p.add_argument("--out", default="out/bench/shared-state-fleet")
    p.add_argument(
        "--sim-delays", default="", help="simulate instead: sync delays (s), e.g. 0,0.005"
    )
    args = p.parse_args(argv)
    return simulate(args) if args.sim_delays else asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
