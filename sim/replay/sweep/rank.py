"""How `kvgate sim sweep` picks the best run: an objective, SLO constraints, tie-breaks.

The objective is `min:METRIC` or `max:METRIC` over any numeric field of a run's summary
(`ttft_p90_s`, `goodput`, `hit_rate`, ...) or a grid parameter (`replicas`, `rate_scale`):
`min:replicas` with `goodput>=0.95` asks for the smallest fleet that meets the SLO.
Constraints are `METRIC>=X` (or `<=`, `>`, `<`).
Runs that meet every constraint rank first, by the objective; objective values equal to
three significant digits count as ties (finer differences are below the simulator's own
noise between seeds) and go to the tie-break metric, then to the smaller fleet, then to
the higher rate scale (the configuration that holds at more load). `oracle` runs (perfect
signals) are ceilings: they are ranked but never chosen as the best configuration.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from sim.replay.report import PolicySummary
from sim.replay.sweep.grid import GridPoint

GRID_METRICS = ("replicas", "rate_scale")
METRICS = (
    *(f.name for f in fields(PolicySummary) if f.type in ("int", "float")),
    *GRID_METRICS,
)
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_CONSTRAINT = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|>|<)\s*(\S+)\s*$")


def _metric(name: str, option: str) -> str:
    if name not in METRICS:
        raise ValueError(f"{option}: unknown metric {name!r} (one of {', '.join(METRICS)})")
    return name


@dataclass(frozen=True, slots=True)
class Objective:
    """Minimise or maximise one summary metric."""

    metric: str
    maximize: bool

    @classmethod
    def parse(cls, text: str, option: str = "--objective") -> Objective:
        direction, sep, metric = text.strip().partition(":")
        if not sep or direction not in ("min", "max"):
            raise ValueError(f"{option}: expected min:METRIC or max:METRIC, got {text!r}")
        return cls(_metric(metric.strip(), option), direction == "max")

    def __str__(self) -> str:
        return f"{'max' if self.maximize else 'min'}:{self.metric}"

    def key(self, run: SweepRun) -> float:
        """Smaller is better; NaN (nothing measured) is worst."""
        value = metric_value(run, self.metric)
        if math.isnan(value):
            return math.inf
        return -_rounded(value) if self.maximize else _rounded(value)


def default_tie_break(objective: Objective) -> Objective:
    """Goodput breaks ties of latency objectives, p90 TTFT those of everything else."""
    if objective.metric == "goodput":
        return Objective("ttft_p90_s", maximize=False)
    return Objective("goodput", maximize=True)


@dataclass(frozen=True, slots=True)
class Constraint:
    """A bound a run must meet to be eligible, e.g. `goodput>=0.9`."""

    metric: str
    op: str
    bound: float

    @classmethod
    def parse(cls, text: str) -> Constraint:
        match = _CONSTRAINT.match(text)
        if match is None:
            raise ValueError(f"--constraint: expected METRIC>=X (or <=, >, <), got {text!r}")
        metric, op, bound = match.groups()
        try:
            value = float(bound)
        except ValueError:
            raise ValueError(f"--constraint: not a number: {bound!r} in {text!r}") from None
        return cls(_metric(metric, "--constraint"), op, value)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def holds(self, run: SweepRun) -> bool:
        value = metric_value(run, self.metric)
        return not math.isnan(value) and _OPERATORS[self.op](value, self.bound)


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One finished run: where it sits in the grid and what it measured."""

    index: int  # position in the grid, from 0
    point: GridPoint
    summary: PolicySummary


@dataclass(frozen=True, slots=True)
class Ranking:
    """Runs best first, which of them meet the constraints, and the chosen best (or None)."""

    runs: tuple[SweepRun, ...]
    feasible: frozenset[int]  # run indices
    best: SweepRun | None


def rank(
    runs: Sequence[SweepRun],
    objective: Objective,
    tie_break: Objective,
    constraints: Sequence[Constraint] = (),
) -> Ranking:
    """Order the runs (see the module docstring) and choose the best non-oracle run that meets
    every constraint."""
    feasible = frozenset(r.index for r in runs if all(c.holds(r) for c in constraints))

    def order(run: SweepRun) -> tuple[bool, float, float, int, float, int]:
        return (
            run.index not in feasible,
            objective.key(run),
            tie_break.key(run),
            run.point.replicas,
            -run.point.rate_scale,
            run.index,
        )

    ranked = tuple(sorted(runs, key=order))
    best = next((r for r in ranked if r.index in feasible and not r.point.oracle), None)
    return Ranking(ranked, feasible, best)


def metric_value(run: SweepRun, metric: str) -> float:
    """A summary field or grid parameter of a run, as a float."""
    source = run.point if metric in GRID_METRICS else run.summary
    return float(getattr(source, metric))


def _rounded(value: float) -> float:
    return float(f"{value:.3g}")
