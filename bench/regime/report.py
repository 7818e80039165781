"""The regime map's outputs: tables, `regime.json` and the ratio heat maps.

A row is one (cell, mode, router) with the figures of `bench.regime.simulate.figures` or
`bench.regime.live.figures`. Ratios compare kvgate's default (`prefix-aware`) with a
baseline in the same cell and mode — sglang-router `cache_aware` (in the simulator, its
model) and kvgate `round-robin` — as mean and p90 TTFT ratios (below 1: kvgate faster), the
hit rate difference in points, both max/mean load shares, and the floor's ratios: the
simulated TTFT floor of kvgate's run over the baseline's TTFT, below which no router can
go. Each (mode, baseline) gets a heat map PNG: one panel for the mean ratio and one for
p90, a column per pressure and a row per rest-of-the-cell, each square annotated with its
ratio (and "≥ floor ratio" where simulated) and coloured on a log scale centred at 1.0
(blue: kvgate faster, red: slower).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sim.plots import pyplot

DEFAULT = ("kvgate", "prefix-aware")
BASELINES = (("sglang-router", "cache_aware"), ("kvgate", "round-robin"))
# The colour scale spans ratios 1/2..2 (log2 −1..1); ratios beyond take the end colours.
COLOUR_SPAN_LOG2 = 1.0

Row = dict[str, Any]

# What `regime.json`'s figures mean, written into it.
DEFINITIONS = {
    "pressure": "tenants x system-prompt tokens / fleet KV tokens (cell)",
    "cell load": "open loop: arrival rate / round-robin's saturation throughput, both simulated",
    "offered_load": "open loop: requests / span of their arrivals / that saturation",
    "row load": "requests / run time / that saturation (ramp-up and tail included)",
    "ttft": "seconds from sending to the first token; live: as the client saw it",
    "hit_rate": "prefix-cache hit tokens / looked-up tokens over the replicas (their counters)",
    "max_mean_share": "the busiest replica's requests / the mean per replica",
    "ratios": "kvgate prefix-aware / baseline, same cell and mode, of the figures' means over "
    "the runs (seeds); hit_rate in points; ttft_mean_ratio_range: the per-run ratios' range",
    "hit_ceiling": "hit rate of one unbounded cache fed every request: no router can beat it",
    "ttft_floor": "sim: per request, the TTFT of running alone on an idle engine holding every "
    "block that could be cached by then (bench.regime.floor): no router can beat it",
    "floor_*_ratio": "the simulated floor of kvgate's run / the baseline's TTFT: the lowest "
    "ratio any router could reach (live cells: the same cell's simulated floor)",
}


def label(row: Row) -> str:
    return f"{row['router']} {row['policy']}"


MEANS = ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "hit_rate", "max_mean_share")
FLOORS = ("ttft_floor_mean_s", "ttft_floor_p90_s")  # simulated rows only


def means(rows: Sequence[Row]) -> dict[tuple[str, str, str, str], Row]:
    """Per (mode, cell, router, policy): the figures averaged over its runs (seeds)."""
    groups: dict[tuple[str, str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["mode"], r["cell"], r["router"], r["policy"]), []).append(r)
    return {
        key: {
            **runs[0],
            **{k: sum(r[k] for r in runs) / len(runs) for k in MEANS},
            **{k: sum(r[k] for r in runs) / len(runs) for k in FLOORS if all(k in r for r in runs)},
            "runs": len(runs),
            "seeds": [r.get("seed") for r in runs],
        }
        for key, runs in groups.items()
    }


def ratios(rows: Sequence[Row], ceilings: dict[str, float] | None = None) -> list[Row]:
    """kvgate's default against each baseline, per (mode, cell) where both ran: ratios of
    the figures' means over the runs (seeds), and the range of the per-run mean ratios;
    `ceilings`: each cell's hit ceiling, carried into its rows."""
    by = means(rows)
    runs = {(r["mode"], r["cell"], r["router"], r["policy"], r.get("seed")): r for r in rows}
    out = []
    for mode, cell in dict.fromkeys((r["mode"], r["cell"]) for r in rows):
        ours = by.get((mode, cell, *DEFAULT))
        if ours is None:
            continue
        # The floor is the simulator's; a live cell takes it from the same cell simulated.
        floor = by.get(("sim", cell, *DEFAULT), {})
        for baseline in BASELINES:
            theirs = by.get((mode, cell, *baseline))
            if theirs is None:
                continue
            each = [
                _ratio(a["ttft_mean_s"], b["ttft_mean_s"])
                for seed in ours["seeds"]
                if (a := runs.get((mode, cell, *DEFAULT, seed)))
                and (b := runs.get((mode, cell, *baseline, seed)))
            ]
            out.append(
                {
                    "mode": mode,
                    "cell": cell,
                    "baseline": " ".join(baseline),
                    "runs": min(ours["runs"], theirs["runs"]),
                    "ttft_mean_ratio": _ratio(ours["ttft_mean_s"], theirs["ttft_mean_s"]),
                    "ttft_mean_ratio_range": [min(each), max(each)] if each else None,
                    "ttft_p90_ratio": _ratio(ours["ttft_p90_s"], theirs["ttft_p90_s"]),
                    "hit_rate_diff_points": (ours["hit_rate"] - theirs["hit_rate"]) * 100,
                    "hit_rate": ours["hit_rate"],
                    "hit_ceiling": (ceilings or {}).get(cell),
                    "max_mean_share": ours["max_mean_share"],
                    "baseline_max_mean_share": theirs["max_mean_share"],
                    # No router can reach a lower ratio than these (`bench.regime.floor`).
                    "floor_mean_ratio": _ratio(
                        floor.get("ttft_floor_mean_s", math.nan), theirs["ttft_mean_s"]
                    ),
                    "floor_p90_ratio": _ratio(
                        floor.get("ttft_floor_p90_s", math.nan), theirs["ttft_p90_s"]
                    ),
                }
            )
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not math.isnan(a) else math.nan


def format_rows(rows: Sequence[Row]) -> str:
    lines = [
        f"{'mode':<5}{'cell':<24}{'seed':>5} {'router':<28}{'req':>5}{'err':>4}{'mean':>8}"
        f"{'p50':>8}{'p90':>8}{'hit':>7}{'max/mean':>9}{'load':>6}"
    ]
    for r in rows:
        seed = r.get("seed")
        lines.append(
            f"{r['mode']:<5}{r['cell']:<24}{'' if seed is None else seed:>5} {label(r):<28}"
            f"{r['requests']:>5}{r['errors']:>4}"
            f"{r['ttft_mean_s']:>8.3f}{r['ttft_p50_s']:>8.3f}{r['ttft_p90_s']:>8.3f}"
            f"{r['hit_rate']:>7.1%}{r['max_mean_share']:>9.2f}{r['load']:>6.2f}"
        )
    return "\n".join(lines)


def format_ratios(table: Sequence[Row]) -> str:
    lines = [
        "kvgate prefix-aware / baseline, means over the runs (TTFT ratios < 1: kvgate faster;"
        " hit: points; runs: the per-run mean ratios' range; ceiling: no router's hit rate"
        " can exceed it; floor: no router's TTFT ratio can be lower)",
        f"{'mode':<5}{'cell':<24}{'baseline':<27}{'mean':>6}{'runs':>12}{'p90':>6}{'hit':>7}"
        f"{'ours':>7}{'ceiling':>8}{'share':>7}{'theirs':>7}{'floor':>12}",
    ]
    for t in table:
        spread = t.get("ttft_mean_ratio_range")
        spread_text = f"{spread[0]:.2f}–{spread[1]:.2f}" if spread else "–"
        ceiling = t.get("hit_ceiling")
        ceiling_text = "–" if ceiling is None else f"{ceiling:.1%}"
        lines.append(
            f"{t['mode']:<5}{t['cell']:<24}{t['baseline']:<27}{t['ttft_mean_ratio']:>6.2f}"
            f"{spread_text:>12}{t['ttft_p90_ratio']:>6.2f}{t['hit_rate_diff_points']:>+7.1f}"
            f"{t.get('hit_rate', math.nan):>7.1%}{ceiling_text:>8}"
            f"{t['max_mean_share']:>7.2f}{t['baseline_max_mean_share']:>7.2f}"
            f"{_pair(t.get('floor_mean_ratio'), t.get('floor_p90_ratio')):>12}"
        )
    return "\n".join(lines)


def _pair(mean: float | None, p90: float | None) -> str:
    if mean is None or p90 is None or math.isnan(mean) or math.isnan(p90):
        return "–"
    return f"{mean:.2f}/{p90:.2f}"


def write_json(doc: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "regime.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return path


def heatmap_name(mode: str, baseline: str) -> str:
    """`heatmap_live_vs_sglang-router.png`, `heatmap_sim_vs_round-robin.png`."""
    router, policy = baseline.split(" ", 1)
    return f"heatmap_{mode}_vs_{policy if router == DEFAULT[0] else router}.png"


def write_heatmaps(cells: Sequence[Row], table: Sequence[Row], out: Path) -> list[Path]:
    """One PNG per (mode, baseline) in `table`; `PlotsUnavailable` without matplotlib."""
    paths = []
    for mode, baseline in dict.fromkeys((t["mode"], t["baseline"]) for t in table):
        mine = {t["cell"]: t for t in table if (t["mode"], t["baseline"]) == (mode, baseline)}
        path = out / heatmap_name(mode, baseline)
        _plot(cells, mine, f"{mode}: kvgate prefix-aware ÷ {baseline}", path)
        paths.append(path)
    return paths


def _plot(cells: Sequence[Row], by_cell: dict[str, Row], title: str, path: Path) -> None:
    plt = pyplot()
    from matplotlib.colors import TwoSlopeNorm

    shown = [c for c in cells if c["name"] in by_cell]
    pressures = sorted({c["pressure"] for c in shown})
    rows = list(dict.fromkeys(c["row"] for c in shown))
    at = {(c["row"], c["pressure"]): by_cell[c["name"]] for c in shown}
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#c8c8c8")  # grey: not run
    norm = TwoSlopeNorm(vmin=-COLOUR_SPAN_LOG2, vcenter=0.0, vmax=COLOUR_SPAN_LOG2)
    width = 3.0 + 1.1 * len(pressures)
    fig, axes = plt.subplots(1, 2, figsize=(2 * width, 1.2 + 0.7 * len(rows)), squeeze=False)
    stats = (
        ("ttft_mean_ratio", "floor_mean_ratio", "mean TTFT"),
        ("ttft_p90_ratio", "floor_p90_ratio", "p90 TTFT"),
    )
    for ax, (stat, floor_stat, name) in zip(axes[0], stats, strict=True):
        grid = [[at[(r, p)][stat] if (r, p) in at else math.nan for p in pressures] for r in rows]
        floors = [
            [at[(r, p)].get(floor_stat, math.nan) if (r, p) in at else math.nan for p in pressures]
            for r in rows
        ]
        shade = [[math.log2(v) if v > 0 else math.nan for v in line] for line in grid]
        ax.imshow(shade, cmap=cmap, norm=norm, aspect="auto")
        for i, line in enumerate(grid):
            for j, v in enumerate(line):
                text = "–" if math.isnan(v) else f"{v:.2f}"
                if not math.isnan(floors[i][j]):
                    text += f"\n≥{floors[i][j]:.2f}"  # the floor: no router does better
                dark = abs(shade[i][j]) > 0.6 * COLOUR_SPAN_LOG2  # False for NaN
                colour = "white" if dark else "black"
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)
        ax.set_xticks(range(len(pressures)), [f"{p:g}" for p in pressures])
        ax.set_yticks(range(len(rows)), rows)
        ax.set_xlabel("pressure: prefix tokens ÷ fleet KV")
        ax.set_title(name)
    fig.suptitle(f"{title} (< 1: kvgate faster; ≥ x: no router can go below x)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
