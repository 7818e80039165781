"""Report of `bench quality`: percentiles, the table, the issue's targets, JSON and PNG."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.peers import PeerInstall
from routing.percentile import percentile
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

KVGATE = ("kvgate", "prefix-aware")
SGLANG = ("sglang-router", "cache_aware")
ROUND_ROBIN = ("kvgate", "round-robin")
# Issue 6's targets: kvgate / peer at most these, for mean and p90 TTFT.
TTFT_RATIO_VS_SGLANG = 0.8
TTFT_RATIO_VS_ROUND_ROBIN = 0.5


def ttft_itl_percentiles(ttfts: list[float], itls: list[float]) -> dict[str, float]:
    return {
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "ttft_p99_s": percentile(ttfts, 99),
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else math.nan,
        "itl_p50_s": percentile(itls, 50),
        "itl_p99_s": percentile(itls, 99),
    }


def label(row: dict[str, Any]) -> str:
    return f"{row['router']} {row['policy']}"


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'workload':<10}{'router':<28}{'hit':>7}{'TTFT p50':>9}{'p90':>8}{'p99':>8}"
        f"{'mean':>8}{'ITL p50':>9}{'p99':>8}{'max/mean':>9}{'req/s':>7}{'err':>5}"
    )
    for r in rows:
        print(
            f"{r['workload']:<10}{label(r):<28}{r['hit_rate']:>6.1%}"
            f"{r['ttft_p50_s']:>8.3f}s{r['ttft_p90_s']:>7.3f}s{r['ttft_p99_s']:>7.3f}s"
            f"{r['ttft_mean_s']:>7.3f}s{r['itl_p50_s'] * 1e3:>7.1f}ms{r['itl_p99_s'] * 1e3:>6.0f}ms"
            f"{r['max_mean_share']:>9.2f}{r['throughput_rps']:>7.2f}{r['errors']:>5}"
        )


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target of the issue per workload: the measured ratio (or hit rates) and verdict."""
    out = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        by = {(r["router"], r["policy"]): r for r in rows if r["workload"] == workload}
        ours = by.get(KVGATE)
        if ours is None:
            continue
        for peer, bound in (
            (SGLANG, TTFT_RATIO_VS_SGLANG),
            (ROUND_ROBIN, TTFT_RATIO_VS_ROUND_ROBIN),
        ):
            if peer not in by:
                continue
            for stat in ("ttft_mean_s", "ttft_p90_s"):
                ratio = ours[stat] / by[peer][stat]
                out.append(
                    {
                        "workload": workload,
                        "target": f"{stat} kvgate/{' '.join(peer)} <= {bound}",
                        "value": ratio,
                        "met": ratio <= bound,
                    }
                )
        if SGLANG in by:
            out.append(
                {
                    "workload": workload,
                    "target": "hit_rate kvgate >= sglang-router cache_aware",
                    "value": ours["hit_rate"] - by[SGLANG]["hit_rate"],
                    "met": ours["hit_rate"] >= by[SGLANG]["hit_rate"],
                }
            )
    return out


def print_targets(rows: list[dict[str, Any]]) -> None:
    print("\ntargets (kvgate prefix-aware vs peer, same run):")
    for t in targets(rows):
        value = f"{t['value']:+.1%} points" if "hit_rate" in t["target"] else f"{t['value']:.2f}"
        verdict = "met" if t["met"] else "MISSED"
        print(f"  {t['workload']:<10} {t['target']:<52} {value:>14}  {verdict}")


def write_outputs(
    rows: list[dict[str, Any]],
    installs: dict[str, PeerInstall],
    settings: dict[str, Any],
    out: Path,
    failed: list[str],
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "settings": settings,
        "peers": {n: {"version": i.version, "python": str(i.python)} for n, i in installs.items()},
        "rows": rows,
        "failed": failed,
        "targets": targets(rows),
    }
    (out / "quality.json").write_bytes(
        orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    )
    try:
        plot_ttft_cdfs(rows, out / "quality_ttft_cdf.png", label, "router")
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)


def plot_ttft_cdfs(
    rows: list[dict[str, Any]], path: Path, name: Callable[[dict[str, Any]], str], by: str
) -> None:
    """One TTFT CDF panel per workload, a curve per row (`name(row)` and its hit rate)."""
    plt = pyplot()

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(6.5 * len(workloads), 4.5), squeeze=False)
    for ax, wl in zip(axes[0], workloads, strict=True):
        for r in (r for r in rows if r["workload"] == wl):
            xs = r["ttfts_s"]
            if xs:
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                ax.step(xs, ys, where="post", label=f"{name(r)} (hit {r['hit_rate']:.0%})")
        ax.set_xscale("log")
        ax.set_title(f"{wl}: TTFT CDF by {by}")
        ax.set_xlabel("time to first token (s, log)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
