"""`python -m bench sim-speed`: CPU seconds of one `kvgate sim` replay per policy.

Replays the Mooncake conversation trace (in `--traces DIR`; `--limit N`: its first N
requests) on `--replicas` engines of the default profile in `--block-size`-token blocks, once
per policy and repeat, and times the replay alone (CPU seconds of this process: no start-up,
trace loading or plots), with the compiled KV cache. `--reference` also replays each policy
once on the pure-Python engine, side by side in the same run, and checks that every
request's TTFT and end-to-end latency came out bit-identical. Writes
`sim_speed.json` and `sim_speed.png` (minimum CPU per policy) to `--out`.

Run it under the machine's benchmark lock (`flock LOCKFILE python -m bench sim-speed ...`): CPU
time is less sensitive to other load than wall time, not immune.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench import DEFAULT_TRACES, TRACES_HELP, trace_file
from routing.traces import TraceRequest, load_trace
from sim.engine.kv_store import NATIVE_BUILT
from sim.engine.profiles import get_profile
from sim.engine.types import EngineProfile
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable, pyplot
from sim.replay import Replay, ReplayResult, SimSettings
from sim.replay.cli import fit_profile, with_block_size

MOONCAKE_TRACE = "mooncake_fast25_conversation_trace.jsonl"


def _replay(
    trace: list[TraceRequest], policy: str, profile: EngineProfile, settings: SimSettings
) -> tuple[ReplayResult, float]:
    cpu = time.process_time()
    result = Replay(trace, policy, profile, settings).run()
    return result, time.process_time() - cpu


def _same(a: ReplayResult, b: ReplayResult) -> bool:
    return (
        list(a.log.ttft_s) == list(b.log.ttft_s)
        and list(a.log.e2e_s) == list(b.log.e2e_s)
        and list(a.log.replica) == list(b.log.replica)
        and (a.prefix_hits, a.preemptions, a.steps) == (b.prefix_hits, b.preemptions, b.steps)
    )


def _policy(
    args: argparse.Namespace, trace: list[TraceRequest], profile: EngineProfile, policy: str
) -> dict[str, object]:
    settings = SimSettings(replicas=args.replicas)
    runs = []
    fast: ReplayResult | None = None
    for k in range(args.repeats):
        fast, cpu = _replay(trace, policy, profile, settings)
        runs.append(cpu)
        print(f"  {policy}: run {k + 1}/{args.repeats}: {cpu:.2f} s CPU", file=sys.stderr)
    out: dict[str, object] = {
        "cpu_s": runs,
        "min_cpu_s": min(runs),
        "median_cpu_s": statistics.median(runs),
        "requests": fast.requests if fast else 0,
        "segments": fast.segments if fast else 0,
        "steps": fast.steps if fast else 0,
    }
    if args.reference and fast is not None:
        reference = SimSettings(replicas=args.replicas, native=False)
        slow, cpu = _replay(trace, policy, profile, reference)
        print(f"  {policy}: pure-Python reference: {cpu:.2f} s CPU", file=sys.stderr)
        out |= {
            "reference_cpu_s": cpu,
            "speedup": cpu / min(runs),
            "identical": _same(fast, slow),
        }
    return out


def _plot(result: dict[str, dict[str, object]], path: Path) -> None:
    plt = pyplot()
    policies = list(result)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(policies))
    fast = [float(result[p]["min_cpu_s"]) for p in policies]  # type: ignore[arg-type]
    ax.bar([i - 0.2 for i in x], fast, width=0.4, label="compiled KV cache (min)")
    if all("reference_cpu_s" in result[p] for p in policies):
        slow = [float(result[p]["reference_cpu_s"]) for p in policies]  # type: ignore[arg-type]
        ax.bar([i + 0.2 for i in x], slow, width=0.4, label="pure-Python reference")
    ax.set_xticks(list(x), policies)
    ax.set_ylabel("CPU seconds per replay")
    ax.set_title("kvgate sim: one replay of the trace")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench sim-speed", description=__doc__)
    p.add_argument("--traces", type=Path, default=DEFAULT_TRACES, metavar="DIR", help=TRACES_HELP)
    p.add_argument("--limit", type=int, default=None, help="only the first N requests")
    p.add_argument("--policies", default="round-robin,prefix-aware")
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--block-size", type=int, default=16, help="KV block size in tokens")
    p.add_argument("--repeats", type=int, default=3, help="replays per policy")
    p.add_argument("--reference", action="store_true", help="also the pure-Python engine")
    p.add_argument("--out", type=Path, default=Path("out/bench/sim-speed"))
    args = p.parse_args(argv)
    if not NATIVE_BUILT:
        print("the compiled KV cache is not built: reinstall kvgate (make venv)", file=sys.stderr)
        return 1
    trace = load_trace(trace_file(args.traces, MOONCAKE_TRACE), "mooncake", args.limit)
    profile = with_block_size(get_profile("h100-llama3-8b"), args.block_size)[0]
    profile = fit_profile(profile, trace)[0]
    print(f"{len(trace):,} requests, {args.replicas} replicas", file=sys.stderr)
    result = {policy: _policy(args, trace, profile, policy) for policy in args.policies.split(",")}
    args.out.mkdir(parents=True, exist_ok=True)
    params = {**vars(args), "traces": str(args.traces), "out": str(args.out)}
    report = {"params": params, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "policies": result}
    (args.out / "sim_speed.json").write_text(json.dumps(report, indent=2) + "\n")
    try:
        _plot(result, args.out / "sim_speed.png")
    except PlotsUnavailable:
        print(PLOTS_SKIPPED, file=sys.stderr)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
