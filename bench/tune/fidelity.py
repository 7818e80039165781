"""`python -m bench.tune.fidelity OUT`: how well the simulator ranks profiles on the fleet.

Reads the fixed runs of a `python -m bench tune` invocation (OUT/runs/fixed-*.json: each
request's TTFT as the client saw it) and, for every window of `--window` seconds, replays
that run's traffic (after a lead-in of one window, routed by the profile that ran) under its
own profile and under each profile that had a fixed run. Prints, per window and run, the
observed mean TTFT, the replayed one (fidelity: replayed / observed) and the simulator's
predicted gain of each other profile (1 − its replay / the run's own), beside the gain
measured live between the fixed runs on the same requests. Writes OUT/fidelity.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from bench.regime.grid import FleetSpec
from bench.tune.fixed import candidates
from bench.tune.phases import FAMILIES, scaled, trace
from routing.traces import TraceRequest
from sim.replay.settings import SimSettings
from sim.replay.sweep.runners import LocalRunner
from sim.tune.candidates import Candidate
from sim.tune.evaluate import FleetShape, evaluate, span


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.tune.fidelity", description=__doc__)
    p.add_argument("out", type=Path, help="the --out directory of `python -m bench tune`")
    p.add_argument("--family", choices=sorted(FAMILIES), default="long")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--window", type=float, default=60.0)
    return p.parse_args(argv)


def observed(path: Path, requests: list[TraceRequest]) -> list[TraceRequest]:
    """The run's requests with the TTFTs its client saw (None for an error)."""
    rows = orjson.loads(path.read_bytes())["results"]
    ttft = {int(r[0].removeprefix("req-")): r[1] if r[2] is None else None for r in rows}
    return [replace(r, ttft_s=ttft.get(i)) for i, r in enumerate(requests)]


def windows(
    runs: dict[str, list[TraceRequest]], pool: dict[str, Candidate], length: float
) -> list[dict[str, Any]]:
    names = list(runs)
    shape = FleetShape.of(FleetSpec().replicas, FleetSpec().profile)
    end_s = max(r.arrival_s for r in next(iter(runs.values())))
    rows = []
    end = length
    while end < end_s + length:
        row: dict[str, Any] = {"end_s": end, "runs": {}}
        for name, requests in runs.items():
            others = [pool[name]] + [pool[n] for n in names if n != name]
            part = span(requests, end, length, length, pool[name])
            if not part.measured:
                continue
            ev = evaluate(part, others, shape, SimSettings(), seeds=1, runner=LocalRunner(1))
            own = ev.ttft_mean_s[0][0]
            row["runs"][name] = {
                "observed_s": ev.observed_ttft_mean_s,
                "replayed_s": own,
                "fidelity": ev.fidelity,
                "predicted_gain": {c.name: 1 - m[0] / own for c, m in
                                   zip(ev.candidates[1:], ev.ttft_mean_s[1:], strict=True)},
            }  # fmt: skip
        for name in row["runs"]:
            mine = row["runs"][name]["observed_s"]
            row["runs"][name]["measured_gain"] = {
                o: 1 - row["runs"][o]["observed_s"] / mine
                for o in row["runs"]
                if o != name and mine and row["runs"][o]["observed_s"]
            }
        rows.append(row)
        print(_line(row), flush=True)
        end += length
    return rows


def _line(row: dict[str, Any]) -> str:
    cells = [f"{row['end_s']:6.0f} s"]
    for name, r in row["runs"].items():
        gains = " ".join(
            f"{o.removeprefix('prefix-aware~')}: {g:+.0%} sim / {r['measured_gain'].get(o, 0):+.0%}"
            for o, g in r["predicted_gain"].items()
        )
        cells.append(
            f"{name.removeprefix('prefix-aware~')}: {r['observed_s']:.3f} obs "
            f"{r['replayed_s']:.3f} sim ({gains})"
        )
    return " | ".join(cells)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the windows: each run's mean fidelity, and how often the simulator's predicted
    gain of one profile over another has the sign of the gain measured live."""
    out: dict[str, Any] = {}
    for name in rows[0]["runs"] if rows else []:
        fid = [r["runs"][name]["fidelity"] for r in rows if r["runs"].get(name, {}).get("fidelity")]
        pairs = [
            (g, r["runs"][name]["measured_gain"][o])
            for r in rows
            if name in r["runs"]
            for o, g in r["runs"][name]["predicted_gain"].items()
            if o in r["runs"][name]["measured_gain"]
        ]
        signed = [(g, m) for g, m in pairs if abs(g) >= 0.05]
        out[name] = {
            "fidelity_mean": statistics.fmean(fid) if fid else None,
            "fidelity_range": [min(fid), max(fid)] if fid else None,
            "windows_with_a_predicted_gain_of_5pct": len(signed),
            "sign_agreement": (
                sum((g > 0) == (m > 0) for g, m in signed) / len(signed) if signed else None
            ),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    requests = trace(scaled(FAMILIES[args.family], None, 1.0), FleetSpec(), args.seed)
    pool = {c.name: c for c in candidates()}
    runs = {
        p.stem.removeprefix("fixed-"): observed(p, requests)
        for p in sorted((args.out / "runs").glob("fixed-*.json"))
        if p.stem.removeprefix("fixed-") in pool
    }
    if not runs:
        raise SystemExit(f"no fixed runs of known profiles in {args.out / 'runs'}")
    rows = windows(runs, pool, args.window)
    result: dict[str, Any] = {"windows": rows, "summary": summary(rows)}
    for name, s in result["summary"].items():
        print(f"{name}: {orjson.dumps(s).decode()}")
    (args.out / "fidelity.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
