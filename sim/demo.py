"""`kvgate demo`: emulated replicas + the gateway + a multi-turn chat workload, per policy.

For each policy the demo runs one live experiment (`sim.live.experiment`): a fresh fleet of
emulated replicas and a gateway (child processes), the same built-in closed-loop chats sent
through it, progress on stderr; it reports the replicas' own prefix-cache hit rates,
per-replica request counts and client-side TTFT. Results go to `summary.json` and, with
matplotlib installed (`kvgate[plots]`), `ttft_cdf.png` in the output directory.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sim.live.experiment import ExperimentResult, Fleet, closed_loop, kvgate_router, run_experiment
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot
from sim.workloads import closed_loop_chats

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


def summary(policy: str, result: ExperimentResult) -> dict[str, Any]:
    """One policy's row of `summary.json`."""
    return {
        "policy": policy,
        "requests": len(result.results),
        "errors": len(result.errors),
        "wall_s": round(result.wall_s, 2),
        "hit_rate": result.hit_rate,
        "ttft_p50_s": result.ttft_p50_s,
        "ttft_p90_s": result.ttft_p90_s,
        "ttft_p99_s": result.ttft_p99_s,
        "ttft_mean_s": result.ttft_mean_s,
        "replicas": [
            {
                "url": r.url,
                "requests": r.requests,
                "hit_rate": round(r.hit_rate, 4),
                "preemptions": r.preemptions,
            }
            for r in result.replicas
        ],
        "ttfts_s": result.ttfts_s,
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


def write_outputs(summaries: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    """`summary.json` always; `ttft_cdf.png` unless matplotlib is missing (one line says so)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.json"
    path.write_bytes(orjson.dumps(list(summaries), option=orjson.OPT_INDENT_2))
    try:
        return [path, plot_ttft_cdf(summaries, out_dir / "ttft_cdf.png")]
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
        return [path]


def plot_ttft_cdf(summaries: Sequence[dict[str, Any]], path: Path) -> Path:
    plt = pyplot()
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def run_demo(settings: DemoSettings) -> list[dict[str, Any]]:
    conversations = closed_loop_chats(
        seed=settings.seed,
        conversations=settings.conversations,
        rate_per_s=settings.rate_per_s,
    )
    workload = closed_loop("chats", DEMO_MODEL, conversations)
    fleet = Fleet(settings.replicas, settings.profile, DEMO_MODEL)
    print(
        f"kvgate demo: {settings.replicas} emulated replicas (profile {settings.profile!r}), "
        f"{len(conversations)} conversations, {workload.requests} turns, policies "
        f"{', '.join(settings.policies)}",
        file=sys.stderr,
        flush=True,
    )
    summaries = []
    for policy in settings.policies:
        result = await run_experiment(
            fleet,
            kvgate_router(policy),
            workload,
            label=policy,
            log_dir=settings.out_dir / "logs",
            progress_every_s=2.0,
        )
        summaries.append(summary(policy, result))
    print_report(summaries)
    paths = write_outputs(summaries, settings.out_dir)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return summaries
