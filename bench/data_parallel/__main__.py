"""Data-parallel ranks as routing targets, against engine-internal balancing and a peer.

`python -m bench dp [--repeats 3] [--quick] [--out out/bench/dp]`: two emulated engines of four
data-parallel ranks each (SGLang-speaking, as sglang-router's `--dp-aware` names ranks in the
body only; `--engine vllm`: the header, without the peer), the quality bench's multi-tenant
chats with shared system prompts (closed loop), each router on a fresh fleet, all routers in
turn within each repeat: kvgate naming ranks (found from the engines), kvgate with `dp_size=1`
(the engine balances, least loaded), sglang-router `cache_aware --dp-aware`. Reports the
replicas' prefix-cache hit rate and client mean TTFT per router, and the ratios over the
repeats' means; writes `dp.json` to `--out`. `--sim`: the same shape in the offline simulator
instead (`bench.data_parallel.simulated`; seconds, no processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.data_parallel.simulated import simulate
from bench.peers import ensure_peer, peer_router
from sim.live.experiment import (
    Fleet,
    Router,
    RouterFactory,
    RouterSite,
    closed_loop,
    run_experiment,
)
from sim.live.processes import start_gateway
from sim.workloads import closed_loop_chats

MODEL = "kvgate-bench"
RANKED, UNRANKED, PEER = "kvgate ranks", "kvgate no ranks", "sglang-router --dp-aware"
SETTLE_S = 1.0  # a few scrapes (and the ranks found) before the first decision


def kvgate(policy: str, engine: str, dp_size: int | None) -> RouterFactory:
    """`kvgate serve` with each replica as `--backend URL,engine=E[,dp_size=N]`."""

    @contextlib.contextmanager
    def start(site: RouterSite) -> Iterator[Router]:
        extra = f",dp_size={dp_size}" if dp_size is not None else ""
        backends = [f"{u},engine={engine}{extra}" for u in site.replica_urls]
        log = site.log_dir / f"{site.tag}-gateway.log"
        process, url = start_gateway(backends, policy, log)
        with process:
            time.sleep(SETTLE_S)
            yield Router(url, {}, tuple(process.command))

    return start


def routers(policy: str, engine: str) -> dict[str, RouterFactory]:
    out = {RANKED: kvgate(policy, engine, None), UNRANKED: kvgate(policy, engine, 1)}
    if engine == "sglang":
        out[PEER] = peer_router(ensure_peer("sglang-router"), "cache_aware", ("--dp-aware",))
    return out


async def run(args: argparse.Namespace, logs: Path) -> dict[str, list[dict[str, object]]]:
    fleet_args: tuple[str, ...] = ("--data-parallel-size", str(args.ranks))
    fleet_args += ("--engine", args.engine, "--num-gpu-blocks", str(args.blocks))
    fleet = Fleet(args.replicas, "demo", MODEL, extra_args=fleet_args)
    runs: dict[str, list[dict[str, object]]] = {}
    factories = routers(args.policy, args.engine)
    for repeat in range(args.repeats):
        for name, factory in factories.items():
            chats = closed_loop_chats(
                seed=args.seed + repeat, tenants=args.tenants, conversations=args.conversations,
                turns=4, system_tokens=args.system_tokens, rate_per_s=args.rate,
            )  # fmt: skip
            label = f"{name.replace(' ', '_')}-r{repeat}"
            print(f"[repeat {repeat + 1}/{args.repeats}] {name}", file=sys.stderr, flush=True)
            result = await run_experiment(
                fleet, factory, closed_loop("chats", MODEL, chats), label=label, log_dir=logs
            )
            runs.setdefault(name, []).append(result.figures())
    return runs


def summary(runs: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    def mean(name: str, key: str) -> float:
        return statistics.fmean(float(r[key]) for r in runs[name])  # type: ignore[arg-type]

    out: dict[str, object] = {
        name: {"hit_rate": mean(name, "hit_rate"), "ttft_mean_s": mean(name, "ttft_mean_s")}
        for name in runs
    }
    out["hit_rate_ratio_vs_no_ranks"] = mean(RANKED, "hit_rate") / mean(UNRANKED, "hit_rate")
    out["ttft_ratio_vs_no_ranks"] = mean(RANKED, "ttft_mean_s") / mean(UNRANKED, "ttft_mean_s")
    if PEER in runs:
        out["ttft_ratio_vs_peer"] = mean(RANKED, "ttft_mean_s") / mean(PEER, "ttft_mean_s")
        out["hit_rate_ratio_vs_peer"] = mean(RANKED, "hit_rate") / mean(PEER, "hit_rate")
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench dp", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--replicas", type=int, default=2, help="engines (default 2)")
    p.add_argument("--ranks", type=int, default=4, help="data-parallel ranks each (default 4)")
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    p.add_argument("--blocks", type=int, default=320, help="KV blocks of 16 per rank (320)")
    p.add_argument("--tenants", type=int, default=16)
    p.add_argument("--conversations", type=int, default=64)
    p.add_argument("--system-tokens", type=int, default=1500)
    p.add_argument("--rate", type=float, default=3.0, help="chats started/s (default 3)")
    p.add_argument("--policy", default="prefix-aware", help="kvgate's policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="1 repeat of 24 chats")
    p.add_argument("--sim", action="store_true", help="replay in the simulator, not live")
    p.add_argument("--clients", type=int, default=6, help="--sim: closed-loop users (6)")
    p.add_argument("--out", default="out/bench/dp")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.conversations = 1, 24
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    runs = simulate(args) if args.sim else asyncio.run(run(args, logs))
    report = {
        "started_utc": when,
        "wall_s": time.monotonic() - started,
        "cores": os.cpu_count(),
        "command": ["python", "-m", "bench", "dp", *(argv or sys.argv[1:])],
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "summary": summary(runs),
        "runs": runs,
    }
    (out / ("dp-sim.json" if args.sim else "dp.json")).write_text(
        json.dumps(report, indent=2, default=str) + "\n"
    )
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
