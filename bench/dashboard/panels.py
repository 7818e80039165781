"""The dashboard's panels evaluated over a run's scrapes, and drawn as the dashboard lays them.

`panel_series` evaluates every target of every panel at each step (`$__rate_interval` and
the template variables substituted: every job, model, pool, backend and instance), naming
each series by the target's legend format. `draw` places each panel by its `gridPos` (24
columns; a grid unit of height is 30 px in Grafana) on one figure, rows as headings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.dashboard.promql import Labels, Store, evaluate

Series = dict[str, list[tuple[float, float]]]  # legend → [(t, value)]
_VARIABLES = {v: ".*" for v in ("$job", "$model", "$pool", "$backend", "$instance")}


def substitute(expr: str, rate_interval_s: int) -> str:
    """Grafana's variables as an unfiltered dashboard sets them."""
    expr = expr.replace("$__rate_interval", f"{rate_interval_s}s")
    for name, value in _VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def _legend(fmt: str, labels: Labels) -> str:
    values = dict(labels)
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values.get(m.group(1), ""), fmt)
    return text.strip() or "value"


def panel_series(
    dashboard: Mapping[str, Any], store: Store, times: Sequence[float], rate_interval_s: int
) -> dict[str, Series]:
    """Panel title → its series over `times`."""
    out: dict[str, Series] = {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        series: Series = {}
        for target in panel["targets"]:
            expr = substitute(target["expr"], rate_interval_s)
            for t in times:
                for labels, value in evaluate(expr, store, t).items():
                    if math.isfinite(value):
                        name = _legend(target.get("legendFormat", ""), labels)
                        series.setdefault(name, []).append((t, value))
        out[panel["title"]] = series
    return out


def _scaled(unit: str, series: Series) -> tuple[Series, str]:
    """Values in a readable unit, and its label."""
    peak = max((abs(v) for points in series.values() for _, v in points), default=0.0)
    factor, label = (
        1.0,
        {"reqps": "req/s", "percentunit": "%", "s": "s", "bytes": "B"}.get(unit, ""),
    )
    if unit == "percentunit":
        factor = 100.0
    elif unit == "s" and peak < 1.0:
        factor, label = (1e3, "ms") if peak >= 1e-3 else (1e6, "µs")
    elif unit == "bytes" and peak >= 1024:
        factor, label = (1 / 1024, "KiB") if peak < 1024**2 else (1 / 1024**2, "MiB")
    scaled = {k: [(t, v * factor) for t, v in points] for k, points in series.items()}
    return scaled, label


def draw(
    dashboard: Mapping[str, Any], series: Mapping[str, Series], title: str, path: Path
) -> None:
    """One figure laid out like the dashboard."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = dashboard["panels"]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_h = 0.42  # inches per grid unit of height
    inches = height * unit_h + 0.6
    fig = plt.figure(figsize=(22, inches))
    fig.suptitle(title, fontsize=13, x=0.01, y=1 - 0.15 / inches, ha="left")
    top = 1 - 0.6 / inches
    pad_y = 0.55 / inches  # room for the x labels below a panel and its title above
    for panel in panels:
        pos = panel["gridPos"]
        x0, w = pos["x"] / 24, pos["w"] / 24
        y1 = top * (1 - pos["y"] / height)
        h = top * pos["h"] / height
        if panel["type"] == "row":
            fig.text(
                x0 + 0.005, y1 - h / 2, panel["title"], fontsize=12, weight="bold", va="center"
            )
            continue
        ax = fig.add_axes((x0 + 0.03, y1 - h + pad_y, w - 0.045, h - 1.6 * pad_y))
        _plot_panel(ax, panel, series.get(panel["title"], {}))
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _plot_panel(ax: Any, panel: Mapping[str, Any], series: Series) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    scaled, label = _scaled(defaults.get("unit", "short"), series)
    ax.set_title(panel["title"], fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)
    stacked = defaults.get("custom", {}).get("stacking", {}).get("mode") == "normal"
    names = sorted(scaled)
    if stacked and names:
        times = sorted({t for n in names for t, _ in scaled[n]})
        rows = [dict(scaled[n]) for n in names]
        ys = [[r.get(t, 0.0) for t in times] for r in rows]
        ax.stackplot(times, ys, labels=names, alpha=0.7)
    else:
        for name in names:
            ts, vs = zip(*scaled[name], strict=True)
            ax.plot(ts, vs, label=name, linewidth=1.2)
    if not names:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="grey")
    ax.set_ylabel(label, fontsize=8)
    factor = 100.0 if defaults.get("unit") == "percentunit" else 1.0
    if "min" in defaults and "max" in defaults:  # a fixed scale, as the panel sets it
        lo, hi = defaults["min"] * factor, defaults["max"] * factor
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    if names:
        ax.legend(fontsize=7, loc="upper left", ncol=2 if len(names) > 4 else 1)
    ax.set_xlabel("s", fontsize=8)
