"""`kvgate demo`: emulated replicas + the gateway + a multi-turn chat workload, per policy.

For each policy the demo starts a fresh fleet of emulated replicas and a gateway (child
processes), replays the same built-in workload through it, shows progress, and reports the
replicas' own prefix-cache hit rates, per-replica request counts and client-side TTFT.
Results go to `summary.json` and `ttft_cdf.png` in the output directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from sim.loadgen import RunStats, run_conversations
from sim.percentile import percentile
from sim.processes import start_emulator, start_gateway
from sim.scrape import ReplicaReport, scrape_replicas
from sim.workload import Conversation, multi_tenant_chats

DEMO_POLICIES = ("round-robin", "session", "prefix-aware")
DEMO_MODEL = "kvgate-demo"


@dataclass(frozen=True, slots=True)
class DemoSettings:
    replicas: int = 4
    policies: tuple[str, ...] = DEMO_POLICIES
    profile: str = "demo"
    out_dir: Path = Path("out/demo")
    seed: int = 7
    conversations: int = 40
    rate_per_s: float = 2.0


def session_header(conv: Conversation) -> dict[str, str]:
    return {"x-session-id": conv.id}


async def _progress(policy: str, stats: RunStats, total: int, done: asyncio.Event) -> None:
    start = time.monotonic()
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 1.0)
        ttfts = [r.ttft_s for r in stats.results if r.ttft_s is not None]
        p50 = percentile(ttfts, 50) * 1000 if ttfts else float("nan")
        print(
            f"  [{policy}] {time.monotonic() - start:5.1f}s  {len(stats.results):4d}/{total} "
            f"turns  in flight {stats.in_flight:3d}  TTFT p50 {p50:7.1f} ms  errors "
            f"{stats.errors}",
            file=sys.stderr,
            flush=True,
        )


async def run_policy(
    settings: DemoSettings, policy: str, conversations: list[Conversation]
) -> dict[str, Any]:
    logs = settings.out_dir / "logs"
    emulator, urls = start_emulator(
        settings.replicas, settings.profile, DEMO_MODEL, logs / f"emulator-{policy}.log"
    )
    try:
        gateway, gw_url = start_gateway(urls, policy, logs / f"gateway-{policy}.log")
        try:
            stats = RunStats()
            total = sum(len(c.user_turns) for c in conversations)
            done = asyncio.Event()
            ticker = asyncio.create_task(_progress(policy, stats, total, done))
            started = time.monotonic()
            try:
                await run_conversations(gw_url, DEMO_MODEL, conversations, stats, session_header)
            finally:
                done.set()
                await ticker
            wall = time.monotonic() - started
            async with httpx.AsyncClient(timeout=10) as client:
                reports = await scrape_replicas(client, urls)
        finally:
            gateway.stop()
    finally:
        emulator.stop()
    return _summary(policy, stats, reports, wall)


def _summary(
    policy: str, stats: RunStats, reports: list[ReplicaReport], wall: float
) -> dict[str, Any]:
    ttfts = [r.ttft_s for r in stats.results if r.ttft_s is not None]
    queries = sum(r.prefix_queries for r in reports)
    hits = sum(r.prefix_hits for r in reports)
    return {
        "policy": policy,
        "requests": len(stats.results),
        "errors": stats.errors,
        "wall_s": round(wall, 2),
        "hit_rate": hits / queries if queries else 0.0,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "ttft_p99_s": percentile(ttfts, 99),
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else float("nan"),
        "replicas": [
            {
                "url": r.url,
                "requests": r.requests,
                "hit_rate": round(r.hit_rate, 4),
                "preemptions": r.preemptions,
            }
            for r in reports
        ],
        "ttfts_s": sorted(ttfts),
    }


def print_report(summaries: Sequence[dict[str, Any]]) -> None:
    print()
    print(
        f"{'policy':<14}{'requests':>9}{'errors':>7}{'hit rate':>10}{'TTFT p50':>11}"
        f"{'p90':>9}{'p99':>9}   requests per replica"
    )
    for s in summaries:
        per = " ".join(f"{r['requests']:>4}" for r in s["replicas"])
        print(
            f"{s['policy']:<14}{s['requests']:>9}{s['errors']:>7}{s['hit_rate']:>9.1%}"
            f"{s['ttft_p50_s'] * 1000:>9.0f}ms{s['ttft_p90_s'] * 1000:>7.0f}ms"
            f"{s['ttft_p99_s'] * 1000:>7.0f}ms   {per}"
        )
    print(
        "\nhit rate: prefix-cache hits / queries in tokens, read from the replicas' own "
        "/metrics; TTFT measured by the client through the gateway."
    )


def write_outputs(summaries: Sequence[dict[str, Any]], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_bytes(
        orjson.dumps(list(summaries), option=orjson.OPT_INDENT_2)
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in summaries:
        xs = s["ttfts_s"]
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{s['policy']} (hit rate {s['hit_rate']:.0%})")
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("kvgate demo: TTFT by routing policy")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "ttft_cdf.png", dpi=110)
    plt.close(fig)


async def run_demo(settings: DemoSettings) -> list[dict[str, Any]]:
    conversations = multi_tenant_chats(
        seed=settings.seed,
        conversations=settings.conversations,
        rate_per_s=settings.rate_per_s,
    )
    turns = sum(len(c.user_turns) for c in conversations)
    print(
        f"kvgate demo: {settings.replicas} emulated replicas (profile {settings.profile!r}), "
        f"{len(conversations)} conversations, {turns} turns, policies "
        f"{', '.join(settings.policies)}",
        file=sys.stderr,
        flush=True,
    )
    summaries = []
    for policy in settings.policies:
        summaries.append(await run_policy(settings, policy, conversations))
    print_report(summaries)
    write_outputs(summaries, settings.out_dir)
    print(f"wrote {settings.out_dir / 'summary.json'} and {settings.out_dir / 'ttft_cdf.png'}")
    return summaries
