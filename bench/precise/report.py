"""`bench.precise`'s table and plot: per cell, the two policies side by side."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

_FIGURES = ("ttft_mean_s", "ttft_p90_s", "hit_rate", "max_mean_share")


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Means over seeds per (cell, policy), with the precise predictions summed."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["cell"], r["policy"])].append(r)
    out = []
    for (cell, policy), rs in groups.items():
        entry: dict[str, Any] = {"cell": cell, "policy": policy, "runs": len(rs)}
        for f in _FIGURES:
            entry[f] = statistics.fmean(r[f] for r in rs)
        n = sum(r["precise"]["requests"] for r in rs)
        exact = sum(r["precise"]["exact"] for r in rs)
        entry["graded"] = n
        entry["exact_share"] = exact / n if n else None
        events_only = sum(r["precise"].get("events_only_exact", 0) for r in rs)
        entry["events_only_exact_share"] = events_only / n if n else None
        entry["errors"] = sum(r["errors"] for r in rs)
        out.append(entry)
    return out


def table(summary_rows: list[dict[str, Any]]) -> str:
    lines = [
        "| cell | policy | mean TTFT | p90 | hit rate | max/mean | exact predictions "
        "| exact from events alone |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in summary_rows:
        share = e["exact_share"]
        exact = f"{share:.1%} of {e['graded']}" if share is not None else "—"
        alone = e.get("events_only_exact_share")
        events = f"{alone:.1%}" if alone is not None else "—"
        lines.append(
            f"| {e['cell']} | {e['policy']} | {e['ttft_mean_s']:.3f} s | {e['ttft_p90_s']:.3f} s"
            f" | {e['hit_rate']:.1%} | {e['max_mean_share']:.2f} | {exact} | {events} |"
        )
    return "\n".join(lines)


def plot(summary_rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: plot skipped")
        return
    cells = list(dict.fromkeys(e["cell"] for e in summary_rows))
    policies = list(dict.fromkeys(e["policy"] for e in summary_rows))
    by = {(e["cell"], e["policy"]): e for e in summary_rows}
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    width = 0.8 / max(1, len(policies))
    for ax, (fig_name, label) in zip(
        axes,
        (
            ("ttft_mean_s", "mean TTFT (s)"),
            ("ttft_p90_s", "p90 TTFT (s)"),
            ("hit_rate", "hit rate"),
        ),
        strict=True,
    ):
        for j, policy in enumerate(policies):
            xs = [i + j * width for i in range(len(cells))]
            ys = [by[(c, policy)][fig_name] if (c, policy) in by else 0 for c in cells]
            ax.bar(xs, ys, width, label=policy)
        ax.set_xticks([i + width * (len(policies) - 1) / 2 for i in range(len(cells))])
        ax.set_xticklabels(cells, rotation=30, ha="right", fontsize=8)
        ax.set_title(label)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
