"""`kvgate` command line: serve the gateway, check a config file.

CLI flags cover process concerns only (where to listen, log level) plus quick overrides for
the backends and the default policy; everything else is in the YAML config file.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Sequence

from gateway.config import (
    ConfigError,
    GatewayConfig,
    load_config,
    parse_backend_arg,
    parse_config,
)

DESCRIPTION = """\
kvgate: a KV-cache- and prefix-aware gateway for pools of OpenAI-compatible LLM engines
(vLLM, SGLang, ...). It relays OpenAI API requests to the replica that should serve them.
"""

SERVE_EPILOG = """\
examples:
  kvgate serve --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002
  kvgate serve --config kvgate.yaml --policy session --port 8080
  kvgate serve --backend http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5

--backend takes URL[,engine=vllm|sglang|trtllm|openai][,models=a|b][,id=NAME]; without
models= the backend's models are discovered from its GET /v1/models. Flags are added to the
backends of --config. deploy/kvgate.yaml documents every config field.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvgate", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser(
        "serve",
        help="run the gateway (OpenAI API on /v1/*, /metrics, /health, /ready, /admin/*)",
        description="Run the gateway in front of a pool of engines.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--config", metavar="FILE", help="YAML config file (default: built-in defaults)")
    s.add_argument(
        "--backend",
        metavar="URL",
        action="append",
        default=[],
        help="an engine replica; repeat for each (see below)",
    )
    s.add_argument(
        "--policy",
        metavar="NAME",
        help="default routing policy (a profile name: round-robin, random, "
        "least-in-flight, power-of-two, session, or one from the config)",
    )
    s.add_argument("--host", help="address to listen on (default: config server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port to listen on; 0 picks a free one (default 8000)")
    s.add_argument(
        "--record",
        metavar="FILE",
        help="append a replayable trace of the traffic to FILE (config server.record_path): "
        "arrivals, token counts, prefix block hashes, never prompt text",
    )
    s.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )

    e = sub.add_parser(
        "emulate",
        help="run N emulated vLLM replicas (engine model in real time, vLLM's HTTP surface)",
        description="Emulated vLLM replicas whose timing, prefix cache and metrics come from "
        "kvgate's engine model. Prints one `replica N: URL` line per replica.",
    )
    e.add_argument("--replicas", type=int, default=4, help="number of replicas (default 4)")
    e.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    e.add_argument(
        "--port",
        type=int,
        default=8001,
        help="first replica's port, the others follow; 0 picks free ports (default 8001)",
    )
    e.add_argument("--profile", default="demo", help="engine profile (default demo; see below)")
    e.add_argument("--model", default="kvgate-demo", help="served model name")
    e.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="run X times faster than real time (modelled durations / X)",
    )
    e.add_argument(
        "--tokenizer",
        metavar="FILE",
        help="a tokenizer.json to use instead of the built-in tokenizer",
    )
    e.add_argument(
        "--num-gpu-blocks",
        type=int,
        metavar="N",
        help="override the profile's number of KV blocks (like vLLM's --num-gpu-blocks-override)",
    )
    e.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="override the profile's context length limit (like vLLM's flag)",
    )

    d = sub.add_parser(
        "demo",
        help="start 4 emulated replicas and the gateway, replay a chat workload per policy",
        description="Runs the built-in multi-tenant, multi-turn chat workload through the "
        "gateway in front of emulated replicas, once per policy, and reports prefix-cache hit "
        "rates (from the replicas' metrics), requests per replica and TTFT.",
    )
    d.add_argument("--replicas", type=int, default=4, help="emulated replicas (default 4)")
    d.add_argument(
        "--policies",
        default=None,
        help="comma-separated policies to compare (default: the demo's list)",
    )
    d.add_argument("--conversations", type=int, default=40, help="chats to replay (default 40)")
    d.add_argument("--out", default="out/demo", help="output directory (default out/demo)")

    c = sub.add_parser(
        "check-config",
        help="validate a config file and print the effective configuration",
        description="Validate a config file; exit 2 naming each bad field if it is invalid.",
    )
    c.add_argument("config", metavar="FILE")
    _add_sim_parser(sub)
    return p


def _effective_config(args: argparse.Namespace) -> GatewayConfig:
    """The config file with the command line's overrides applied, validated again."""
    # Only the fields the file set: a full dump would add `weight: 1.0` to every filter and
    # picker of a user profile, which the profile schema rejects.
    raw = load_config(args.config).model_dump(exclude_unset=True)
    raw.setdefault("backends", []).extend(parse_backend_arg(b).model_dump() for b in args.backend)
    if args.host is not None:
        raw.setdefault("server", {})["host"] = args.host
    if args.port is not None:
        raw.setdefault("server", {})["port"] = args.port
    if args.policy:
        raw.setdefault("routing", {})["policy"] = args.policy
    if args.record:
        raw.setdefault("server", {})["record_path"] = args.record
    return parse_config(raw, source="command line")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.access_log import RequestIdFilter
    from gateway.app import build_app
    from gateway.http.server import server_protocol

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
    # httpx logs every request at INFO: the probes and 50 ms metric scrapes would flood the log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    cfg = _effective_config(args)
    app = build_app(cfg)
    # The start-up objects (modules, config, plugins) live as long as the process: keep them
    # out of the collector's full passes, which otherwise scan them all (a ~30 ms pause).
    gc.collect()
    gc.freeze()
    uvicorn.run(
        app,
        host=cfg.server.host,
        port=cfg.server.port,
        loop="uvloop",
        http=server_protocol(),
        # No X-Forwarded-* rewriting: the app never reads the client address, and the
        # middleware would add a coroutine frame to every request.
        proxy_headers=False,
        lifespan="on",
        access_log=False,
        server_header=False,
        log_level=args.log_level,
        log_config=None,
    )
    return 0


def _check_config(args: argparse.Namespace) -> int:
    from gateway.app import build_app

    cfg = load_config(args.config)
    build_app(cfg)  # also instantiates every profile's plugins
    print(cfg.model_dump_json(indent=2))
    return 0


def _emulate(args: argparse.Namespace) -> int:
    import uvloop

    from sim.emulator.server import EmulatorSettings, serve

    if args.replicas < 1 or args.speedup <= 0:
        raise ConfigError("--replicas must be >= 1 and --speedup > 0")
    settings = EmulatorSettings(
        replicas=args.replicas,
        host=args.host,
        port=args.port,
        profile=args.profile,
        model=args.model,
        speedup=args.speedup,
        tokenizer=args.tokenizer,
        num_gpu_blocks=args.num_gpu_blocks,
        max_model_len=args.max_model_len,
    )
    try:
        uvloop.run(serve(settings))
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    return 0


def _demo(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from sim.demo import DEMO_POLICIES, DemoSettings, run_demo

    policies = tuple(p for p in (args.policies or "").split(",") if p) or DEMO_POLICIES
    settings = DemoSettings(
        replicas=args.replicas,
        policies=policies,
        conversations=args.conversations,
        out_dir=Path(args.out),
    )
    summaries = asyncio.run(run_demo(settings))
    return 1 if any(s["errors"] for s in summaries) else 0


SIM_USAGE = """\
kvgate sim --trace FILE [options]
       kvgate sim sweep --trace FILE [sweep options]   (see kvgate sim sweep --help)"""

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
best_routing.yaml and sweep.png to --out. Exit status: 0 with a best configuration, 1 if
no run meets the constraints, 2 for bad arguments.
"""


def _add_trace_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    """The options `kvgate sim` and `kvgate sim sweep` share: trace, engines, config, SLO."""
    p.add_argument("--trace", required=required, metavar="FILE", help="trace file (JSONL or CSV)")
    p.add_argument("--format", default="auto", help="trace format (default auto: detected)")
    p.add_argument(
        "--limit", "--trace-requests", type=int, metavar="N", help="only the first N requests"
    )
    p.add_argument("--profile", default="h100-llama3-8b", help="engine profile")
    p.add_argument(
        "--block-size", type=int, metavar="TOKENS", help="KV block size (default: the profile's)"
    )
    p.add_argument("--config", metavar="FILE", help="gateway config file (routing:, health:)")
    p.add_argument("--slo-ttft", type=float, default=2.0, help="TTFT bound for goodput, s")
    p.add_argument("--slo-itl", type=float, default=0.1, help="mean ITL bound for goodput, s")
    p.add_argument("--seed", type=int, default=0, help="seed for scrape phases and pickers")


def _add_sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser(
        "sim",
        help="replay a trace through the routing policies onto simulated engines (offline)",
        usage=SIM_USAGE,
        description="Discrete-event replay of a request trace, once per policy, with the "
        "gateway's own routing code and the config file's `routing:` section; prints TTFT, "
        "ITL, hit rate, goodput and load share per policy and writes summary.json and plots. "
        "`kvgate sim sweep` runs a grid of configurations and names the best one.",
    )
    # `--trace` is checked in _sim: argparse would demand it of `kvgate sim sweep` too.
    _add_trace_options(m, required=False)
    m.add_argument(
        "--policies",
        default="",
        help="comma-separated profiles, `oracle` (prefix-aware with perfect signals) or "
        "`oracle:PROFILE` (default: round-robin,least-load,prefix-aware,oracle)",
    )
    m.add_argument("--replicas", type=int, default=8, help="simulated replicas (default 8)")
    m.add_argument("--rate-scale", type=float, default=1.0, help="replay X times faster")
    m.add_argument("--out", default="out/sim", help="output directory (default out/sim)")
    modes = m.add_subparsers(dest="sim_mode", metavar="{sweep}")
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
    w.add_argument("--out", default="out/sim-sweep", help="output directory (default %(default)s)")


def _sim(args: argparse.Namespace) -> int:
    from sim.replay.cli import run_sim

    try:
        if args.sim_mode == "sweep":
            from sim.replay.sweep import run_sweep

            return run_sweep(args)
        if args.trace is None:
            raise ValueError("sim: --trace is required (or: kvgate sim sweep --trace ...)")
        return run_sim(args)
    except (ValueError, OSError) as exc:
        raise ConfigError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    commands = {"serve": _serve, "emulate": _emulate, "demo": _demo, "check-config": _check_config}
    commands["sim"] = _sim
    try:
        return commands[args.command](args)
    except ConfigError as exc:
        print(f"kvgate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
