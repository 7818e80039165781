"""Where the runs of a sweep execute: in this process or in local worker processes; on a Ray
cluster in `ray_runner` (`command.open_runner` picks one).

Every runner calls `run_point` with the same inputs — the trace at the run's rate scale, the
engine profile, the run's policy and settings — and a replay depends on nothing else (virtual
time, seeded RNGs, no process-global state), so the summaries do not depend on the runner:
only the wall times do. A runner is a context manager (Ray connects on entry and lets go on
exit) whose `run` yields `(index, summary)` in the order the runs finish.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, TextIO

from routing.traces import TraceRequest
from sim.engine.types import EngineProfile
from sim.replay.cli import replay_policy
from sim.replay.report import PolicySummary, summarize
from sim.replay.settings import SimSettings

Traces = Mapping[float, Sequence[TraceRequest]]  # the trace at each rate scale of the grid


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run's inputs besides the trace and the engine profile, which all runs share."""

    index: int
    label: str  # policy, weights, replicas and rate scale, for messages
    policy: str
    rate_scale: float
    settings: SimSettings


class SweepRunError(RuntimeError):
    """A run could not complete: its worker or node died every time it was tried."""


class SweepRunner(Protocol):
    """Executes the runs of a sweep; `describe` says where, for the header and sweep.json."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def describe(self) -> str: ...

    def run(
        self, specs: Sequence[RunSpec], traces: Traces, profile: EngineProfile
    ) -> Iterator[tuple[int, PolicySummary]]: ...


def run_point(
    trace: Sequence[TraceRequest],
    policy: str,
    profile: EngineProfile,
    settings: SimSettings,
    out: TextIO | None = None,
) -> PolicySummary:
    """One run of the sweep: a replay and its summary (with its wall and CPU seconds)."""
    result, seconds, cpu = replay_policy(trace, policy, profile, settings, out)
    return summarize(result, settings, seconds, cpu)


class LocalRunner:
    """`--jobs 1`: the runs one after another in this process, with the replay's own
    progress lines for long runs; `--jobs N`: N worker processes."""

    def __init__(self, jobs: int, out: TextIO | None = None) -> None:
        self.jobs = jobs
        self._out = out

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def describe(self) -> str:
        return f"local, {self.jobs} {'job' if self.jobs == 1 else 'jobs'}"

    def run(
        self, specs: Sequence[RunSpec], traces: Traces, profile: EngineProfile
    ) -> Iterator[tuple[int, PolicySummary]]:
        if self.jobs == 1:
            for s in specs:
                trace = traces[s.rate_scale]
                yield s.index, run_point(trace, s.policy, profile, s.settings, self._out)
            return
        with ProcessPoolExecutor(max_workers=self.jobs) as pool:
            futures = {
                pool.submit(run_point, traces[s.rate_scale], s.policy, profile, s.settings): s.index
                for s in specs
            }
            for future in as_completed(futures):
                yield futures[future], future.result()
