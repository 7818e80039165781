"""`make bench-routing`: the same workloads through the gateway once per routing policy.

Workloads: (a) synthetic multi-tenant, multi-turn chats (long shared system prompts), and
(b) a slice of the Mooncake conversation trace, its prompts synthesised from the block hash
ids (shared ids → shared tokens, sent as token-id prompts) and replayed open-loop, time
compressed. Each (workload, policy) run gets a fresh fleet of 8 emulated replicas and a fresh
gateway. Reported per run: prefix-cache hit rate as the replicas report it, client-side TTFT
p50/p90/p99, request share per replica (max/mean), throughput and errors — as a table,
`results.json` and `ttft_cdf.png` in the output directory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from sim.bench import workloads
from sim.bench.quality_report import plot_ttft_cdfs
from sim.bench.workloads import MODEL, Workload, synthetic
from sim.loadgen import RunStats, progress_ticker
from sim.percentile import percentile
from sim.processes import start_emulator, start_gateway
from sim.scrape import ReplicaReport, scrape_replicas

POLICIES = ("round-robin", "least-load", "session", "prefix-aware", "estimated-ttft")
MOONCAKE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def mooncake(trace: Path, count: int, rate_scale: float, max_output: int) -> Workload:
    """The trace slice with token-id prompts, as vLLM takes them."""
    return workloads.mooncake(trace, count, rate_scale, max_output, as_text=False)


async def run_one(w: Workload, policy: str, replicas: int, out: Path) -> dict[str, Any]:
    logs = out / "logs"
    emulator, urls = start_emulator(
        replicas,
        w.profile,
        MODEL,
        logs / f"emu-{w.name}-{policy}.log",
        speedup=w.speedup,
        extra=w.emulator_args,
    )
    try:
        gateway, gw = start_gateway(urls, policy, logs / f"gw-{w.name}-{policy}.log")
        try:
            stats, done = RunStats(), asyncio.Event()
            ticker = asyncio.create_task(
                progress_ticker(f"{w.name}/{policy}", stats, w.requests, done, 5.0)
            )
            t0 = time.monotonic()
            try:
                await w.run(gw, {}, stats)
            finally:
                done.set()
                await ticker
            wall = time.monotonic() - t0
            async with httpx.AsyncClient(timeout=10) as c:
                reports = await scrape_replicas(c, urls)
        finally:
            gateway.stop()
    finally:
        emulator.stop()
    return summarize(w, policy, stats, reports, wall)


def summarize(
    w: Workload, policy: str, stats: RunStats, reports: list[ReplicaReport], wall: float
) -> dict[str, Any]:
    ttfts = [r.ttft_s for r in stats.results if r.ttft_s is not None]
    queries = sum(r.prefix_queries for r in reports)
    shares = [r.requests for r in reports]
    mean = sum(shares) / len(shares) if shares else 0.0
    return {
        "workload": w.name,
        "policy": policy,
        "profile": w.profile,
        "speedup": w.speedup,
        "requests": len(stats.results),
        "errors": stats.errors,
        "hit_rate": sum(r.prefix_hits for r in reports) / queries if queries else 0.0,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "ttft_p99_s": percentile(ttfts, 99),
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else float("nan"),
        "max_mean_share": max(shares) / mean if mean else float("nan"),
        "requests_per_replica": shares,
        "throughput_rps": len(stats.results) / wall if wall else 0.0,
        "wall_s": wall,
        "ttfts_s": sorted(ttfts),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'workload':<10}{'policy':<16}{'hit rate':>9}{'TTFT p50':>10}{'p90':>9}{'p99':>9}"
        f"{'mean':>9}{'max/mean':>9}{'req/s':>7}{'errors':>7}"
    )
    for r in rows:
        print(
            f"{r['workload']:<10}{r['policy']:<16}{r['hit_rate']:>8.1%}"
            f"{r['ttft_p50_s']:>9.3f}s{r['ttft_p90_s']:>8.3f}s{r['ttft_p99_s']:>8.3f}s"
            f"{r['ttft_mean_s']:>8.3f}s{r['max_mean_share']:>9.2f}{r['throughput_rps']:>7.2f}"
            f"{r['errors']:>7}"
        )


def write_outputs(rows: list[dict[str, Any]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    plot_ttft_cdfs(rows, out / "ttft_cdf.png", lambda r: str(r["policy"]), "policy")


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    workloads = []
    if "synthetic" in args.workloads:
        workloads.append(synthetic(args.conversations, args.rate, args.seed))
    if "mooncake" in args.workloads:
        workloads.append(
            mooncake(Path(args.trace), args.trace_requests, args.rate_scale, args.max_output)
        )
    rows = []
    for w in workloads:
        for policy in args.policies.split(","):
            print(
                f"{w.name} × {policy}: {w.requests} requests, {args.replicas} replicas "
                f"({w.profile}, speedup {w.speedup})",
                file=sys.stderr,
                flush=True,
            )
            rows.append(await run_one(w, policy, args.replicas, Path(args.out)))
            write_outputs(rows, Path(args.out))
    print_table(rows)
    print(f"\nwrote {args.out}/results.json and {args.out}/ttft_cdf.png")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sim.bench_routing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workloads", default="synthetic,mooncake")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--conversations", type=int, default=64)
    p.add_argument("--rate", type=float, default=3.0, help="synthetic chats started per second")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--trace", default=str(MOONCAKE / "mooncake_fast25_conversation_trace.jsonl"))
    p.add_argument("--trace-requests", type=int, default=600)
    p.add_argument("--rate-scale", type=float, default=1.0, help="Mooncake time compression")
    p.add_argument("--max-output", type=int, default=16, help="cap on Mooncake output tokens")
    p.add_argument("--out", default="out/bench-routing")
    args = p.parse_args(argv)
    rows = asyncio.run(main_async(args))
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
