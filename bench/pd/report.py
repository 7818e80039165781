"""The P/D benchmark's outputs: figures over repeats, ratios, targets, tables, JSON, plots.

A row is one run: (comparison, cell, router, repeat) and its figures. `summary` gives each
(comparison, cell, router) the mean, sample standard deviation, minimum and maximum of every
figure over its repeats; `ratios` compares kvgate with each peer in the same cell: the ratio
of the means over the repeats and each repeat's own ratio (the same workload went through
both in a repeat). Targets: comparison A, kvgate P/D (vLLM fleet, conditional) over each
peer's P/D mode, mean TTFT ≤ 0.8 and p90 ≤ 0.9, without errors; comparison B, conditional's
mean TTFT below always's and never's, live and simulated.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

Row = dict[str, Any]

KVGATE = "kvgate-pd"
KVGATE_SGLANG = "kvgate-pd-sglang"
# (kvgate row, peer row): each peer's P/D mode against kvgate on the vLLM fleet, and SGLang's
# against kvgate on the same SGLang fleet (like for like).
PAIRS = (
    (KVGATE, "vllm-router-pd"),
    (KVGATE, "sglang-router-pd"),
    (KVGATE_SGLANG, "sglang-router-pd"),
    (KVGATE, "kvgate-agg"),
)
MODE_PAIRS = (("conditional", "always"), ("conditional", "never"))  # comparison B
TARGETS = {"ttft_mean_s": 0.8, "ttft_p90_s": 0.9}  # kvgate / peer at most
TARGET_PAIRS = PAIRS[:2]
FIGURES = (
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_mean_s",
    "itl_p50_s",
    "itl_p90_s",
    "errors",
    "requests",
    "throughput_rps",
    "hit_rate",
    "split_share",
    "moved_tokens_per_request",
    "prefill_engine_ttft_mean_s",
    "decode_engine_ttft_mean_s",
    "ttft_split_mean_s",
    "ttft_local_mean_s",
    "decode_leg_first_token_mean_s",
    "prefill_fallbacks",
    "ttft_short_mean_s",
    "ttft_long_mean_s",
)


def _stats(values: Sequence[float | None]) -> dict[str, float]:
    """Mean, sd, min, max of the measured values (NaN, or None read back from JSON: none)."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return {"mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan}
    return {
        "mean": statistics.fmean(xs),
        "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "min": min(xs),
        "max": max(xs),
    }


def summary(rows: Sequence[Row]) -> list[Row]:
    """Per (comparison, mode, cell, router): each figure's stats over the repeats, and the
    P/D decisions summed over them."""
    groups: dict[tuple[str, str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["comparison"], r["mode"], r["cell"], r["router"]), []).append(r)
    out = []
    for (comparison, mode, cell, router), runs in groups.items():
        decisions: dict[str, int] = {}
        for r in runs:
            for k, v in r.get("decisions", {}).items():
                decisions[k] = decisions.get(k, 0) + v
        out.append(
            {
                "comparison": comparison,
                "mode": mode,
                "cell": cell,
                "router": router,
                "repeats": len(runs),
                **{k: _stats([r[k] for r in runs]) for k in FIGURES if all(k in r for r in runs)},
                "decisions": decisions,
            }
        )
    return out


def _mean(s: Row, figure: str) -> float:
    return float(s[figure]["mean"]) if figure in s else math.nan


def ratios(
    rows: Sequence[Row], pairs: Sequence[tuple[str, str]] = PAIRS, comparison: str = "A"
) -> list[Row]:
    """Ours / theirs per (mode, cell) of `comparison`, for mean and p90 TTFT (see the
    docstring)."""
    selected = [r for r in rows if r["comparison"] == comparison]
    by = {(s["mode"], s["cell"], s["router"]): s for s in summary(selected)}
    runs = {(r["mode"], r["cell"], r["router"], r["repeat"]): r for r in selected}
    out = []
    for mode, cell in dict.fromkeys((m, c) for m, c, _ in by):
        for ours, peer in pairs:
            if (mode, cell, ours) not in by or (mode, cell, peer) not in by:
                continue
            row: Row = {"mode": mode, "cell": cell, "kvgate": ours, "peer": peer}
            for figure in TARGETS:
                row[figure] = _mean(by[mode, cell, ours], figure) / _mean(
                    by[mode, cell, peer], figure
                )
                row[f"{figure}_per_repeat"] = [
                    r[figure] / runs[mode, cell, peer, rep][figure]
                    for (m, c, name, rep), r in runs.items()
                    if (m, c, name) == (mode, cell, ours) and (mode, cell, peer, rep) in runs
                ]
            out.append(row)
    return out


def targets(rows: Sequence[Row]) -> list[Row]:
    """Every target with its measured value and verdict."""
    out: list[Row] = []
    summaries = summary(rows)
    for r in ratios(rows, TARGET_PAIRS):
        for figure, bound in TARGETS.items():
            out.append(
                {
                    "target": f"A {r['cell']}: {figure} {r['kvgate']}/{r['peer']} <= {bound}",
                    "value": r[figure],
                    "met": r[figure] <= bound,
                    "per_repeat_met": sum(x <= bound for x in r[f"{figure}_per_repeat"]),
                    "repeats": len(r[f"{figure}_per_repeat"]),
                }
            )
    for s in summaries:
        if s["comparison"] == "A" and s["router"] == KVGATE:
            errors = _mean(s, "errors")
            out.append(
                {
                    "target": f"A {s['cell']}: {KVGATE} errors == 0",
                    "value": errors,
                    "met": errors == 0,
                }
            )
    for r in ratios(rows, MODE_PAIRS, "B"):
        value = r["ttft_mean_s"]
        out.append(
            {
                "target": f"B {r['mode']}: ttft_mean_s conditional < {r['peer']}",
                "value": value,
                "met": value < 1,
                "per_repeat_met": sum(x < 1 for x in r["ttft_mean_s_per_repeat"]),
                "repeats": len(r["ttft_mean_s_per_repeat"]),
            }
        )
    return out


def _fmt(s: Row, figure: str, scale: float = 1.0, digits: int = 3) -> str:
    if figure not in s or math.isnan(s[figure]["mean"]):
        return "-"
    return f"{s[figure]['mean'] * scale:.{digits}f}±{s[figure]['sd'] * scale:.{digits}f}"


def print_tables(rows: Sequence[Row]) -> None:
    """The text tables: per comparison and cell, a line per router; then ratios, targets."""
    print(
        f"\n{'cmp':<4}{'mode':<5}{'cell':<10}{'router':<18}{'TTFT mean s':>13}{'p50 s':>13}"
        f"{'p90 s':>13}{'ITL mean ms':>12}{'p50 ms':>11}{'p90 ms':>11}{'err':>5}{'req/s':>11}"
        f"{'split':>11}{'short s':>13}{'long s':>13}"
    )
    for s in summary(rows):
        print(
            f"{s['comparison']:<4}{s['mode']:<5}{s['cell']:<10}{s['router']:<18}"
            f"{_fmt(s, 'ttft_mean_s'):>13}{_fmt(s, 'ttft_p50_s'):>13}{_fmt(s, 'ttft_p90_s'):>13}"
            f"{_fmt(s, 'itl_mean_s', 1e3, 1):>12}{_fmt(s, 'itl_p50_s', 1e3, 1):>11}"
            f"{_fmt(s, 'itl_p90_s', 1e3, 1):>11}{_fmt(s, 'errors', 1, 0):>5}"
            f"{_fmt(s, 'throughput_rps', 1, 2):>11}{_fmt(s, 'split_share', 1, 2):>11}"
            f"{_fmt(s, 'ttft_short_mean_s'):>13}{_fmt(s, 'ttft_long_mean_s'):>13}"
        )
    print("\nwhere the time goes (means over repeats; engine TTFT from the replicas' histograms):")
    print(
        f"{'cmp':<4}{'mode':<5}{'cell':<10}{'router':<18}{'P TTFT s':>10}{'D TTFT s':>10}"
        f"{'moved tok':>10}{'split s':>9}{'local s':>9}{'D leg s':>9}{'fallbk':>7}  decisions"
    )
    for s in summary(rows):
        print(
            f"{s['comparison']:<4}{s['mode']:<5}{s['cell']:<10}{s['router']:<18}"
            f"{_one(s, 'prefill_engine_ttft_mean_s'):>10}{_one(s, 'decode_engine_ttft_mean_s'):>10}"
            f"{_one(s, 'moved_tokens_per_request', 0):>10}{_one(s, 'ttft_split_mean_s'):>9}"
            f"{_one(s, 'ttft_local_mean_s'):>9}{_one(s, 'decode_leg_first_token_mean_s'):>9}"
            f"{_one(s, 'prefill_fallbacks', 0):>7}  {_decisions(s)}"
        )
    print("\nours / theirs (ratio of the means over repeats; per repeat in brackets):")
    for r in [*ratios(rows), *ratios(rows, MODE_PAIRS, "B")]:
        each = ", ".join(f"{x:.2f}" for x in r["ttft_mean_s_per_repeat"])
        each90 = ", ".join(f"{x:.2f}" for x in r["ttft_p90_s_per_repeat"])
        print(
            f"  {r['mode']:<5}{r['cell']:<10}{r['kvgate']:>17} / {r['peer']:<17} "
            f"mean {r['ttft_mean_s']:.2f} "
            f"[{each}]  p90 {r['ttft_p90_s']:.2f} [{each90}]"
        )
    print("\ntargets:")
    for t in targets(rows):
        extra = f" ({t['per_repeat_met']}/{t['repeats']} repeats)" if "repeats" in t else ""
        verdict = "met" if t["met"] else "MISSED"
        print(f"  {t['target']:<62} {t['value']:>7.2f}  {verdict}{extra}")


def _one(s: Row, figure: str, digits: int = 3) -> str:
    value = _mean(s, figure)
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def _decisions(s: Row) -> str:
    """P/D decisions as path/why: share of the cell's requests."""
    total = sum(s["decisions"].values())
    parts = sorted(s["decisions"].items(), key=lambda kv: -kv[1])
    return " ".join(f"{k} {v / total:.0%}" for k, v in parts) if total else ""


def write_json(doc: dict[str, Any], rows: Sequence[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {
        **doc,
        "rows": rows,
        "summary": summary(rows),
        "ratios": ratios(rows),
        "mode_ratios": ratios(rows, MODE_PAIRS, "B"),
        "targets": targets(rows),
    }
    path.write_bytes(orjson.dumps(full, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def write_plots(rows: Sequence[Row], out: Path) -> list[Path]:
    """`pd_ttft.png` (comparison A) and `pd_modes.png` (comparison B), where there are rows."""
    try:
        written = []
        summaries = summary(rows)
        a = [s for s in summaries if s["comparison"] == "A"]
        if a:
            path = out / "pd_ttft.png"
            title, unit = "A: TTFT per router", "seconds (log scale)"
            written.append(_bars(a, "cell", path, title, A_BARS, unit=unit, log=True))
        b = [s for s in summaries if s["comparison"] == "B"]
        if b:
            path = out / "pd_modes.png"
            unit = "seconds (sim: model seconds / speedup)"
            written.append(_bars(b, "mode", path, "B: TTFT per P/D mode", B_BARS, unit=unit))
        return written
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
        return []


A_BARS = (("ttft_mean_s", "TTFT mean"), ("ttft_p90_s", "TTFT p90"))
B_BARS = (
    ("ttft_mean_s", "TTFT mean"),
    ("ttft_p90_s", "TTFT p90"),
    ("ttft_short_mean_s", "short prompts' mean"),
    ("ttft_long_mean_s", "long prompts' mean"),
)


def _bars(
    summaries: Sequence[Row],
    panel_key: str,
    path: Path,
    title: str,
    bars: Sequence[tuple[str, str]],
    *,
    unit: str,
    log: bool = False,
) -> Path:
    """One panel per `panel_key` value, a group of `bars` (figure, legend) per router: the
    means over the repeats, ± sd whiskers."""
    plt = pyplot()
    panels = sorted(dict.fromkeys(s[panel_key] for s in summaries))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        group = [s for s in summaries if s[panel_key] == panel]
        names = [s["router"] for s in group]
        xs = range(len(group))
        width = 0.8 / len(bars)
        for k, (figure, name) in enumerate(bars):
            ax.bar(
                [x + (k - (len(bars) - 1) / 2) * width for x in xs],
                [s[figure]["mean"] if figure in s else math.nan for s in group],
                width=width,
                yerr=[s[figure]["sd"] if figure in s else 0.0 for s in group],
                capsize=3,
                label=name,
            )
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(unit)
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
            # Minor ticks: 2 and 5 of each decade labelled, the others bare.
            minor = plt.FuncFormatter(
                lambda v, _: f"{v:g}" if f"{v:g}".lstrip("0.")[:1] in "25" else ""
            )
            ax.yaxis.set_minor_formatter(minor)
        ax.set_title(f"{title}: {panel}")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
