"""The EPP bench's report: the hop's added latency over rounds, text tables, JSON, one PNG."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from routing.percentile import percentile
from sim.plots import PlotsUnavailable, pyplot

_MS = 1e3
Round = Mapping[str, Mapping[str, Any]]  # target → one wrk run's figures (seconds)


def summarise_hop(rounds: Sequence[Round], baseline: str = "direct") -> dict[str, dict[str, Any]]:
    """Per target: the median over rounds of its p50 and p99, and of what it added over
    `baseline` in the same round (a difference of percentiles)."""
    names = list(rounds[0]) if rounds else []
    summary: dict[str, dict[str, Any]] = {}
    for name in names:
        runs = [r[name] for r in rounds]
        entry: dict[str, Any] = {
            "achieved_rps": _median(r["achieved_rps"] for r in runs),
            "p50_s": _median(r["p50_s"] for r in runs),
            "p99_s": _median(r["p99_s"] for r in runs),
            "errors": sum(r["errors"] for r in runs),
            "late": sum(r["late"] for r in runs),
            "sustained": all(r["sustained"] for r in runs),
        }
        for q in ("p50", "p99"):
            added = [r[name][f"{q}_s"] - r[baseline][f"{q}_s"] for r in rounds if baseline in r]
            entry[f"added_{q}_s"] = _median(added)
        summary[name] = entry
    return summary


def epp_hop(rounds: Sequence[Round], with_epp: str, without: str) -> dict[str, float]:
    """What the picker alone adds: Envoy with it minus Envoy without, same round, median."""
    if not rounds:
        return {"added_p50_s": math.nan, "added_p99_s": math.nan}
    entry = summarise_hop(rounds, baseline=without)[with_epp]
    return {"added_p50_s": entry["added_p50_s"], "added_p99_s": entry["added_p99_s"]}


def _median(values: Any) -> float:
    return percentile(list(values), 50)


def quality_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per router (its `figures()` plus `router`)."""
    lines = [
        "| router | hit rate | TTFT p50 | p90 | mean | errors | max/mean share |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['router']} | {r['hit_rate']:.1%} | {r['ttft_p50_s']:.3f} s "
            f"| {r['ttft_p90_s']:.3f} s | {r['ttft_mean_s']:.3f} s | {r['errors']} "
            f"| {r['max_mean_share']:.2f} |"
        )
    return "\n".join(lines)


def hop_table(summary: Mapping[str, Mapping[str, Any]], rate: float) -> str:
    """Markdown: one row per target at `rate` requests/s, latencies in ms."""
    lines = [
        f"| target ({rate:g} req/s) | achieved | p50 | p99 | added p50 | added p99 | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        flag = "" if s["sustained"] else " (not sustained)"
        lines.append(
            f"| {name}{flag} | {s['achieved_rps']:.1f}/s | {_ms(s['p50_s'])} | {_ms(s['p99_s'])} "
            f"| {_ms(s['added_p50_s'], signed=True)} | {_ms(s['added_p99_s'], signed=True)} "
            f"| {s['errors']} |"
        )
    return "\n".join(lines)


def _ms(seconds: float, signed: bool = False) -> str:
    if math.isnan(seconds):
        return "–"
    return f"{seconds * _MS:+.2f} ms" if signed else f"{seconds * _MS:.2f} ms"


def write_outputs(
    report: Mapping[str, Any], ttfts: Mapping[str, Sequence[float]], out: Path
) -> None:
    """`epp.json`, `epp.png` (TTFT CDFs and added latency), and the tables to stdout."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "epp.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(quality_table(report["quality"]))
    print()
    print(hop_table(report["hop"]["summary"], report["hop"]["rate"]))
    hop = report["hop"]["epp_hop"]
    print(
        f"\nthe EPP hop (Envoy + kvgate epp minus Envoy round-robin, same round, median): "
        f"p50 {_ms(hop['added_p50_s'], signed=True)}, p99 {_ms(hop['added_p99_s'], signed=True)}"
    )
    try:
        _plot(report, ttfts, out / "epp.png")
    except PlotsUnavailable as exc:
        print(exc, file=sys.stderr)
    print(f"\nwrote {out / 'epp.json'} and {out / 'epp.png'}", file=sys.stderr)


def _plot(report: Mapping[str, Any], ttfts: Mapping[str, Sequence[float]], path: Path) -> None:
    plt = pyplot()
    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
    hit = {r["router"]: r["hit_rate"] for r in report["quality"]}
    for name, values in ttfts.items():
        ys = [(i + 1) / len(values) for i in range(len(values))]
        cdf.plot(values, ys, label=f"{name} (hit {hit.get(name, math.nan):.0%})")
    cdf.set_xscale("log")
    cdf.set_xlabel("client TTFT (s)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("routing quality: multi-tenant chats")
    cdf.legend(fontsize=8)
    summary = report["hop"]["summary"]
    names = [n for n in summary if n != "direct"]
    xs = range(len(names))
    for offset, q in ((-0.2, "p50"), (0.2, "p99")):
        heights = [summary[n][f"added_{q}_s"] * _MS for n in names]
        bars.bar([x + offset for x in xs], heights, width=0.4, label=f"added {q}")
    bars.set_xticks(list(xs), names, fontsize=8)
    bars.set_ylabel("ms over direct")
    bars.set_title(f"added latency at {report['hop']['rate']:g} req/s (stub replicas)")
    bars.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
