"""`kvgate sim sweep`: replay one trace over a grid of policies × scorer weights × replica
counts × rate scales and name the best configuration for an objective.

Each run is an ordinary `kvgate sim` replay (`replay_policy`, `summarize`); the grid is in
`grid`, the choice of the best run in `rank`, the outputs in `report`, and where the runs
execute in `runners`: `--jobs N` runs N replays at a time in worker processes, `--ray
[ADDRESS]` as tasks on a Ray cluster. The replays are deterministic, so the results do not
depend on the runner (only the wall times do).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from routing.traces import TraceRequest
from sim.engine.types import EngineProfile
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable
from sim.replay.cli import load_inputs
from sim.replay.settings import SimSettings, load_config
from sim.replay.sweep.grid import (
    GridPoint,
    expand_grid,
    parse_names,
    parse_numbers,
    parse_weights,
    with_weights,
)
from sim.replay.sweep.rank import (
    GRID_METRICS,
    Constraint,
    Objective,
    SweepRun,
    default_tie_break,
    metric_value,
    rank,
)
from sim.replay.sweep.ray_runner import RayRunner
from sim.replay.sweep.report import (
    best_routing_yaml,
    format_ranking,
    write_sweep_json,
    write_sweep_plot,
)
from sim.replay.sweep.runners import LocalRunner, RunSpec, SweepRunner
from sim.traces import time_scaled

DEFAULT_POLICIES = "round-robin,least-load,prefix-aware"
DEFAULT_OBJECTIVE = "max:goodput"


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The validated command line: the grid and how to judge it."""

    points: tuple[GridPoint, ...]
    notes: tuple[str, ...]
    base: SimSettings  # replicas and routing are set per run
    objective: Objective
    tie_break: Objective
    constraints: tuple[Constraint, ...]
    jobs: int
    ray: str | None  # --ray's address ("" for the local instance), None without --ray


def plan_sweep(args: argparse.Namespace) -> SweepPlan:
    """Parse and check everything that does not need the trace; ValueError names the option."""
    objective = Objective.parse(args.objective)
    tie_break = (
        Objective.parse(args.tie_break, "--tie-break")
        if args.tie_break
        else default_tie_break(objective)
    )
    constraints = tuple(Constraint.parse(c) for c in args.constraint or ())
    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    ray = getattr(args, "ray", None)
    if ray is not None and args.jobs != 1:
        raise ValueError("--jobs is for local runs: with --ray, the cluster's CPUs run the runs")
    base = SimSettings(
        seed=args.seed,
        slo_ttft_s=args.slo_ttft,
        slo_itl_s=args.slo_itl,
        kv_event_delay_s=args.kv_event_delay,
        gateway_overhead_s=args.gateway_overhead,
        gateway_overhead_token_s=args.gateway_overhead_token,
        **load_config(args.config),
    )
    points, notes = expand_grid(
        base.routing,
        parse_names(args.policies, "--policies"),
        parse_weights(args.weights),
        [int(n) for n in parse_numbers(args.replicas, "--replicas", integer=True)],
        parse_numbers(args.rate_scale, "--rate-scale"),
    )
    return SweepPlan(
        tuple(points), tuple(notes), base, objective, tie_break, constraints, args.jobs, ray
    )


def open_runner(jobs: int, ray_address: str | None, out: TextIO | None = None) -> SweepRunner:
    """The runner the command line asks for: Ray when `ray_address` is not None ("" for the
    local instance), else local; ValueError (naming the extra) when Ray is not installed."""
    if ray_address is None:
        return LocalRunner(jobs, out)
    return RayRunner(ray_address, out)


def run_sweep(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """The `kvgate sim sweep` command: 0 with a best configuration, 1 if no run qualifies."""
    plan = plan_sweep(args)
    with open_runner(plan.jobs, plan.ray, out) as runner:
        return _sweep(args, plan, runner, out)


def _sweep(args: argparse.Namespace, plan: SweepPlan, runner: SweepRunner, out: TextIO) -> int:
    trace, profile, notes = load_inputs(args)
    traces = {
        s: trace if s == 1.0 else time_scaled(trace, s) for s in {p.rate_scale for p in plan.points}
    }
    span = trace[-1].arrival_s if trace else 0.0
    print(
        f"{len(trace):,} requests over {span:,.0f} s from {args.trace}; engines "
        f"{profile.name}; {len(plan.points)} runs; objective {plan.objective} "
        f"(ties: {plan.tie_break})"
        + "".join(f"; {c}" for c in plan.constraints)
        + f"; {runner.describe()}",
        file=out,
    )
    for line in (*notes, *plan.notes):
        print(line, file=out)
    started = time.perf_counter()
    runs = sorted(_execute(plan, runner, traces, profile, out), key=lambda r: r.index)
    wall = time.perf_counter() - started
    ranking = rank(runs, plan.objective, plan.tie_break, plan.constraints)
    print(file=out)
    print(format_ranking(ranking, plan.objective), file=out)
    print(
        f"{len(runs)} runs in {wall:.1f} s; goodput: TTFT <= {plan.base.slo_ttft_s:g} s and "
        f"mean ITL <= {plan.base.slo_itl_s:g} s",
        file=out,
    )
    snippet = ""
    if ranking.best is None:
        who = "only oracle runs (ceilings) meet" if ranking.feasible else "no run meets"
        print(f"{who} the constraints: no best configuration", file=out)
    else:
        snippet = best_routing_yaml(
            ranking.best, plan.base.routing, plan.objective, plan.constraints
        )
        print(f"\nbest configuration:\n{snippet}", file=out)
    out_dir = Path(args.out)
    header = _header(args, plan, len(trace), profile.name, wall) | {"runner": runner.describe()}
    paths = [write_sweep_json(header, ranking, snippet, out_dir)]
    best_yaml = out_dir / "best_routing.yaml"
    if snippet:
        best_yaml.write_text(snippet, encoding="utf-8")
        paths.append(best_yaml)
    else:
        best_yaml.unlink(missing_ok=True)  # a previous sweep's answer is not this one's
    try:
        # A grid parameter against the replica count says nothing: plot the tie-break then.
        shown = plan.tie_break if plan.objective.metric in GRID_METRICS else plan.objective
        paths.append(write_sweep_plot(ranking, shown.metric, out_dir))
    except PlotsUnavailable:
        print(PLOTS_SKIPPED, file=out)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=out)
    return 0 if ranking.best is not None else 1


def _settings(plan: SweepPlan, point: GridPoint) -> SimSettings:
    routing = with_weights(plan.base.routing, point.policy, point.weights)
    return replace(plan.base, replicas=point.replicas, routing=routing)


def _execute(
    plan: SweepPlan,
    runner: SweepRunner,
    traces: Mapping[float, Sequence[TraceRequest]],
    profile: EngineProfile,
    out: TextIO,
) -> Iterator[SweepRun]:
    """Every run of the grid, in the order they finish, with a progress line (and ETA) each."""
    total = len(plan.points)
    specs = [
        RunSpec(i, _label(p), p.policy, p.rate_scale, _settings(plan, p))
        for i, p in enumerate(plan.points)
    ]
    started = time.perf_counter()
    for done, (index, summary) in enumerate(runner.run(specs, traces, profile), 1):
        point = plan.points[index]
        elapsed = time.perf_counter() - started
        value = metric_value(SweepRun(index, point, summary), plan.objective.metric)
        print(
            f"run {done}/{total}: {_label(point)}: {plan.objective.metric} {value:.4g} "
            f"({summary.sim_seconds:.1f} s); elapsed {elapsed:.0f} s, "
            f"ETA {elapsed / done * (total - done):.0f} s",
            file=out,
            flush=True,
        )
        yield SweepRun(index, point, summary)


def _label(point: GridPoint) -> str:
    return f"{point.policy} {point.weights_label()} x{point.replicas} rate {point.rate_scale:g}"


def _header(
    args: argparse.Namespace, plan: SweepPlan, requests: int, profile: str, wall: float
) -> dict[str, Any]:
    weights: dict[str, list[float]] = {}
    for point in plan.points:
        for scorer, weight in point.weights:
            if weight not in weights.setdefault(scorer, []):
                weights[scorer].append(weight)
    return {
        "trace": str(args.trace),
        "requests": requests,
        "engine_profile": profile,
        "objective": str(plan.objective),
        "tie_break": str(plan.tie_break),
        "constraints": [str(c) for c in plan.constraints],
        "slo_ttft_s": plan.base.slo_ttft_s,
        "slo_itl_s": plan.base.slo_itl_s,
        "seed": plan.base.seed,
        "grid": {
            "policies": list(dict.fromkeys(p.policy for p in plan.points)),
            "weights": weights,
            "replicas": sorted({p.replicas for p in plan.points}),
            "rate_scales": sorted({p.rate_scale for p in plan.points}),
        },
        "notes": list(plan.notes),
        "wall_seconds": wall,
    }
