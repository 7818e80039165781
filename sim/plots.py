"""Plotting is optional: matplotlib comes with the `kvgate[plots]` extra.

Every module that plots calls `pyplot()` inside its plotting function, so matplotlib is
imported only when a plot is drawn; without it `pyplot()` raises `PlotsUnavailable`, and the
caller writes its JSON anyway and prints `PLOTS_SKIPPED` once.
"""

from __future__ import annotations

from types import ModuleType

PLOTS_SKIPPED = "plots skipped: matplotlib is not installed (pip install 'kvgate[plots]')"


class PlotsUnavailable(ImportError):
    """matplotlib is not installed."""


def pyplot() -> ModuleType:
    """`matplotlib.pyplot` on the file-only Agg backend; `PlotsUnavailable` without it."""
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable(PLOTS_SKIPPED) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
