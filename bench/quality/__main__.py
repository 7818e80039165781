"""`python -m bench quality`: routing quality of kvgate against peer routers.

The same workloads go through each router in turn — kvgate `prefix-aware` and `round-robin`,
SGLang's router and vllm-router (`cache_aware`), LiteLLM's proxy (`simple-shuffle`) — each in
front of a fresh emulated fleet (one `kvgate emulate` process, restarted so every router
starts cold), one live experiment each (`sim.live.experiment`); `make bench-routing` runs
kvgate's policies as the routers (`--routers kvgate:round-robin,kvgate:session,...`).
Workloads, at rates that put round-robin near saturation: synthetic, closed-loop multi-turn
chats of tenants sharing long system prompts (`demo` profile); mooncake, the first N requests
of the FAST'25 conversation trace (`--traces DIR`) at their own rate on `h100-llama3-8b`
slowed 10×, prompts synthesised as text from the hash ids (SGLang's router refuses token ids).

Per router: client TTFT p50/p90/p99/mean, inter-chunk ITL p50/p99, the replicas' prefix hit
rate, each replica's request share, errors; written to `OUT/quality.json` (with peer versions
and exact command lines) and `OUT/quality_ttft_cdf.png`, and printed against the targets.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench import DEFAULT_TRACES, TRACES_HELP, trace_file
from bench.peers import PeerInstall, ensure_peer, peer_router
from bench.quality import report
from bench.quality.workloads import mooncake, synthetic
from sim.live.experiment import ExperimentResult, Fleet, Workload, run_experiment

ROUTERS = (
    "kvgate:prefix-aware",
    "kvgate:round-robin",
    "sglang-router:cache_aware",
    "vllm-router:cache_aware",
    "litellm:simple-shuffle",
)
MOONCAKE_TRACE = "mooncake_fast25_conversation_trace.jsonl"  # in --traces DIR


def row(
    w: Workload, fleet: Fleet, install: PeerInstall, policy: str, r: ExperimentResult
) -> dict[str, Any]:
    """One (workload, router) row of the report."""
    ttfts, itls = r.ttfts_s, r.itls_s
    return {
        "workload": w.name,
        "router": install.name,
        "version": install.version,
        "policy": policy,
        "command": list(r.router.command),
        "profile": fleet.profile,
        "speedup": fleet.speedup,
        "requests": len(r.results),
        "errors": len(r.errors),
        "error_samples": r.errors[:3],
        "hit_rate": r.hit_rate,
        **report.ttft_itl_percentiles(ttfts, itls),
        "max_mean_share": r.max_mean_share,
        "requests_per_replica": r.requests_per_replica,
        "preemptions": sum(x.preemptions for x in r.replicas),
        "throughput_rps": r.throughput_rps,
        "wall_s": r.wall_s,
        "ttfts_s": ttfts,
    }


def _workloads(args: argparse.Namespace) -> list[tuple[Workload, Fleet]]:
    out = []
    if "synthetic" in args.workloads:
        out.append(synthetic(args.conversations, args.rate, args.seed, args.replicas))
    if "mooncake" in args.workloads:
        trace = trace_file(args.traces, MOONCAKE_TRACE)
        out.append(
            mooncake(trace, args.trace_requests, args.rate_scale, args.max_output, args.replicas)
        )
    return out


async def main_async(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """Every (workload, router) run; returns the report rows and the runs that failed."""
    routers = [tuple(r.split(":", 1)) for r in args.routers.split(",")]
    installs = {name: ensure_peer(name) for name in dict.fromkeys(n for n, _ in routers)}
    out = Path(args.out)
    settings = {**vars(args), "traces": str(args.traces)}  # as JSON
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    started = time.monotonic()
    for w, fleet in _workloads(args):
        for name, policy in routers:
            print(
                f"{w.name} × {name} {policy}: {w.requests} requests, {fleet.replicas} replicas "
                f"({fleet.profile}, speedup {fleet.speedup}); "
                f"{time.monotonic() - started:.0f} s so far",
                file=sys.stderr,
                flush=True,
            )
            extra = (
                ("--config", args.kvgate_config) if name == "kvgate" and args.kvgate_config else ()
            )
            try:
                result = await run_experiment(
                    fleet,
                    peer_router(installs[name], policy, extra),
                    w,
                    label=f"{w.name}/{name}-{policy}",
                    log_dir=out / "logs",
                    progress_every_s=10.0,
                )
            except (RuntimeError, TimeoutError, OSError, httpx.HTTPError) as exc:
                # One router that will not start must not cost the others' results.
                failed.append(f"{w.name} × {name} {policy}: {exc!r}"[:2000])
                print(f"  FAILED: {failed[-1]}", file=sys.stderr, flush=True)
            else:
                rows.append(row(w, fleet, installs[name], policy, result))
            report.write_outputs(rows, installs, settings, out, failed)
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
