"""`python -m bench tune`: the self-tuning loop on a live emulated fleet, on a workload whose
regime changes (`bench.tune.phases`: cache pressure, tenant popularity and load per phase).

1. Offline, each phase's best fixed profile: the phase replayed alone under the named
   profiles and every one-knob variant of the default (`bench.tune.fixed`).
2. Live, the same open-loop schedule through: the fixed default; each phase's best fixed
   profile; the profiles named with --fixed; the default with `kvgate tune` (apply) beside it.
3. Figures: whole-run mean TTFT, apply / fixed default; per phase, apply / offline's best
   (run live) and / the best fixed run; switches and rollbacks; each switch's predicted gain
   against the gain measured over the next interval and over all the time its profile ran
   (apply against the fixed run of the profile it replaced, same requests); errors; the
   tuner's CPU. Writes `tune.json` to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from bench.regime.grid import FleetSpec
from bench.tune import live
from bench.tune.fixed import PhaseSweep, candidates, sweep_phases
from bench.tune.phases import FAMILIES, phase_chats, requests, scaled, write_trace
from routing.config.profiles import BUILTIN_PROFILES
from routing.traces.recorded import load_recorded
from sim.live.experiment import ExperimentResult, RouterFactory
from sim.workloads.open_loop import TimedRequest

DEFAULT = "prefix-aware"


def parse(argv: list[str] | None) -> argparse.Namespace:
    summary = " ".join(__doc__.split("\n\n")[0].split())  # the first paragraph, one line
    p = argparse.ArgumentParser(prog="python -m bench tune", description=summary)
    p.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        default="regimes",
        help="the phases (bench.tune.phases): regimes (default), pressure or long",
    )
    p.add_argument("--seconds", type=float, help="per phase (default: each phase's own)")
    p.add_argument("--rate", type=float, default=1.0, help="request-rate multiplier")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--interval", type=float, default=15.0, help="tuner interval and window")
    p.add_argument("--seeds", type=int, default=2, help="tuner seeds")
    p.add_argument("--search", type=int, default=4, help="tuner variants per evaluation")
    p.add_argument("--min-gain", type=float, default=0.05)
    p.add_argument("--confidence", type=float, default=1.0)
    p.add_argument(
        "--rollback-tolerance",
        type=float,
        default=0.2,
        help="tuning.rollback_tolerance (default %(default)s)",
    )
    p.add_argument(
        "--check-windows",
        type=int,
        default=2,
        help="tuning.check_windows (default %(default)s)",
    )
    p.add_argument("--shadow", action="store_true", help="also run the tuner in shadow mode")
    p.add_argument("--no-fixed", action="store_true", help="skip the best-fixed live runs")
    p.add_argument(
        "--fixed",
        type=lambda s: [n for n in s.split(",") if n],
        default=[],
        metavar="NAME,...",
        help="more fixed live runs: built-in profiles or one-knob variants of the default "
        "(e.g. prefix-aware~prefix-match=4)",
    )
    p.add_argument("--out", type=Path, default=Path("out/bench-tune"))
    return p.parse_args(argv)


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    fleet = FleetSpec()
    pool = {c.name: c for c in candidates()}
    unknown = [n for n in args.fixed if n not in pool]
    if unknown:
        raise SystemExit(f"--fixed: unknown profile(s) {', '.join(unknown)}")
    phases = scaled(FAMILIES[args.family], args.seconds, args.rate)
    sweeps = sweep_phases(phases, fleet, args.seed)
    for s in sweeps:
        print(f"offline {s.phase}: best {s.best.name} {s.ranked[0][1]:.3f} s", flush=True)
    write_trace(args.out / "phases.jsonl", phases, fleet, args.seed)  # for kvgate sim tune
    schedule = requests(phases, fleet, args.seed)
    _, _, spans = phase_chats(phases, fleet, args.seed)
    chosen = [s.best for s in sweeps] + [pool[n] for n in args.fixed]
    profiles = {c.name: c.profile for c in chosen if c.name not in BUILTIN_PROFILES}
    tuning = {
        "interval_s": args.interval,
        "window_s": args.interval,
        "min_requests": 20,
        "seeds": args.seeds,
        "search": args.search,
        "min_gain": args.min_gain,
        "confidence": args.confidence,
        "rollback_tolerance": args.rollback_tolerance,
        "check_windows": args.check_windows,
        "candidates": ["prefix-aware", "least-load", "estimated-ttft"],
        "engine_profile": fleet.profile,
    }
    runs: dict[str, tuple[ExperimentResult, dict[str, Any]]] = {}
    fixed = [DEFAULT] + ([] if args.no_fixed else [s.best.name for s in sweeps]) + args.fixed
    for name in dict.fromkeys(fixed):
        config = live.write_config(args.out / f"fixed-{name}.yaml", name, profiles)
        seen: dict[str, Any] = {}
        router = live.gateway_with_tuner(config, name, tuner=False, seen=seen)
        runs[f"fixed:{name}"] = (await _live(f"fixed-{name}", schedule, fleet, router, args), seen)
        _keep(args.out, f"fixed-{name}", runs[f"fixed:{name}"])
    for mode in ("apply", "shadow") if args.shadow else ("apply",):
        config = _fresh(
            live.write_config(
                args.out / f"{mode}.yaml", DEFAULT, profiles, {**tuning, "mode": mode}
            )
        )
        seen = {}
        router = live.gateway_with_tuner(config, DEFAULT, tuner=True, seen=seen)
        runs[mode] = (await _live(mode, schedule, fleet, router, args), seen)
        _keep(args.out, mode, runs[mode])
    return report(runs, sweeps, schedule, spans, args)


async def _live(
    label: str,
    schedule: list[TimedRequest],
    fleet: FleetSpec,
    router: RouterFactory,
    args: argparse.Namespace,
) -> ExperimentResult:
    return await live.run_live(label, schedule, fleet, router, args.out / "logs")


def _keep(out: Path, label: str, run: tuple[ExperimentResult, dict[str, Any]]) -> None:
    """A run's requests (id, TTFT, error) and `/admin/tuning`, as soon as it ends."""
    result, seen = run
    rows = [(r.request, r.ttft_s, r.error) for r in result.results]
    path = out / "runs" / f"{label}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps({"results": rows, "tuning": seen, **result.figures()}))


def _run_start(recording: Path) -> float:
    """The epoch second the workload's first request reached the gateway (its recording)."""
    header = orjson.loads(recording.read_bytes().split(b"\n", 1)[0])
    started = datetime.fromisoformat(header["started_at"]).timestamp()
    trace = load_recorded(recording)
    return started + (trace[0].arrival_s if trace else 0.0)


def _fresh(config: Path) -> Path:
    """A tuned run's config, its recording removed: the recorder appends, and an earlier
    run's lines would be replayed and would shift the run's clock."""
    config.with_suffix(".jsonl").unlink(missing_ok=True)
    return config


def report(
    runs: dict[str, tuple[ExperimentResult, dict[str, Any]]],
    sweeps: list[PhaseSweep],
    schedule: list[TimedRequest],
    spans: list[tuple[str, float, float]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for label, (result, _) in runs.items():
        by_phase = live.phase_ttfts(result, schedule, spans)
        figures[label] = {
            "ttft_mean_s": result.ttft_mean_s,
            "ttft_p90_s": result.ttft_p90_s,
            "errors": len(result.errors),
            "requests": len(result.results),
            "phases": {p: _mean(t) for p, t in by_phase.items()},
        }
    default = figures[f"fixed:{DEFAULT}"]
    out: dict[str, Any] = {"runs": figures, "phases": [], "switches": []}
    for s, (name, start, end) in zip(sweeps, spans, strict=True):
        best = figures.get(f"fixed:{s.best.name}", default)["phases"][name]
        fixed = {k: f["phases"][name] for k, f in figures.items() if k.startswith("fixed:")}
        best_live = min(fixed, key=lambda k: fixed[k])
        row = {"phase": name, "span_s": [start, end], "best_fixed": s.best.name,
               "best_fixed_sim_ttft_s": s.ranked[0][1], "best_fixed_live_ttft_s": best,
               "best_live": best_live.removeprefix("fixed:"), "best_live_ttft_s": fixed[best_live],
               "default_live_ttft_s": default["phases"][name]}  # fmt: skip
        for mode in ("apply", "shadow"):
            if mode in figures:
                row[f"{mode}_ttft_s"] = figures[mode]["phases"][name]
                row[f"{mode}_vs_best_fixed"] = figures[mode]["phases"][name] / best
                row[f"{mode}_vs_best_live"] = figures[mode]["phases"][name] / fixed[best_live]
        out["phases"].append(row)
    if "apply" in runs:
        result, seen = runs["apply"]
        out["apply_vs_default"] = figures["apply"]["ttft_mean_s"] / default["ttft_mean_s"]
        out["switches"] = _switches(result, seen, runs, schedule, args)
        out["sign_agreement"] = _agreement(out["switches"], "measured_gain")
        out["sign_agreement_held"] = _agreement(out["switches"], "measured_gain_held")
        proposal = seen.get("proposal") or {}
        out["tuner_cpu_s"] = proposal.get("tuner_cpu_s")
        out["last_fidelity"] = proposal.get("fidelity")
        out["last_proposal"] = proposal
    if "shadow" in runs:
        out["shadow_last_proposal"] = runs["shadow"][1].get("proposal")
    return out


def _agreement(switches: list[dict[str, Any]], key: str) -> float | None:
    """The share of switches with a measured gain (`key`) of their predicted gain's sign;
    a prediction of no gain at all (home replayed level with the live profile) has none."""
    checked = [s for s in switches if s[key] is not None and s.get("predicted_gain")]
    agree = [s for s in checked if (s["predicted_gain"] > 0) == (s[key] > 0)]
    return len(agree) / len(checked) if checked else None


def _switches(
    result: ExperimentResult,
    seen: dict[str, Any],
    runs: dict[str, tuple[ExperimentResult, dict[str, Any]]],
    schedule: list[TimedRequest],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """Each switch with its predicted gain and the gain measured, 1 − mean TTFT (apply) /
    mean TTFT (the fixed run of the profile it replaced), on the same requests: over the
    next interval (`measured_gain`) and over all the time the profile it chose ran, up to
    the next switch or the run's end (`measured_gain_held`, over `held_s` seconds); None
    without a fixed run of the profile it replaced."""
    t0 = _run_start(args.out / "apply.jsonl")
    switches = sorted(seen.get("switches", []), key=lambda sw: sw["at"])
    last = schedule[-1].at_s + 1.0 if schedule else 0.0
    ends = [sw["at"] - t0 for sw in switches[1:]] + ([last] if switches else [])
    out = []
    for sw, end in zip(switches, ends, strict=True):
        at = sw["at"] - t0
        key = f"fixed:{sw['from']}"
        base = runs.get(key)
        gains = [
            _gain(result, base[0] if base else None, schedule, at, until)
            for until in (at + args.interval, end)
        ]
        out.append({**sw, "at_s": at, "measured_gain": gains[0], "held_s": end - at,
                    "measured_gain_held": gains[1],
                    "compared_with": key if base else None})  # fmt: skip
    return [s for s in out if s.get("predicted_gain") is not None or s["kind"] == "rollback"]


def _gain(
    mine: ExperimentResult,
    theirs: ExperimentResult | None,
    schedule: list[TimedRequest],
    start: float,
    end: float,
) -> float | None:
    """1 − mean TTFT of `mine` / that of `theirs` over the requests sent in [start, end)."""
    if theirs is None:
        return None
    a = live.window_ttfts(mine, schedule, start, end)
    b = live.window_ttfts(theirs, schedule, start, end)
    return 1 - _mean(a) / _mean(b) if a and b else None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args))
    result["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path = args.out / "tune.json"
    path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    for row in result["phases"]:
        print(orjson.dumps(row).decode())
    for key in (
        "apply_vs_default",
        "sign_agreement",
        "sign_agreement_held",
        "tuner_cpu_s",
        "last_fidelity",
    ):
        print(f"{key}: {result.get(key)}")
    print(f"switches: {len(result['switches'])}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
