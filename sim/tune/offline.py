"""`kvgate sim tune --trace FILE`: what the tuner would have done over a whole trace.

The trace is cut into consecutive windows of `--interval` seconds (each replayed with the last
`--window` seconds, by default the same, after the `--lead-in` seconds before them, by default
a window's length: unmeasured, routed by the profile that ran then); at the end of each window
the tuner evaluates it (`evaluate`, `propose`) and `controller.step` decides the profile for
the next. Each window's row: the profile that ran in it and its replayed mean TTFT beside the
config's own profile (the fixed default) and the best named profile for that window; then the
proposal. The totals weigh windows by requests: tuned vs fixed default vs the best fixed
profile per window, and the share of switches whose predicted gain had the sign the next
window then measured. Without a lead-in, replays start each window on cold caches (for every
profile alike). A recording's observed TTFTs (of the config's profile, which recorded it)
count only while that profile runs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from routing.config.tuning import TuningSection
from routing.traces import TraceRequest
from sim.replay.cli import load_inputs
from sim.replay.settings import SimSettings, load_config
from sim.replay.sweep.command import open_runner
from sim.replay.sweep.runners import SweepRunner
from sim.tune.candidates import Candidate, candidate_set, named
from sim.tune.controller import Action, TunerState, step
from sim.tune.evaluate import Evaluation, FleetShape, ran_most, span
from sim.tune.proposal import Proposal, assess
from sim.tune.timing import Timing, fit_timing, named_timing


@dataclass(frozen=True, slots=True)
class WindowRow:
    """One window: what ran, what the alternatives would have got, what was decided."""

    index: int
    end_s: float
    requests: int
    ran: str
    ran_ttft_s: float
    default_ttft_s: float
    best_fixed: str
    best_fixed_ttft_s: float
    proposal: Proposal
    action: Action
    measured_gain: float | None  # the previous switch's gain, measured on this window


def tuning_settings(args: argparse.Namespace, section: TuningSection) -> TuningSection:
    """The config's `tuning:` section with the command line's overrides."""
    update: dict[str, Any] = {}
    for flag, key in (
        ("interval", "interval_s"),
        ("window", "window_s"),
        ("lead_in", "lead_in_s"),
        ("seeds", "seeds"),
        ("search", "search"),
        ("min_gain", "min_gain"),
        ("confidence", "confidence"),
        ("min_requests", "min_requests"),
        ("engine_timing", "engine_timing"),
    ):
        if getattr(args, flag, None) is not None:
            update[key] = getattr(args, flag)
    if args.candidates:
        update["candidates"] = [c for c in args.candidates.split(",") if c]
    if args.window is None and args.interval is not None:
        update["window_s"] = args.interval
    return TuningSection.model_validate({**section.model_dump(), **update})


def run_tune(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The `kvgate sim tune` command (to `out`, by default the standard output of the call)."""
    out = out or sys.stdout
    from routing.config.schema import load_config as load_gateway_config

    config = load_gateway_config(args.config)
    tuning = tuning_settings(args, config.tuning)
    base = SimSettings(seed=0, **load_config(args.config))
    trace, profile, notes = load_inputs(args)
    shape = FleetShape(args.replicas, profile)
    home = base.routing.policy
    named_ones = named(base.routing, list(dict.fromkeys([home, *tuning.candidates])))
    print(
        f"{len(trace):,} requests from {args.trace}; {shape.describe()}; windows of "
        f"{tuning.interval_s:g} s (replaying {tuning.window_s:g} s after a lead-in of "
        f"{tuning.lead_in:g} s); mode {args.mode}; "
        f"{len(named_ones)} named profiles + {tuning.search} variants, {tuning.seeds} seeds",
        file=out,
    )
    for line in notes:
        print(line, file=out)
    with open_runner(args.jobs, args.ray, None) as runner:
        loop = TuneLoop(shape, base, tuning, named_ones, args.mode, runner)
        rows = _windows(trace, loop, out)
    totals = summarize_rows(rows, home)
    _print_totals(totals, out)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tune.json"
    body = {"trace": str(args.trace), "mode": args.mode, "home": home, **totals}
    body["windows"] = [_row_json(r) for r in rows]
    path.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
    print(f"wrote {path}", file=out)
    return 0


@dataclass(frozen=True, slots=True)
class TuneLoop:
    """The loop's fixed inputs: fleet, replay settings, `tuning:`, named profiles (the
    config's own first), mode and where the replays run."""

    shape: FleetShape
    base: SimSettings
    tuning: TuningSection
    named_ones: list[Candidate]
    mode: str
    runner: SweepRunner


def _windows(trace: list[TraceRequest], loop: TuneLoop, out: TextIO) -> list[WindowRow]:
    tuning, named_ones = loop.tuning, loop.named_ones
    home = named_ones[0]
    state = TunerState(Candidate(home.name, home.profile, "live"))
    last = trace[-1].arrival_s if trace else 0.0
    ends = [tuning.interval_s * k for k in range(1, math.ceil(last / tuning.interval_s) + 1)]
    rows: list[WindowRow] = []
    pending: tuple[str, Candidate, float] | None = None  # a proposal: from, to, its gain
    ran: list[tuple[float, Candidate]] = [(-math.inf, state.live)]  # (since, profile)
    for k, end in enumerate(ends):
        lead_in = ran_most(ran, end - tuning.window_s, tuning.lead_in)
        part = span(trace, end, tuning.window_s, tuning.lead_in, lead_in)
        if len(part.measured) < tuning.min_requests:
            print(f"window {k} (to {end:g} s): {len(part.measured)} requests, skipped", file=out)
            continue
        if state.live.name != home.name:  # the recorded TTFTs are of the recorded profile
            part = replace(part, requests=[replace(r, ttft_s=None) for r in part.requests])
        requests = part.measured
        others = [*named_ones, *([state.previous] if state.previous else [])]
        others += [pending[1]] if pending else []
        candidates = candidate_set(state.live, others, tuning.search, seed=k)
        started = time.process_time()
        timing = (
            fit_timing(requests, loop.shape.engine, tuning.fit_min_requests)
            if tuning.engine_timing == "fitted"
            else named_timing(loop.shape.engine)
        )
        shape = FleetShape(loop.shape.replicas, timing.engine)
        proposal = assess(part, candidates, shape, loop.base, tuning, runner=loop.runner)
        ev = proposal.evaluation
        measured = _measured(ev, pending)
        running = state.live.name
        state, action = step(state, proposal, loop.mode, tuning.rollback_tolerance, home=home,
                             min_gain=tuning.min_gain, windows=tuning.check_windows)  # fmt: skip
        pending = None
        if action.kind in ("switch", "propose"):
            pending = (running, action.target, action.gain or 0.0)
        if state.live.name != running:
            ran.append((end, state.live))
        row = _row(k, end, ev, ran=running, home=home.name, named_ones=named_ones,
                   outcome=(proposal, action, measured))  # fmt: skip
        rows.append(row)
        print(
            f"window {k} (to {end:g} s): {row.requests} requests; ran {running} "
            f"{row.ran_ttft_s:.3f} s, default {row.default_ttft_s:.3f} s, best fixed "
            f"{row.best_fixed} {row.best_fixed_ttft_s:.3f} s; {action.kind}: {action.reason} "
            f"({time.process_time() - started:.1f} s CPU{_fidelity(ev, timing)})",
            file=out,
            flush=True,
        )
    return rows


def _fidelity(ev: Evaluation, timing: Timing) -> str:
    if ev.fidelity is None:
        return ""
    return f"; fidelity {ev.fidelity:.2f}, engine timing {timing.describe()}"


def _measured(ev: Evaluation, pending: tuple[str, Candidate, float] | None) -> float | None:
    """The last proposal's gain on this window (seed 0): 1 − TTFT(proposed) / TTFT(from)."""
    if pending is None:
        return None
    before, after = ev.of(pending[0]), ev.of(pending[1].name)
    if before is None or after is None or before[0] <= 0:
        return None
    return 1.0 - after[0] / before[0]


def _row(
    k: int,
    end: float,
    ev: Evaluation,
    *,
    ran: str,
    home: str,
    named_ones: list[Candidate],
    outcome: tuple[Proposal, Action, float | None],
) -> WindowRow:
    fixed = {c.name: (ev.of(c.name) or (math.inf,))[0] for c in named_ones}
    best = min(fixed, key=lambda n: fixed[n])
    return WindowRow(
        k, end, ev.requests, ran, ev.ttft_mean_s[0][0], fixed[home], best, fixed[best],
        *outcome,
    )  # fmt: skip


def summarize_rows(rows: list[WindowRow], home: str) -> dict[str, Any]:
    """Request-weighted mean TTFTs (tuned, fixed default, best fixed per window), switches,
    rollbacks and the sign agreement of predicted and measured gains."""
    n = sum(r.requests for r in rows) or 1
    tuned = sum(r.ran_ttft_s * r.requests for r in rows) / n
    default = sum(r.default_ttft_s * r.requests for r in rows) / n
    best = sum(r.best_fixed_ttft_s * r.requests for r in rows) / n
    checked = [
        (prev.action.gain or 0.0, r.measured_gain)
        for prev, r in itertools.pairwise(rows)
        if r.measured_gain is not None
    ]
    agree = sum((p > 0) == (m > 0) for p, m in checked)
    return {
        "requests": sum(r.requests for r in rows),
        "tuned_ttft_mean_s": tuned,
        "default_ttft_mean_s": default,
        "best_fixed_ttft_mean_s": best,
        "tuned_vs_default": tuned / default if default else None,
        "tuned_vs_best_fixed": tuned / best if best else None,
        "switches": sum(r.action.kind == "switch" for r in rows),
        "rollbacks": sum(r.action.kind == "rollback" for r in rows),
        "proposals": sum(r.action.kind in ("switch", "propose") for r in rows),
        "sign_checked": len(checked),
        "sign_agreement": agree / len(checked) if checked else None,
    }


def _print_totals(t: dict[str, Any], out: TextIO) -> None:
    agreement = t["sign_agreement"]
    print(
        f"\nmean TTFT over {t['requests']:,} requests: tuned {t['tuned_ttft_mean_s']:.3f} s, "
        f"fixed default {t['default_ttft_mean_s']:.3f} s "
        f"({_ratio(t['tuned_vs_default'])}), best fixed per window "
        f"{t['best_fixed_ttft_mean_s']:.3f} s ({_ratio(t['tuned_vs_best_fixed'])}); "
        f"{t['switches']} switches, {t['rollbacks']} rollbacks; predicted gains "
        + (
            f"agreed in sign with the next window's in {agreement:.0%} of {t['sign_checked']}"
            if agreement is not None
            else "not checked (no switch followed by a window)"
        ),
        file=out,
    )


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _row_json(r: WindowRow) -> dict[str, Any]:
    return {
        "window": r.index,
        "end_s": r.end_s,
        "requests": r.requests,
        "ran": r.ran,
        "ran_ttft_mean_s": r.ran_ttft_s,
        "default_ttft_mean_s": r.default_ttft_s,
        "best_fixed": r.best_fixed,
        "best_fixed_ttft_mean_s": r.best_fixed_ttft_s,
        "action": r.action.kind,
        "target": r.action.target.name,
        "reason": r.action.reason,
        "predicted_gain": r.action.gain,
        "measured_gain": r.measured_gain,
        "proposal": r.proposal.to_json(),
    }
