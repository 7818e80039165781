"""`kvgate` command line: serve the gateway, check a config file, emulate engines, run the
demo, simulate.

CLI flags cover process concerns only (where to listen, log level, where to record) plus quick
overrides for the backends and the default policy; everything else is in the YAML config file.
Exit status: 0 on success, 1 when a server cannot listen (or the demo saw errors), 2 for a bad
command line or config file.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import logging
import socket
import sys
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

from gateway.config import (
    ConfigError,
    GatewayConfig,
    load_config,
    parse_backend_arg,
    parse_config,
)
from scoring.profiles import BUILTIN_PROFILES, RoutingSection
from sim.emulator.lora import LoraSettings
from sim.replay.arguments import add_sim_parser

DESCRIPTION = """\
kvgate: a KV-cache- and prefix-aware gateway for pools of OpenAI-compatible LLM engines
(vLLM, SGLang, ...). It relays OpenAI API requests to the replica that should serve them.
"""

SERVE_EPILOG = """\
examples:
  kvgate serve --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002
  kvgate serve --config kvgate.yaml --policy session --port 8080
  kvgate serve --backend 'http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5'
  kvgate serve --pool llama --namespace llm --host 0.0.0.0   # in a Kubernetes pod

--backend takes URL[,engine=vllm|sglang|trtllm|openai][,models=a|b][,id=NAME]; without
models= the backend's models are discovered from its GET /v1/models. Flags are added to the
backends of --config. deploy/kvgate.yaml in kvgate's source tree documents every config field.

--pool adds, as backends, the ready pods of that Kubernetes InferencePool
(inference.networking.k8s.io/v1), one per target port, engine from the pod label
kvgate.dev/engine (default vllm), kept current by watching the API: in a pod with its
service account (RBAC: get/list/watch on pods and inferencepools), else KUBECONFIG.
"""


def _version() -> str:
    try:
        return importlib.metadata.version("kvgate")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown (not installed)"


def _policy_help() -> str:
    default = RoutingSection.model_fields["policy"].default
    return (
        f"default routing policy: a built-in profile ({', '.join(BUILTIN_PROFILES)}) or one "
        f"from the config file (default: the config's routing.policy, else {default})"
    )


def _engine_profiles_epilog() -> str:
    # Imported here, not at the top: only the emulator and the simulator use engine profiles.
    from sim.engine.profiles import PROFILES

    width = max(map(len, PROFILES))
    lines = [
        textwrap.fill(
            p.description,
            width=88,
            initial_indent=f"  {name:<{width}}  ",
            subsequent_indent=" " * (width + 4),
        )
        for name, p in PROFILES.items()
    ]
    return "engine profiles (--profile):\n" + "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvgate", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve_parser(sub)
    _add_epp_parser(sub)
    _add_emulate_parser(sub)

    d = sub.add_parser(
        "demo",
        help="start emulated replicas and the gateway, replay a chat workload per policy",
        description="Runs the built-in multi-tenant, multi-turn chat workload through the "
        "gateway in front of a fresh set of emulated replicas (engine profile demo), once per "
        "policy, and reports prefix-cache hit rates (from the replicas' metrics), requests per "
        "replica and TTFT; writes summary.json and, with kvgate[plots], ttft_cdf.png to "
        "--out. Exits 1 if any request failed.",
    )
    d.add_argument("--replicas", type=int, default=4, help="emulated replicas (default 4)")
    d.add_argument(
        "--policies",
        default=None,
        help="comma-separated policies to compare (default: round-robin,session,prefix-aware)",
    )
    d.add_argument("--conversations", type=int, default=40, help="chats to replay (default 40)")
    d.add_argument("--out", default="out/demo", help="output directory (default out/demo)")

    c = sub.add_parser(
        "check-config",
        help="validate a config file and print the effective configuration",
        description="Validate a config file and build its routing profiles; print the "
        "configuration with every default filled in (JSON). Exit 2 naming each bad field if "
        "it is invalid.",
    )
    c.add_argument("config", metavar="FILE", help="the YAML config file")
    add_sim_parser(sub)
    return p


def _add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    s.add_argument("--policy", metavar="NAME", help=_policy_help())
    s.add_argument("--host", help="address to listen on (default: config server.host, 127.0.0.1)")
    s.add_argument(
        "--port",
        type=int,
        help="port to listen on; 0 picks a free one (default: config server.port, 8000)",
    )
    s.add_argument(
        "--pool",
        metavar="NAME",
        help="add the ready pods of this Kubernetes InferencePool as backends, kept current "
        "(config discovery.pool; see below)",
    )
    s.add_argument(
        "--namespace",
        metavar="NS",
        help="the InferencePool's namespace (config discovery.namespace, default 'default')",
    )
    s.add_argument(
        "--kube-api",
        metavar="URL",
        help="Kubernetes API server URL, used without credentials, e.g. `kubectl proxy`'s "
        "(default: in-cluster service account, else KUBECONFIG)",
    )
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


EPP_EPILOG = """\
examples:
  kvgate epp --backend http://10.0.0.5:8000 --backend http://10.0.0.6:8000
  kvgate epp --config kvgate.yaml --host 0.0.0.0

Envoy (or a Gateway built on it) calls it over ext_proc for each request; it answers with
header x-gateway-destination-endpoint: ip:port[,fallback...] and the same value in dynamic
metadata envoy.lb. Backends are given as for `kvgate serve`, by IP address and port (what
Envoy connects to). No ready backend: an immediate 503; a bad body: 400 (OpenAI-shaped JSON).
deploy/envoy/ in kvgate's source tree has an Envoy config that uses it.
"""


def _add_epp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "epp",
        help="run as a Gateway API Inference Extension endpoint picker (Envoy ext_proc)",
        description="Run the gateway's routing as an endpoint picker: an Envoy ext_proc gRPC "
        "server that picks the backend for each request, with a gRPC health service "
        "(liveness, readiness) and Prometheus metrics. Needs kvgate[epp].",
        epilog=EPP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--config", metavar="FILE", help="YAML config file (default: built-in defaults)")
    s.add_argument(
        "--backend",
        metavar="URL",
        action="append",
        default=[],
        help="an engine replica (static endpoints); repeat for each",
    )
    s.add_argument("--policy", metavar="NAME", help=_policy_help())
    s.add_argument("--host", help="address to listen on (default: config server.host, 127.0.0.1)")
    s.add_argument("--grpc-port", type=int, default=9002, help="ext_proc port (default 9002)")
    s.add_argument("--health-port", type=int, default=9003, help="gRPC health port (default 9003)")
    s.add_argument(
        "--metrics-port", type=int, default=9090, help="Prometheus /metrics port (default 9090)"
    )
    s.add_argument(
        "--pool",
        metavar="NAME",
        help="add the ready pods of this Kubernetes InferencePool as endpoints, as they come "
        "and go (config discovery.pool)",
    )
    s.add_argument(
        "--namespace",
        metavar="NS",
        help="the InferencePool's namespace (config discovery.namespace, default 'default')",
    )
    s.add_argument(
        "--kube-api",
        metavar="URL",
        help="Kubernetes API server URL, used without credentials (default: in-cluster or "
        "KUBECONFIG)",
    )
    s.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )


def _add_emulate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = sub.add_parser(
        "emulate",
        help="run N emulated vLLM replicas (engine model in real time, vLLM's HTTP surface)",
        description="Emulated vLLM replicas whose timing, prefix cache and metrics come from "
        "kvgate's engine model. Prints one `replica N: URL` line per replica (N from 0).",
        epilog=_engine_profiles_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    e.add_argument("--model", default="kvgate-demo", help="served model name (default %(default)s)")
    e.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="run X times faster than real time: modelled durations / X (default 1)",
    )
    e.add_argument(
        "--tokenizer",
        metavar="FILE",
        help="a Hugging Face tokenizer.json to use instead of the built-in tokenizer (needs "
        "the optional `tokenizers` package)",
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
    e.add_argument(
        "--lora",
        nargs="+",
        default=[],
        metavar="NAME",
        help="LoRA adapters to serve on top of --model: listed in /v1/models with the model as "
        "parent, reported in vllm:lora_requests_info",
    )
    e.add_argument(
        "--max-loras",
        type=int,
        default=LoraSettings().max_loras,
        metavar="N",
        help="distinct adapters batched at once, as vLLM's flag (default %(default)s)",
    )


class ListenError(Exception):
    """A server cannot listen where it was told to (port in use, address not local, ...)."""


def check_can_listen(host: str, ports: Iterable[int]) -> None:
    """Bind each (host, port) as the server is about to, then let go; ListenError names the
    first that fails. A busy port then costs one line, not a server's traceback."""
    for port in ports:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            addresses = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            for family, kind, proto, _, address in addresses:
                with socket.socket(family, kind, proto) as sock:
                    # As asyncio's create_server: a port in TIME_WAIT is free, IPv6 only v6.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
        except (OSError, OverflowError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ListenError(f"cannot listen on {shown}: {reason.lower()}") from None


def _effective_config(args: argparse.Namespace) -> GatewayConfig:
    """The config file with the command line's overrides applied, validated again."""
    # Only the fields the file set: a full dump would add `weight: 1.0` to every filter and
    # picker of a user profile, which the profile schema rejects.
    raw = load_config(args.config).model_dump(exclude_unset=True)
    raw.setdefault("backends", []).extend(parse_backend_arg(b).model_dump() for b in args.backend)
    if args.host is not None:
        raw.setdefault("server", {})["host"] = args.host
    if getattr(args, "port", None) is not None:
        raw.setdefault("server", {})["port"] = args.port
    if args.policy:
        raw.setdefault("routing", {})["policy"] = args.policy
    if getattr(args, "record", None):
        raw.setdefault("server", {})["record_path"] = args.record
    for flag, key in (("pool", "pool"), ("namespace", "namespace"), ("kube_api", "kube_api")):
        if getattr(args, flag, None):
            raw.setdefault("discovery", {})[key] = getattr(args, flag)
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
    cfg = _effective_config(args)
    app = build_app(cfg)
    if cfg.server.port:  # port 0 is always free
        check_can_listen(cfg.server.host, [cfg.server.port])  # just before uvicorn binds it
    # Start-up objects live as long as the process: out of GC passes (docs/decisions/0004).
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


def _epp(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("grpc") is None or importlib.util.find_spec("envoy") is None:
        raise ConfigError("kvgate epp needs the epp extra: pip install 'kvgate[epp]'")
    import asyncio

    from gateway.access_log import RequestIdFilter
    from gateway.app import build_app
    from gateway.epp.server import serve_epp
    from gateway.epp.settings import EppSettings

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
    cfg = _effective_config(args)
    app = build_app(cfg)
    ports = [p for p in (args.grpc_port, args.health_port, args.metrics_port) if p]
    check_can_listen(cfg.server.host, ports)
    settings = EppSettings(cfg.server.host, args.grpc_port, args.health_port, args.metrics_port)
    asyncio.run(serve_epp(app, settings))
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
    from sim.engine.profiles import get_profile

    if args.replicas < 1 or args.speedup <= 0:
        raise ConfigError("--replicas must be >= 1 and --speedup > 0")
    last_port = args.port + args.replicas - 1
    if args.port < 0 or (args.port and last_port > 65535):
        raise ConfigError(f"--port: replica ports {args.port}-{last_port} out of 0-65535")
    if args.tokenizer is not None:
        if not Path(args.tokenizer).is_file():
            raise ConfigError(f"--tokenizer {args.tokenizer}: no such file")
        if importlib.util.find_spec("tokenizers") is None:
            raise ConfigError("--tokenizer needs the `tokenizers` package: pip install tokenizers")
    try:
        get_profile(args.profile)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    try:
        lora = LoraSettings(tuple(args.lora), max_loras=args.max_loras)
    except ValueError as exc:
        raise ConfigError(f"--lora/--max-loras: {exc}") from None
    if args.model in lora.adapters:
        raise ConfigError(f"--lora: {args.model!r} is the served model's own name")
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
        lora=lora,
    )
    if args.port:  # port 0: every replica picks a free one
        check_can_listen(args.host, range(args.port, args.port + args.replicas))
    uvloop.run(serve(settings))
    return 0


def _demo(args: argparse.Namespace) -> int:
    import asyncio

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
    commands["epp"] = _epp
    commands["sim"] = _sim
    try:
        return commands[args.command](args)
    except ConfigError as exc:
        print(f"kvgate: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:
        print(f"kvgate: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
