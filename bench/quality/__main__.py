"""`python -m bench quality`: routing quality of kvgate against peer routers.

The same workloads go through each router in turn — kvgate `prefix-aware` and `round-robin`,
SGLang's router (`cache_aware`), vllm-router (`cache_aware`, its default; its `kv_aware`
needs the engines' ZMQ KV events) and LiteLLM's proxy (`simple-shuffle`) — each in front of
a fresh emulated fleet (one `kvgate emulate` process, restarted between runs so every
router starts from cold caches). Workloads, at the rates `bench_routing` found to put
round-robin near saturation:

- synthetic: multi-turn chats of tenants that share long system prompts (`demo` profile);
- mooncake: the first N requests of the FAST'25 conversation trace at their own rate on
  `h100-llama3-8b` timing slowed 10× (the same as compressing time 10× against that engine),
  prompts synthesised from the hash ids as text (shared ids → shared words), since SGLang's
  router refuses token-id prompts.

Per router: client-side TTFT p50/p90/p99/mean and inter-chunk ITL p50/p99, the prefix hit
rate the replicas report (deltas of `vllm:prefix_cache_hits_total / queries_total`), each
replica's request share, errors; written to `OUT/quality.json` (with peer versions and
exact command lines) and `OUT/quality_ttft_cdf.png`, and printed with the issue's targets.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench import DEFAULT_TRACES, TRACES_HELP
from bench.peers import PeerInstall, ensure_peer, start_peer
from bench.quality import report
from bench.quality.workloads import MODEL, Workload, mooncake, synthetic
from sim.loadgen import RunStats, progress_ticker
from sim.processes import start_emulator
from sim.scrape import ReplicaReport, scrape_replicas

ROUTERS = (
    "kvgate:prefix-aware",
    "kvgate:round-robin",
    "sglang-router:cache_aware",
    "vllm-router:cache_aware",
    "litellm:simple-shuffle",
)
MOONCAKE_TRACE = "mooncake_fast25_conversation_trace.jsonl"  # in --traces DIR


async def run_router(
    w: Workload,
    install: PeerInstall,
    policy: str,
    replicas: int,
    out: Path,
    *,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One (workload, router) run on a fresh fleet; returns the report row."""
    logs = out / "logs"
    label = f"{install.name}-{policy}"
    emulator, urls = await asyncio.to_thread(
        start_emulator,
        replicas,
        w.profile,
        MODEL,
        logs / f"emu-{w.name}-{label}.log",
        speedup=w.speedup,
        extra=w.emulator_args,
    )
    try:
        peer = await asyncio.to_thread(
            start_peer,
            install,
            worker_urls=urls,
            model=MODEL,
            policy=policy,
            out_dir=logs,
            extra_args=extra_args,
        )
        with peer:
            async with httpx.AsyncClient(timeout=10) as client:
                before = await scrape_replicas(client, urls)
                stats, done = RunStats(), asyncio.Event()
                ticker = asyncio.create_task(
                    progress_ticker(f"{w.name}/{label}", stats, w.requests, done, 10.0)
                )
                t0 = time.monotonic()
                try:
                    await w.run(peer.url, peer.headers, stats)
                finally:
                    done.set()
                    await ticker
                wall = time.monotonic() - t0
                after = await scrape_replicas(client, urls)
            command = peer.command
    finally:
        emulator.stop()
    reports = _deltas(before, after)
    return summarize(
        w, install, policy=policy, command=command, stats=stats, reports=reports, wall=wall
    )


def _deltas(before: list[ReplicaReport], after: list[ReplicaReport]) -> list[ReplicaReport]:
    return [
        dataclasses.replace(
            a,
            requests=a.requests - b.requests,
            prefix_queries=a.prefix_queries - b.prefix_queries,
            prefix_hits=a.prefix_hits - b.prefix_hits,
            preemptions=a.preemptions - b.preemptions,
        )
        for b, a in zip(before, after, strict=True)
    ]


def summarize(
    w: Workload,
    install: PeerInstall,
    *,
    policy: str,
    command: list[str],
    stats: RunStats,
    reports: list[ReplicaReport],
    wall: float,
) -> dict[str, Any]:
    ok = [r for r in stats.results if not r.error]
    ttfts = sorted(r.ttft_s for r in ok if r.ttft_s is not None)
    itls = sorted(g for r in ok for g in r.itls_s)
    queries = sum(r.prefix_queries for r in reports)
    shares = [r.requests for r in reports]
    mean = sum(shares) / len(shares) if shares else 0.0
    errors = [r.error for r in stats.results if r.error]
    return {
        "workload": w.name,
        "router": install.name,
        "version": install.version,
        "policy": policy,
        "command": command,
        "profile": w.profile,
        "speedup": w.speedup,
        "requests": len(stats.results),
        "errors": len(errors),
        "error_samples": errors[:3],
        "hit_rate": sum(r.prefix_hits for r in reports) / queries if queries else 0.0,
        **report.ttft_itl_percentiles(ttfts, itls),
        "max_mean_share": max(shares) / mean if mean else float("nan"),
        "requests_per_replica": shares,
        "preemptions": sum(r.preemptions for r in reports),
        "throughput_rps": len(stats.results) / wall if wall else 0.0,
        "wall_s": wall,
        "ttfts_s": ttfts,
    }


def _workloads(args: argparse.Namespace) -> list[Workload]:
    out = []
    if "synthetic" in args.workloads:
        out.append(synthetic(args.conversations, args.rate, args.seed))
    if "mooncake" in args.workloads:
        out.append(
            mooncake(
                args.traces / MOONCAKE_TRACE, args.trace_requests, args.rate_scale, args.max_output
            )
        )
    return out


async def main_async(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """Every (workload, router) run; returns the report rows and the runs that failed."""
    routers = [tuple(r.split(":", 1)) for r in args.routers.split(",")]
    installs = {name: ensure_peer(name) for name in dict.fromkeys(n for n, _ in routers)}
    out = Path(args.out)
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    started = time.monotonic()
    for w in _workloads(args):
        for name, policy in routers:
            print(
                f"{w.name} × {name} {policy}: {w.requests} requests, {args.replicas} replicas "
                f"({w.profile}, speedup {w.speedup}); {time.monotonic() - started:.0f} s so far",
                file=sys.stderr,
                flush=True,
            )
            extra = (
                ("--config", args.kvgate_config) if name == "kvgate" and args.kvgate_config else ()
            )
            try:
                row = await run_router(
                    w, installs[name], policy, args.replicas, out, extra_args=extra
                )
            except (RuntimeError, TimeoutError, OSError, httpx.HTTPError) as exc:
                # One router that will not start must not cost the others' results.
                failed.append(f"{w.name} × {name} {policy}: {exc!r}"[:2000])
                print(f"  FAILED: {failed[-1]}", file=sys.stderr, flush=True)
            else:
                rows.append(row)
            report.write_outputs(rows, installs, vars(args), out, failed)
    report.print_table(rows)
    report.print_targets(rows)
    print(f"\nwrote {out}/quality.json and {out}/quality_ttft_cdf.png")
    return rows, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--routers", default=",".join(ROUTERS), help="NAME:POLICY,... to compare")
    p.add_argument("--workloads", default="synthetic,mooncake")
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--conversations", type=int, default=64, help="synthetic chats")
    p.add_argument("--rate", type=float, default=3.0, help="synthetic chats started per second")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--traces", type=Path, default=DEFAULT_TRACES, metavar="DIR", help=TRACES_HELP)
    p.add_argument("--trace-requests", type=int, default=600, help="first N trace requests")
    p.add_argument("--rate-scale", type=float, default=1.0, help="Mooncake time compression")
    p.add_argument("--max-output", type=int, default=16, help="cap on Mooncake output tokens")
    p.add_argument("--kvgate-config", help="config file for kvgate (default: built-in defaults)")
    p.add_argument("--quick", action="store_true", help="smoke run: 24 chats, 150 trace requests")
    p.add_argument("--out", default="out/bench")
    args = p.parse_args(argv)
    if args.quick:
        args.conversations, args.trace_requests = 24, 150
    rows, failed = asyncio.run(main_async(args))
    return 1 if failed or any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
