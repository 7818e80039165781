"""The overhead benchmark's report: latency added over direct, saturation, table, JSON, plots."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

_MS = 1e3


def print_row(target: str, row: dict[str, Any]) -> None:
    """One progress line per measured rate."""
    cpu, net = row.get("cpu_s_per_1k"), row.get("cpu_s_per_1k_net")
    cpu_text = f" cpu/1k {cpu:.3f}s" if cpu is not None else ""
    cpu_text += f" (net {net:.3f}s)" if net is not None else ""
    if (tuner := row.get("tuner_cpu_s")) is not None:
        cpu_text += f" tuner cpu {tuner:.2f}s"
    flag = "" if row["sustained"] else "  (not sustained)"
    print(
        f"  {target:<24} {row['rate']:>6.0f}/s -> {row['achieved_rps']:7.1f}/s "
        f"p50 {row['p50_s'] * _MS:6.2f} ms p99 {row['p99_s'] * _MS:7.2f} ms "
        f"err {row['errors']} late {row['late']}{cpu_text}{flag}",
        file=sys.stderr,
        flush=True,
    )


def _add_overhead(measured: list[dict[str, Any]]) -> None:
    """Latency added over direct at the same rate (a difference of percentiles)."""
    direct = next((t for t in measured if t["target"] == "direct"), None)
    base = {r["rate"]: r for r in direct["runs"]} if direct else {}
    for t in measured:
        for r in t["runs"]:
            b = base.get(r["rate"])
            usable = b is not None and b["sustained"]
            r["added_p50_s"] = r["p50_s"] - b["p50_s"] if usable and b else None
            r["added_p99_s"] = r["p99_s"] - b["p99_s"] if usable and b else None


def _saturation(runs: list[dict[str, Any]]) -> float | None:
    """The achieved rate at the highest offered rate that was sustained."""
    ok = [r for r in runs if r["sustained"]]
    return max(ok, key=lambda r: r["rate"])["achieved_rps"] if ok else None


def summarise(
    measured: list[dict[str, Any]], failed: dict[str, str], settings: Any, stub_cmd: list[str]
) -> dict[str, Any]:
    _add_overhead(measured)
    for t in measured:
        t["saturation_rps"] = _saturation(t["runs"])
        rss = [r["peak_rss_bytes"] for r in t["runs"] if "peak_rss_bytes" in r]
        t["peak_rss_mb"] = max(rss) / 2**20 if rss else None
        t["saturated_below_max_rate"] = not t["runs"][-1]["sustained"] if t["runs"] else None
    sat = {t["target"]: t["saturation_rps"] for t in measured}
    ratios = {
        f"{k} / {p}": sat[k] / sat[p]
        for k in sat
        if k.startswith("kvgate") and sat[k]
        for p in sat
        if not p.startswith("kvgate") and p != "direct" and sat[p]
    }
    return {
        "benchmark": "gateway overhead (open-loop fixed-rate, wrk)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg": os.getloadavg(),
        },
        "settings": {
            "rates": list(settings.rates),
            "duration_s": settings.duration_s,
            "warmup_s": settings.warmup_s,
            "connections": settings.connections,
            "stream_fraction": settings.stream_fraction,
            "replicas": settings.replicas,
            "stub_engine": stub_cmd,
        },
        "targets": measured,
        "failed": failed,
        "saturation_ratio_kvgate_to_peer": ratios,
    }


def _fmt_ms(v: float | None) -> str:
    return "—" if v is None else f"{v * _MS:.2f}"


def _fmt_s(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def table(report: dict[str, Any]) -> str:
    head = (
        "| target | rate/s | achieved/s | p50 ms | p99 ms | added p50 ms | added p99 ms "
        "| CPU s/1k req | net of idle | errors | late |"
    )
    lines = [head, "|" + "---|" * 11]
    for t in report["targets"]:
        for r in t["runs"]:
            cpu, net = _fmt_s(r.get("cpu_s_per_1k")), _fmt_s(r.get("cpu_s_per_1k_net"))
            lines.append(
                f"| {t['target']} | {r['rate']:.0f} | {r['achieved_rps']:.0f} "
                f"| {_fmt_ms(r['p50_s'])} | {_fmt_ms(r['p99_s'])} "
                f"| {_fmt_ms(r['added_p50_s'])} | {_fmt_ms(r['added_p99_s'])} "
                f"| {cpu} | {net} | {r['errors']} | {r['late']} |"
            )
    lines.append("")
    lines.append("| target | version | saturation req/s | peak RSS MB | idle CPU s/s |")
    lines.append("|---|---|---|---|---|")
    for t in report["targets"]:
        sat = t["saturation_rps"]
        more = "≥" if sat is not None and not t["saturated_below_max_rate"] else ""
        rss = t["peak_rss_mb"]
        sat_text = "—" if sat is None else f"{more}{sat:.0f}"
        rss_text = "—" if rss is None else f"{rss:.0f}"
        idle = t.get("idle_cpu_per_s")
        idle_text = "—" if idle is None else f"{idle:.3f}"
        lines.append(
            f"| {t['target']} | {t['version'] or '—'} | {sat_text} | {rss_text} | {idle_text} |"
        )
    for k, v in report["saturation_ratio_kvgate_to_peer"].items():
        lines.append(f"saturation {k}: {v:.2f}")
    return "\n".join(lines)


def write_outputs(report: dict[str, Any], out: Path) -> None:
    (out / "overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    text = table(report)
    (out / "overhead.md").write_text(text + "\n")
    print(text)
    print(f"wrote {out / 'overhead.json'}, overhead.md", file=sys.stderr)
    try:
        _plot(report, out)
    except PlotsUnavailable:
        print(PLOTS_SKIPPED, file=sys.stderr)
    else:
        print(f"wrote {out / 'added_p99.png'}, throughput.png", file=sys.stderr)


def _plot(report: dict[str, Any], out: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 5))
    for t in report["targets"]:
        pts = [
            (r["rate"], r["added_p99_s"] * _MS)
            for r in t["runs"]
            if r.get("added_p99_s") is not None and r["sustained"]
        ]
        if t["target"] != "direct" and pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=t["target"])
    ax.axhline(2.0, color="grey", linestyle="--", linewidth=1, label="2 ms target")
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("p99 latency added over direct (ms)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0.0)  # a negative difference is noise: the router cannot beat direct
    ax.set_title("Latency added by each router (sustained rates only)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "added_p99.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [t["target"] for t in report["targets"]]
    sats = [t["saturation_rps"] or 0.0 for t in report["targets"]]
    bars = ax.barh(names, sats, color="tab:blue")
    labels = [f"{v:.0f}" if v else "< lowest rate" for v in sats]
    ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
    ax.set_xlabel("highest sustained rate (requests/s; ≥95 % achieved, no errors)")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=120)
    plt.close(fig)
