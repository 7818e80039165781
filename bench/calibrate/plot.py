"""`calibration.png`: measured against predicted TTFT and ITL, log-log, with the y = x line."""

from __future__ import annotations

import logging
from pathlib import Path

from bench.calibrate.compare import CellComparison
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

log = logging.getLogger(__name__)


def plot(comparisons: list[CellComparison], path: Path, title: str) -> bool:
    """Write the plot; False (and a warning) when matplotlib is not installed."""
    try:
        plt = pyplot()
    except PlotsUnavailable:
        log.warning(PLOTS_SKIPPED)
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    for ax, name in zip(axes, ("TTFT", "mean ITL"), strict=True):
        lo, hi = float("inf"), 0.0
        for held_back, label, style in (
            (False, "train", {"marker": "o", "facecolors": "none", "edgecolors": "0.55"}),
            (True, "held back", {"marker": "x", "color": "tab:red"}),
        ):
            xs: list[float] = []
            ys: list[float] = []
            for c in comparisons:
                if c.held_back is held_back:
                    m, p = _values(c, name)
                    xs.extend(v * 1e3 for v in m)
                    ys.extend(v * 1e3 for v in p)
            if xs:
                ax.scatter(xs, ys, s=18, label=f"{label} ({len(xs)})", **style)
                lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], color="k", linewidth=0.8, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {name} (ms)")
        ax.set_ylabel(f"predicted {name} (ms)")
        ax.set_title(name)
        ax.grid(True, which="both", linewidth=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _values(c: CellComparison, name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if name == "TTFT":
        return c.measured_ttft_s, c.predicted_ttft_s
    return c.measured_itl_s, c.predicted_itl_s
