"""The real-vLLM pressure bench's figures, tables, `vllm-pressure.json` and plots.

A run is one (cell, router, repeat): the figures of `figures`, with `mode: "vllm"` and the
repeat's workload `seed`, so the regime map's ratios apply to the runs as they are
(`bench.regime.report.ratios`: kvgate `prefix-aware` ÷ sglang-router `cache_aware` and ÷
kvgate `round-robin` of the figures' means over the repeats, the per-repeat mean ratios'
range, the hit rate difference in points), and so do its heat maps. A row is one (cell,
router) over its repeats: every figure the mean of its runs', plus the spread of the mean
TTFT (`ttft_mean_min_s`, `ttft_mean_max_s`). `write_bars` draws every row's mean and p90
TTFT per cell, annotated with its hit rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sim.live.experiment import ExperimentResult
from sim.plots import pyplot

MODE = "vllm"
Row = dict[str, Any]

# Figures averaged over a row's repeats.
AVERAGED = (
    "requests",
    "errors",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "hit_rate",
    "max_mean_share",
    "preemptions",
    "throughput_rps",
    "wall_s",
)

DEFINITIONS = {
    "pressure": "tenants x measured system-prompt tokens / fleet KV tokens (vLLM's blocks)",
    "ttft": "seconds from sending to the first streamed content, as the client saw it",
    "hit_rate": "vLLM's prefix_cache_hits / prefix_cache_queries (tokens), over the servers",
    "max_mean_share": "the busiest server's finished requests / the mean per server",
    "rows": "each figure the mean over the repeats of the (cell, router)",
    "ratios": "kvgate prefix-aware / baseline, same cell, of the figures' means over the "
    "repeats; hit_rate in points; ttft_mean_ratio_range: the per-repeat ratios' range",
}


def figures(result: ExperimentResult) -> Row:
    """One run's figures (TTFT as the client measured it, counters as vLLM kept them)."""
    return {**result.figures(), "preemptions": sum(r.preemptions for r in result.replicas)}


def label(row: Row) -> str:
    return f"{row['router']} {row['policy']}"


def summarise(runs: Sequence[Row]) -> list[Row]:
    """One row per (cell, router, policy), in the order of their first run."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for run in runs:
        groups.setdefault((run["cell"], run["router"], run["policy"]), []).append(run)
    rows = []
    for (cell, router, policy), mine in groups.items():
        row: Row = {"mode": MODE, "cell": cell, "router": router, "policy": policy}
        row["runs"] = len(mine)
        for name in AVERAGED:
            row[name] = _mean([r[name] for r in mine])
        means = [r["ttft_mean_s"] for r in mine]
        row["ttft_mean_min_s"], row["ttft_mean_max_s"] = min(means), max(means)
        rows.append(row)
    return rows


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def format_rows(rows: Sequence[Row]) -> str:
    lines = [
        f"{'cell':<24}{'router':<28}{'runs':>5}{'req':>6}{'err':>5}{'mean':>8}{'p50':>8}"
        f"{'p90':>8}{'hit':>7}{'max/mean':>9}{'preempt':>8}"
    ]
    for r in rows:
        lines.append(
            f"{r['cell']:<24}{label(r):<28}{r['runs']:>5}{r['requests']:>6.0f}"
            f"{r['errors']:>5.0f}{r['ttft_mean_s']:>8.3f}{r['ttft_p50_s']:>8.3f}"
            f"{r['ttft_p90_s']:>8.3f}{r['hit_rate']:>7.1%}{r['max_mean_share']:>9.2f}"
            f"{r['preemptions']:>8.0f}"
        )
    return "\n".join(lines)


def write_json(doc: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "vllm-pressure.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def write_bars(rows: Sequence[Row], path: Path, title: str) -> Path:
    """Per cell a panel: each router's mean TTFT bar with its p90 as a tick above and its
    hit rate written on top; `PlotsUnavailable` without matplotlib."""
    plt = pyplot()
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    routers = list(dict.fromkeys(label(r) for r in rows))
    fig, axes = plt.subplots(
        1, len(cells), figsize=(1.2 + 1.3 * len(routers) * len(cells), 4.2), squeeze=False
    )
    for ax, cell in zip(axes[0], cells, strict=True):
        mine = {label(r): r for r in rows if r["cell"] == cell}
        xs = [i for i, name in enumerate(routers) if name in mine]
        shown = [mine[routers[i]] for i in xs]
        ax.bar(xs, [r["ttft_mean_s"] for r in shown], color="#4c72b0")
        ax.scatter(xs, [r["ttft_p90_s"] for r in shown], marker="_", s=400, c="k")
        for x, r in zip(xs, shown, strict=True):
            ax.annotate(
                f"{r['hit_rate']:.0%}",
                (x, r["ttft_p90_s"]),
                textcoords="offset points",
                xytext=(0, 4),
                ha="center",
                fontsize=8,
            )
        ax.set_ylim(0, 1.15 * max(r["ttft_p90_s"] for r in shown))  # room for the labels
        ax.set_xticks(range(len(routers)), [n.replace(" ", "\n") for n in routers], fontsize=8)
        ax.set_title(cell, fontsize=10)
        ax.set_ylabel("TTFT (s)")
    fig.suptitle(f"{title}: bars mean TTFT, ticks p90, above them the hit rate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
