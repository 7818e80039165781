"""`python -m bench sweep-runners`: one `kvgate sim sweep` grid through each runner.

The same 32 runs — least-load and prefix-aware, prefix-match weights 1, 2, 4 × in-flight
weights 1, 2 (least-load has only the latter), 4 and 8 replicas, rate scales 1 and 2 — on
the first `--limit` requests of the Mooncake conversation trace (in `--traces DIR`), with
`--jobs 1`, `--jobs 2` and `--ray` in turn, each a `kvgate sim sweep` process of its own.
`--ray` starts a local Ray instance and stops it at the end (bound to 127.0.0.1), or with
`--ray-address` attaches to a running cluster. Times the whole command (start-up, trace
loading, Ray's start and stop, outputs) and the runs alone (sweep.json's `wall_seconds`),
and checks that every run's summary (its wall and CPU seconds aside) is the same for all
runners. Writes `sweep_runners.json` and `sweep_runners.png` to `--out`.

~2 minutes on 2 cores. Wall times: run it under the machine's benchmark lock (`flock LOCKFILE
python -m bench sweep-runners`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import DEFAULT_TRACES, REPO_ROOT, TRACES_HELP, trace_file
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot

MOONCAKE_TRACE = "mooncake_fast25_conversation_trace.jsonl"
GRID = [
    "--policies", "least-load,prefix-aware",
    "--weights", "prefix-match-scorer=1,2,4;in-flight-scorer=1,2",
    "--replicas", "4,8", "--rate-scale", "1,2",
]  # fmt: skip
RUNNERS = {"jobs-1": ["--jobs", "1"], "jobs-2": ["--jobs", "2"], "ray": ["--ray"]}
TIMED = ("sim_seconds", "sim_cpu_seconds")


def _untimed(sweep_json: Path) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(sweep_json.read_text())["runs"]
    return [{k: v for k, v in run.items() if k not in TIMED} for run in runs]


def _sweep(args: argparse.Namespace, name: str, out: Path) -> dict[str, Any]:
    flags = list(RUNNERS[name])
    env = dict(os.environ)
    if name == "ray" and args.ray_address:
        flags.append(args.ray_address)
    elif name == "ray":
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # a local instance on 127.0.0.1 only
    trace = trace_file(args.traces, MOONCAKE_TRACE)
    command = [
        sys.executable, "-m", "kvgate.cli", "sim", "sweep", "--trace", str(trace),
        "--limit", str(args.limit), *GRID, *flags, "--out", str(out / name),
    ]  # fmt: skip
    started = time.perf_counter()
    with (out / f"{name}.log").open("w") as log:
        proc = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=log, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}; see {out / name}.log")
    report = json.loads((out / name / "sweep.json").read_text())
    return {
        "runner": name,
        "description": report["runner"],
        "runs": len(report["runs"]),
        "command_seconds": round(wall, 2),
        "runs_seconds": round(report["wall_seconds"], 2),
        "replay_cpu_seconds": round(sum(r["sim_cpu_seconds"] for r in report["runs"]), 2),
        "command": command,
    }


def _plot(rows: list[dict[str, Any]], limit: int, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [" ".join(RUNNERS[r["runner"]]) for r in rows]
    ax.barh(names, [r["command_seconds"] for r in rows], label="whole command", color="#bbb")
    ax.barh(names, [r["runs_seconds"] for r in rows], label="the runs", color="#3a7")
    ax.invert_yaxis()
    ax.set_xlabel("wall seconds")
    ax.set_title(f"kvgate sim sweep: {rows[0]['runs']} runs of {limit:,} requests, by runner")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sweep-runners", description=__doc__)
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), help=TRACES_HELP)
    parser.add_argument("--limit", type=int, default=2000, help="trace requests (default 2000)")
    parser.add_argument("--runners", default=",".join(RUNNERS), help="default: %(default)s")
    parser.add_argument("--ray-address", help="a running cluster for --ray (default: local)")
    parser.add_argument("--out", default="out/bench/sweep-runners")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, reference = [], None
    for name in args.runners.split(","):
        row = _sweep(args, name, out)
        runs = _untimed(out / name / "sweep.json")
        reference = reference if reference is not None else runs
        row["same_results_as_first"] = runs == reference
        rows.append(row)
        print(
            f"{row['description']}: {row['runs']} runs in {row['runs_seconds']:.1f} s "
            f"(command {row['command_seconds']:.1f} s; replay CPU "
            f"{row['replay_cpu_seconds']:.1f} s); same results: {row['same_results_as_first']}",
            flush=True,
        )
    result = {"limit": args.limit, "grid": GRID, "cpus": os.cpu_count(), "rows": rows}
    paths = [out / "sweep_runners.json"]
    paths[0].write_text(json.dumps(result, indent=2) + "\n")
    try:
        paths.append(_plot(rows, args.limit, out / "sweep_runners.png"))
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0 if all(r["same_results_as_first"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
