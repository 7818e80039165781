"""`Objectives`: InferenceObjectives by name, and the admission band a priority maps to.

A request names its objective (header `x-llm-d-inference-objective`); the objective's integer
priority places it: above 0 in the first band, 0 in the default band (`standard`, else the
last), below 0 in the last band, the sheddable one. An unknown name, like none, counts as
priority 0 (the reference picker's default). The table is the config's objectives overlaid by
the cluster's (`watched`, replaced whole on every change; the cluster's win on a shared name).
"""

from __future__ import annotations

from collections.abc import Mapping


class Objectives:
    """Objective name → priority, from the config and from the cluster."""

    def __init__(self, configured: Mapping[str, int] | None = None) -> None:
        self._configured = dict(configured or {})
        self._watched: dict[str, int] = {}
        self._all = dict(self._configured)

    def __len__(self) -> int:
        return len(self._all)

    def watched(self, priorities: Mapping[str, int]) -> None:
        """The cluster's objectives now (all of them)."""
        self._watched = dict(priorities)
        self._all = {**self._configured, **self._watched}

    def priority(self, name: str | None) -> int | None:
        """The priority of objective `name`; None when it is not known."""
        return None if name is None else self._all.get(name)


def band_of(priority: int, bands: int, default: int) -> int:
    """The band (0 highest, `bands` of them) of a request of `priority`."""
    if priority > 0:
        return 0
    if priority < 0:
        return bands - 1
    return default
