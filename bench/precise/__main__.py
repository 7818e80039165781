"""`python -m bench precise [--quick]`: see `bench.precise`. Writes
`out/bench/precise/{precise.json,precise.png}` and prints a table."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.precise import report
from bench.precise.run import run
from bench.regime.grid import CLIENTS, Cell, FleetSpec

POLICIES = ("prefix-aware", "precise-prefix")


def cells(quick: bool, only: str = "", clients: int = CLIENTS) -> list[Cell]:
    """The regime map's capacity-pressure cells (closed loop of 16 clients), or those named
    in `only` (comma-separated cell names)."""
    if quick:
        return [Cell(1.5, "hot", "closed", clients=clients)]
    every = [
        Cell(p, pop, "closed", clients=clients)
        for p in (1.5, 4.0)
        for pop in ("uniform", "zipf", "hot")
    ]
    names = {n for n in only.split(",") if n}
    return [c for c in every if c.name in names] if names else every


def _read(path: str) -> str:
    return Path(path).read_text() if path else ""


def _log(text: str) -> None:
    print(f"[precise {time.strftime('%H:%M:%S')}] {text}", flush=True)


async def _main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    spec = FleetSpec(replicas=args.replicas, profile=args.profile)
    rows: list[dict[str, Any]] = []
    policies = [p for p in args.policies.split(",") if p]
    extra = await asyncio.to_thread(_read, args.config_extra)
    seeds = range(1, args.repeats + 1)
    chosen = cells(args.quick, args.cells, args.clients)
    todo = [(c, s, p) for c in chosen for s in seeds for p in policies]
    for i, (cell, seed, policy) in enumerate(todo, 1):
        _log(f"{i}/{len(todo)}: {cell.name} seed {seed} × {policy}")
        row = await run(
            cell,
            spec,
            policy,
            seed=seed,
            slowdown=args.slowdown,
            log_dir=out / "logs",
            config_extra=extra,
            gateways=args.gateways,
            events=not args.no_events,
            redis=args.redis,
            spread=args.spread,
            workers=args.workers,
        )
        rows.append(row)
        g = row["precise"]
        share = g["exact_share"]
        _log(
            f"  mean TTFT {row['ttft_mean_s']:.3f} s, hit {row['hit_rate']:.1%}, "
            f"errors {row['errors']}, exact predictions "
            + (f"{share:.1%} of {g['requests']}" if share is not None else "n/a")
        )
    doc = {
        "command": ["python", "-m", "bench", "precise", *sys.argv[1:]],
        "fleet": {"replicas": spec.replicas, "profile": spec.profile, "kv_tokens": spec.kv_tokens},
        "slowdown": args.slowdown,
        "gateways": args.gateways,
        "workers": args.workers,
        "spread": args.spread,
        "events": not args.no_events,
        "redis": args.redis,
        "rows": rows,
        "summary": report.summary(rows),
    }
    (out / "precise.json").write_text(json.dumps(doc, indent=1))
    print(report.table(doc["summary"]))
    report.plot(doc["summary"], out / "precise.png")
    _log(f"wrote {out / 'precise.json'}")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench precise", description=__doc__)
    p.add_argument("--quick", action="store_true", help="one cell (pressure 1.5, hot tenant)")
    p.add_argument("--repeats", type=int, default=1, help="seeds per cell (default 1)")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--profile", default="demo", help="emulator engine profile (default demo)")
    p.add_argument("--slowdown", type=float, default=1.0, help="engines this many times slower")
    p.add_argument("--out", default="out/bench/precise")
    p.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="kvgate gateways sharing only the engines' events (or --redis), which the "
        "clients spread over themselves (--spread)",
    )
    p.add_argument(
        "--spread",
        choices=["client", "request"],
        default="client",
        help="client: client i sends to gateway i mod n (default); request: every request "
        "to the next gateway",
    )
    p.add_argument(
        "--workers", type=int, default=1, help="kvgate serve --workers N for each gateway"
    )
    p.add_argument(
        "--no-events", action="store_true", help="the fleet publishes no KV-cache events"
    )
    p.add_argument(
        "--redis",
        action="store_true",
        help="the gateways share routing state through a fresh redis-server (state: redis)",
    )
    p.add_argument("--clients", type=int, default=CLIENTS, help="closed-loop clients")
    p.add_argument("--cells", default="", help="cell names, comma-separated (default: all)")
    p.add_argument("--policies", default=",".join(POLICIES), help="kvgate policies compared")
    p.add_argument(
        "--config-extra", default="", help="YAML appended to the gateway's config (profiles...)"
    )
    return asyncio.run(_main(p.parse_args(argv)))
