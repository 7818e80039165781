"""Several rounds of the overhead sweep in one run (`--rounds N`), summarised side by side.

On shared cores one sweep per router is noisy, and drift (another program starting) hits
whichever router runs then. With rounds, every router is swept N times, direct first and the
others in an order rotated each round, and the figures kept per round; the summary gives,
per router and rate, the median over rounds (and the range) of the achieved rate, latency
added over direct in the same round, and CPU per 1,000 requests; per router its saturation
rate in each round; per round the saturation ratio of each kvgate variant to each peer; and
for each `kvgate+redis:P` the latency it adds over `kvgate:P` in the same round (Redis
sharing on vs in-memory), and likewise for each `kvgate+tune:P` (a tuner beside it), with
the tuner's CPU seconds per round, and for its controls `kvgate+burn:P` (a process spinning
beside it; its CPU seconds too) and `kvgate+record:P` (the recording alone).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

_FIELDS = ("achieved_rps", "p50_s", "p99_s", "added_p50_s", "added_p99_s", "cpu_s_per_1k_net")
_MS = 1e3


def rotated(names: Sequence[str], round_index: int) -> tuple[str, ...]:
    """Direct first (the baseline of every row), the others rotated by `round_index`."""
    first = tuple(n for n in names if n == "direct")
    rest = [n for n in names if n != "direct"]
    k = round_index % len(rest) if rest else 0
    return (*first, *rest[k:], *rest[:k])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def combine(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-round reports (`report.summarise`'s) as medians over rounds."""
    names: list[str] = []
    for rep in reports:
        names += [t["target"] for t in rep["targets"] if t["target"] not in names]
    targets: dict[str, Any] = {}
    for name in names:
        runs = [t for rep in reports for t in rep["targets"] if t["target"] == name]
        sats = [t["saturation_rps"] for t in runs]
        rates: dict[float, dict[str, Any]] = {}
        for t in runs:
            for r in t["runs"]:
                cell = rates.setdefault(r["rate"], {f: [] for f in _FIELDS} | {"sustained": 0})
                cell["sustained"] += bool(r["sustained"])
                for f in _FIELDS:
                    if r.get(f) is not None:
                        cell[f].append(r[f])
        targets[name] = {
            **({"tuner_cpu_s": [t.get("tuner_cpu_s") for t in runs]} if _beside(name) else {}),
            "saturation_rps": sats,
            "saturation_median": _median([s or 0.0 for s in sats]),
            "version": runs[0]["version"] if runs else "",
            "rates": {
                rate: {
                    "rounds": len(cell["achieved_rps"]),
                    "sustained": cell["sustained"],
                    **{f: cell[f] for f in _FIELDS},
                    **{f"{f}_median": _median(cell[f]) for f in _FIELDS},
                }
                for rate, cell in sorted(rates.items())
            },
        }
    return {
        "rounds": len(reports),
        "targets": targets,
        "saturation_ratios": _ratios(reports),
        "redis_vs_memory": _versus(targets, "kvgate+redis:"),
        "tuner_vs_none": _versus(targets, "kvgate+tune"),
        "burn_vs_none": _versus(targets, "kvgate+burn"),
        "record_vs_none": _versus(targets, "kvgate+record"),
    }


def _ratios(reports: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Per round: saturation of each kvgate variant ÷ each peer's."""
    out: dict[str, list[float | None]] = {}
    for rep in reports:
        sat = {t["target"]: t["saturation_rps"] for t in rep["targets"]}
        for k, sk in sat.items():
            for p, sp in sat.items():
                if k.startswith("kvgate") and not p.startswith("kvgate") and p != "direct":
                    out.setdefault(f"{k} / {p}", []).append(sk / sp if sk and sp else None)
    return out


def _beside(name: str) -> bool:
    """Whether the target runs a process beside the router (a tuner, or the burn control)."""
    return "+tune" in name or "+burn" in name


def _versus(targets: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Each target named `prefix`...:P minus `kvgate:P`, per rate: p50 and p99 (ms), per
    round."""
    out: dict[str, Any] = {}
    for name, t in targets.items():
        if not name.startswith(prefix):
            continue
        base = targets.get("kvgate:" + name.split(":", 1)[1])
        if base is None:
            continue
        for rate, cell in t["rates"].items():
            other = base["rates"].get(rate)
            if other is None:
                continue
            diff: dict[str, Any] = {}
            for f in ("p50_s", "p99_s"):
                pairs = zip(cell[f], other[f], strict=False)
                d = [(a - b) * _MS for a, b in pairs]
                diff[f"{f[:3]}_ms"] = d
                diff[f"{f[:3]}_ms_median"] = _median(d)
            out.setdefault(name, {})[rate] = diff
    return out


def _cell(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "—"
    med = statistics.median(values) * scale
    lo, hi = min(values) * scale, max(values) * scale
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def table(combined: dict[str, Any], rates: Sequence[float] = (500.0, 1000.0, 2000.0)) -> str:
    lines = [f"{combined['rounds']} rounds; medians (range) over rounds", ""]
    head = "| target | saturation req/s per round |"
    for rate in rates:
        head += f" added p50 / p99 ms at {rate:.0f}/s | CPU s/1k at {rate:.0f}/s |"
    lines += [head, "|---|---|" + "---|---|" * len(rates)]
    for name, t in combined["targets"].items():
        sats = " / ".join("—" if s is None else f"{s:.0f}" for s in t["saturation_rps"])
        row = f"| {name} | {sats} |"
        for rate in rates:
            c = t["rates"].get(rate)
            if c is None:
                row += " — | — |"
                continue
            added = f"{_cell(c['added_p50_s'], _MS)} / {_cell(c['added_p99_s'], _MS)}"
            row += f" {added} | {_cell(c['cpu_s_per_1k_net'], 1.0, 3)} |"
        lines.append(row)
    lines.append("")
    for k, v in combined["saturation_ratios"].items():
        shown = ", ".join("—" if x is None else f"{x:.2f}" for x in v)
        lines.append(f"saturation {k}: {shown}")
    versus = (
        ("redis_vs_memory", "memory"),
        ("tuner_vs_none", "no tuner"),
        ("burn_vs_none", "nothing beside"),
        ("record_vs_none", "no recording"),
    )
    for key, label in versus:
        for name, per_rate in combined.get(key, {}).items():
            for rate, d in per_rate.items():
                lines.append(
                    f"{name} − {label} at {rate:.0f}/s: p50 {_cell(d['p50_ms'])} ms, "
                    f"p99 {_cell(d['p99_ms'])} ms"
                )
    for name, t in combined["targets"].items():
        if "tuner_cpu_s" in t:
            shown = ", ".join("—" if c is None else f"{c:.1f}" for c in t["tuner_cpu_s"])
            beside = "the tuner's" if "+tune" in name else "the process beside it:"
            lines.append(f"{name}: {beside} CPU seconds per round: {shown}")
    return "\n".join(lines)


def write_rounds(reports: list[dict[str, Any]], out: Path) -> None:
    combined = combine(reports)
    payload = {**{k: v for k, v in reports[0].items() if k != "targets"}, "summary": combined}
    payload["per_round"] = reports
    (out / "overhead.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    text = table(combined)
    (out / "overhead.md").write_text(text + "\n")
    print(text)
    print(f"wrote {out / 'overhead.json'}, overhead.md", file=sys.stderr)
    try:
        _plot(combined, out / "saturation_rounds.png")
    except PlotsUnavailable:
        print(PLOTS_SKIPPED, file=sys.stderr)
    else:
        print(f"wrote {out / 'saturation_rounds.png'}", file=sys.stderr)


def _plot(combined: dict[str, Any], path: Path) -> None:
    """Each target's saturation in every round (dots) and their median (bar)."""
    plt = pyplot()
    names = [n for n in combined["targets"] if n != "direct"]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.5))
    medians = [combined["targets"][n]["saturation_median"] or 0.0 for n in names]
    ax.barh(names, medians, color="tab:blue", alpha=0.5, label="median over rounds")
    for i, n in enumerate(names):
        sats = [s or 0.0 for s in combined["targets"][n]["saturation_rps"]]
        ax.plot(sats, [i] * len(sats), "o", color="black", markersize=4)
    ax.set_xlabel("highest sustained rate (requests/s), each dot one round")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
