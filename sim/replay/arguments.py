"""The `kvgate sim` and `kvgate sim sweep` command-line options (`kvgate.cli.sim` adds them).

Kept beside the simulator that reads them (`sim.replay.cli.run_sim`,
`sim.replay.sweep.run_sweep`); engine profiles and trace formats are looked up only when the
parser is built.
"""

from __future__ import annotations

import argparse

SIM_USAGE = """\
kvgate sim --trace FILE [options]
       kvgate sim sweep --trace FILE [sweep options]   (see kvgate sim sweep --help)
       kvgate sim tune --trace FILE [tune options]     (see kvgate sim tune --help)"""

SWEEP_EPILOG = """\
example:
  kvgate sim sweep --trace trace.jsonl --limit 2000 --policies least-load,prefix-aware \\
    --weights 'prefix-match-scorer=1,3;queue-depth-scorer=1,2' --replicas 4,8 \\
    --rate-scale 1,2 --objective min:ttft_p90_s --constraint 'goodput>=0.9'

Runs: every policy × every combination of the weights of the scorers its profile has
(policies without a listed scorer are not multiplied by its weights) × replica counts ×
rate scales. METRIC is a numeric field of summary.json (ttft_p50_s, ttft_p90_s, ttft_mean_s,
hit_rate, goodput, max_mean_share, ...) or a grid parameter, replicas or rate_scale:
`--objective min:replicas --constraint 'goodput>=0.95'` finds the smallest fleet that meets
the SLO. Runs meeting every --constraint rank first, by the objective; values equal to 3
significant digits are ties, broken by --tie-break, then fewer replicas, then a higher rate
scale. oracle runs are ranked as ceilings but never chosen. Prints progress, the ranked
table and the best configuration as a routing: YAML snippet; writes sweep.json,
best_routing.yaml and, with kvgate[plots], sweep.png to --out.

On a Ray cluster (pip install 'kvgate[ray]'): --ray alone attaches to the instance `ray
start` left on this machine or starts a local one; --ray auto, --ray HEAD:6379 or --ray
ray://HEAD:10001 attach to a cluster whose nodes have the same kvgate, Ray and Python. The
trace (at each rate scale) and the engine profile go to the object store once; each run is
a task of one CPU with its policy and settings; a task whose worker or node dies is retried
up to 3 times. The results are the same as with --jobs 1. Naming the address of a cluster
with token authentication (Ray's default for instances it starts) takes RAY_AUTH_MODE=token
and RAY_AUTH_TOKEN (`ray get-auth-token` on its head).

Exit status: 0 with a best configuration, 1 if no run meets the constraints, 2 for bad
arguments (or no Ray cluster at the address), 3 if a run was lost on the cluster.
"""


def _add_trace_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    """The options `kvgate sim` and `kvgate sim sweep` share: trace, engines, config, SLO."""
    from routing.traces.load import FORMATS
    from sim.engine.profiles import PROFILES
    from sim.replay.settings import DEFAULT_KV_EVENT_DELAY_S

    p.add_argument(
        "--trace",
        required=required,
        metavar="FILE",
        help="trace file: Mooncake JSONL, Azure CSV, or a `kvgate serve --record` file",
    )
    p.add_argument(
        "--format",
        default="auto",
        help=f"trace format: {', '.join(FORMATS)} (default auto: detected from the file)",
    )
    p.add_argument(
        "--limit", "--trace-requests", type=int, metavar="N", help="only the first N requests"
    )
    p.add_argument(
        "--profile",
        default="h100-llama3-8b",
        help=f"engine profile: {', '.join(PROFILES)} (default %(default)s)",
    )
    p.add_argument(
        "--block-size",
        type=int,
        metavar="TOKENS",
        help="KV block size in tokens (default: the profile's)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="gateway config file: its routing: and disaggregation: sections and health: "
        "scrape settings",
    )
    p.add_argument(
        "--slo-ttft",
        type=float,
        default=2.0,
        metavar="S",
        help="TTFT bound for goodput, seconds (default %(default)s)",
    )
    p.add_argument(
        "--slo-itl",
        type=float,
        default=0.1,
        metavar="S",
        help="mean ITL bound for goodput, seconds (default %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for scrape phases and pickers (default %(default)s)",
    )
    p.add_argument(
        "--kv-event-delay",
        type=float,
        default=DEFAULT_KV_EVENT_DELAY_S,
        metavar="S",
        help="virtual seconds from a step's end until its KV-cache events reach the precise "
        "index (profiles that read it, e.g. precise-prefix; default %(default)s)",
    )
    p.add_argument(
        "--gateway-overhead",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds the gateway, the network and the client add to every TTFT and latency, "
        "beyond the engine profile's API server (default %(default)s; `make fidelity` "
        "measures it)",
    )
    p.add_argument(
        "--gateway-overhead-token",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds added on top of --gateway-overhead per prompt token (default %(default)s)",
    )


def _add_pd_options(m: argparse.ArgumentParser) -> None:
    g = m.add_argument_group(
        "disaggregated prefill/decode",
        "A P/D pool: --prefill N and --decode M replicas beside the --replicas K of role both; "
        "the gateway's planner (the config file's disaggregation: section) sends a request "
        "through a prefill replica or not, and the KV crosses the engine profile's link",
    )
    g.add_argument("--prefill", type=int, default=0, metavar="N", help="prefill replicas")
    g.add_argument(
        "--decode", type=int, default=0, metavar="M", help="decode replicas (need --prefill)"
    )
    g.add_argument(
        "--pd-protocol",
        choices=["vllm", "sglang"],
        help="vllm (P answers, D pulls what it lacks) or sglang (P and D at once, P pushes "
        "every block; decode replicas keep no prefix cache) (config disaggregation.protocol, "
        "default vllm)",
    )
    g.add_argument(
        "--pd-mode",
        choices=["conditional", "always", "never"],
        help="when requests go through a prefill replica (config disaggregation.mode, default "
        "conditional)",
    )
    g.add_argument(
        "--transfer-bandwidth",
        type=float,
        metavar="BYTES_PER_S",
        help="the P→D KV link's bandwidth (default: the engine profile's, e.g. 25e9)",
    )
    g.add_argument(
        "--transfer-latency",
        type=float,
        metavar="S",
        help="the P→D KV link's latency per transfer (default: the engine profile's, e.g. 5e-05)",
    )


def _add_dp_options(m: argparse.ArgumentParser) -> None:
    g = m.add_argument_group(
        "data-parallel engines",
        "Each replica an engine of N data-parallel ranks behind one endpoint, each rank with "
        "its own KV cache and queue (vLLM --data-parallel-size, SGLang --dp-size)",
    )
    g.add_argument(
        "--data-parallel-size",
        type=int,
        metavar="N",
        help="ranks per replica (default 1)",
    )
    g.add_argument(
        "--dp-routing",
        choices=["rank", "engine"],
        help="rank: the gateway routes to each rank, as kvgate does with dp_size (default); "
        "engine: the gateway routes to the replica and its engine balances the ranks "
        "(least 4 x waiting + running), as for a gateway that does not know them",
    )


def add_sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser(
        "sim",
        help="replay a trace through the routing policies onto simulated engines (offline)",
        usage=SIM_USAGE,
        description="Discrete-event replay of a request trace, once per policy, with the "
        "gateway's own routing code and the config file's `routing:` section; prints TTFT, "
        "ITL, hit rate, goodput and load share per policy and writes summary.json (and, with "
        "kvgate[plots], its plots). `kvgate sim sweep` runs a grid of configurations and names "
        "the best one.",
    )
    from sim.replay.settings import DEFAULT_SYNC_DELAY_S, SPREADS

    # `--trace` is checked in _sim: argparse would demand it of `kvgate sim sweep` too.
    _add_trace_options(m, required=False)
    m.add_argument(
        "--policies",
        default="",
        help="comma-separated profiles, `oracle` (prefix-aware with perfect signals) or "
        "`oracle:PROFILE` (default: round-robin,least-load,prefix-aware,oracle)",
    )
    m.add_argument(
        "--replicas",
        type=int,
        metavar="K",
        help="simulated replicas of role both, serving whole requests (default 8, or 0 with "
        "--prefill/--decode)",
    )
    m.add_argument(
        "--rate-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="replay X times faster: arrival gaps / X (default 1)",
    )
    m.add_argument("--out", default="out/sim", help="output directory (default out/sim)")
    g = m.add_argument_group(
        "gateway replicas",
        "N gateways in front of the fleet, each with its own routing state; by default each "
        "one's dispatches reach the others' state after --sync-delay, as through Redis",
    )
    g.add_argument(
        "--gateways", type=int, default=1, metavar="N", help="gateway replicas (default 1)"
    )
    g.add_argument(
        "--sync-delay",
        type=float,
        metavar="S",
        help="virtual seconds from one gateway's dispatch, first token or completion until "
        f"the other gateways' state has it (default {DEFAULT_SYNC_DELAY_S})",
    )
    g.add_argument(
        "--no-shared",
        action="store_true",
        help="gateways share nothing: each learns only from its own dispatches",
    )
    g.add_argument(
        "--spread",
        choices=SPREADS,
        default="request",
        help="requests reach the gateways round-robin by request, or every request of a "
        "session at one gateway (default %(default)s)",
    )
    _add_pd_options(m)
    _add_dp_options(m)
    modes = m.add_subparsers(dest="sim_mode", metavar="{sweep,tune}")
    w = modes.add_parser(
        "sweep",
        prog="kvgate sim sweep",
        help="replay a grid of policies × weights × replicas × rate scales; name the best",
        description="Replay one trace over a grid of policies × scorer weights × replica\n"
        "counts × rate scales and report the best configuration for an objective.",
        epilog=SWEEP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_trace_options(w, required=True)
    w.add_argument(
        "--policies",
        default="round-robin,least-load,prefix-aware",
        help="comma-separated policies, as for kvgate sim (default %(default)s)",
    )
    w.add_argument(
        "--weights",
        default="",
        metavar="SPEC",
        help="scorer weights to try: 'SCORER=W1,W2;SCORER=W3,...' (default: the profiles' own)",
    )
    w.add_argument("--replicas", default="8", metavar="N,...", help="replica counts (default 8)")
    w.add_argument(
        "--rate-scale", default="1", metavar="X,...", help="rate multipliers (default 1)"
    )
    w.add_argument(
        "--objective",
        default="max:goodput",
        metavar="min|max:METRIC",
        help="what the best run optimises (default %(default)s)",
    )
    w.add_argument(
        "--constraint",
        action="append",
        metavar="METRIC>=X",
        help="a bound the best run must meet (>=, <=, >, <); repeatable",
    )
    w.add_argument(
        "--tie-break",
        metavar="min|max:METRIC",
        help="breaks objective ties (default max:goodput, or min:ttft_p90_s for goodput)",
    )
    w.add_argument("--jobs", type=int, default=1, help="runs at a time, in processes (default 1)")
    w.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on a Ray cluster instead: auto, HOST:PORT or ray://HOST:10001; without "
        "ADDRESS, this machine's instance (started if none); needs kvgate[ray]",
    )
    w.add_argument("--out", default="out/sim-sweep", help="output directory (default %(default)s)")
    add_tune_parser(modes)


TUNE_EPILOG = """\
example:
  kvgate sim tune --trace recorded.jsonl --profile demo --replicas 4 --interval 60

The trace is cut into windows of --interval seconds; at the end of each, the tuner replays
the last --window seconds (after the --lead-in seconds before them, unmeasured) under the
live profile, the --candidates and up to --search variants of the live profile's weights and
thresholds, --seeds times each, and (--mode apply) switches when the best predicted
mean-TTFT gain is at least --min-gain and wins in at least --confidence of the seeds.
Options left out take the config file's tuning: values.
Prints one line per window and the totals (tuned vs the fixed default vs the best fixed
profile per window); writes tune.json to --out.
"""


def add_tune_parser(modes: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`kvgate sim tune`: the self-tuning loop over a whole trace (`sim.tune.offline`)."""
    t = modes.add_parser(
        "tune",
        prog="kvgate sim tune",
        help="what the self-tuning loop would have done over a trace, window by window",
        description="Replay a trace window by window as the self-tuning loop would, and\n"
        "report its proposals, switches and the mean TTFT they would have given.",
        epilog=TUNE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_trace_options(t, required=True)
    t.add_argument("--replicas", type=int, default=8, help="fleet size (default %(default)s)")
    t.add_argument(
        "--mode", choices=("shadow", "apply"), default="apply", help="default %(default)s"
    )
    t.add_argument("--interval", type=float, metavar="S", help="seconds between evaluations")
    t.add_argument("--window", type=float, metavar="S", help="seconds replayed (default: S)")
    t.add_argument(
        "--lead-in",
        type=float,
        metavar="S",
        help="seconds before each window replayed first, unmeasured (default: the window's; "
        "0: each window starts cold)",
    )
    t.add_argument("--candidates", metavar="P,...", help="named profiles evaluated")
    t.add_argument("--search", type=int, metavar="N", help="variants of the live profile")
    t.add_argument("--seeds", type=int, metavar="N", help="replays per candidate")
    t.add_argument("--min-gain", type=float, metavar="X", help="least predicted gain")
    t.add_argument("--confidence", type=float, metavar="X", help="least share of seeds won")
    t.add_argument("--min-requests", type=int, metavar="N", help="smaller windows: skipped")
    t.add_argument(
        "--engine-timing",
        choices=("named", "fitted"),
        help="--profile as is, or fitted to each window's observed TTFTs",
    )
    t.add_argument("--jobs", type=int, default=1, help="replays at a time (default 1)")
    t.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="replay on a Ray cluster")
    t.add_argument("--out", default="out/sim-tune", help="output directory (default %(default)s)")
