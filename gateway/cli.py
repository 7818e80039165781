"""`kvgate` command line: serve the gateway, check a config file, emulate engines, run the
demo, simulate.

CLI flags cover process concerns only (where to listen, log level, where to record) plus quick
overrides for the backends and the default policy; everything else is in the YAML config file.
The flags of `serve` and `epp` can also be set by `KVGATE_*` variables (`gateway.cli_env`).
Exit status: 0 on success, 1 when a server cannot listen (or the demo saw errors), 2 for a bad
command line or config file.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import logging
import secrets
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.cli_parser import build_parser
from gateway.config import parse_backend_arg
from routing.config.schema import ConfigError, GatewayConfig, load_config, parse_config
from sim.emulator.lora import LoraSettings

if TYPE_CHECKING:
    from gateway.app import GatewayApp
    from gateway.workers.context import WorkerContext

MAX_WORKERS = 256


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
    if getattr(args, "admin_port", None) is not None:
        raw.setdefault("server", {})["admin_port"] = args.admin_port
    if args.policy:
        raw.setdefault("routing", {})["policy"] = args.policy
    for flag, key in (("record", "record_path"), ("tls_cert", "tls_cert_file")):
        if getattr(args, flag, None):
            raw.setdefault("server", {})[key] = getattr(args, flag)
    if getattr(args, "tls_key", None):
        raw.setdefault("server", {})["tls_key_file"] = args.tls_key
    for flag, key in (("pool", "pool"), ("namespace", "namespace"), ("kube_api", "kube_api")):
        if getattr(args, flag, None):
            raw.setdefault("discovery", {})[key] = getattr(args, flag)
    if getattr(args, "redis", None):
        raw.setdefault("state", {}).update(backend="redis", url=args.redis)
    if getattr(args, "workers_salt", None) and not raw.get("security", {}).get(
        "backend_header_salt"
    ):
        raw.setdefault("security", {})["backend_header_salt"] = args.workers_salt
    return parse_config(raw, source="command line")


def configure_logging(args: argparse.Namespace) -> None:
    """Root logging for `serve` and `epp`: one stderr handler, `--log-format` lines."""
    from gateway.access_log import RequestIdFilter
    from gateway.log_format import TEXT_FORMAT, JsonFormatter

    handler = logging.StreamHandler()
    json = args.log_format == "json"
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RequestIdFilter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])


def _reloadable_app(args: argparse.Namespace, workers: WorkerContext | None = None) -> GatewayApp:
    """The gateway from the config, flags and variables, reloaded from them on SIGHUP,
    `POST /admin/reload` and (`--watch-config`) when the file changes."""
    from gateway.app import build_app
    from gateway.config_reload import ConfigReloader

    if args.watch_config is not None and not args.watch_config > 0:
        raise ConfigError(f"--watch-config: {args.watch_config} is not a positive interval")
    app = build_app(_effective_config(args), workers)
    load = functools.partial(_effective_config, args)
    rt = app.runtime
    rt.reloader = ConfigReloader(load, rt.reconfigure, args.config, args.watch_config)
    return app


def _serve(args: argparse.Namespace) -> int:
    from gateway.serve import run_gateway

    if not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError(f"--workers: {args.workers} is not between 1 and {MAX_WORKERS}")
    configure_logging(args)
    if args.workers > 1:
        return _serve_workers(args)
    app = _reloadable_app(args)
    cfg = app.runtime.config
    if cfg.server.port:  # port 0 is always free
        check_can_listen(cfg.server.host, [cfg.server.port])  # just before uvicorn binds it
    check_admin_port(cfg)
    return run_gateway(app, cfg.server, args.log_level)


def _serve_workers(args: argparse.Namespace) -> int:
    """`serve --workers N`: check the config, hold the ports, fork the workers."""
    from gateway.workers.listen import reserve
    from gateway.workers.master import Master

    cfg = _effective_config(args)  # a bad file fails here, once, not in every worker
    _check_routing(cfg)
    server = cfg.server
    if server.record_path is not None:
        raise ConfigError("--record (server.record_path) cannot be used with --workers > 1")
    if server.port:
        check_can_listen(server.host, [server.port])
    check_admin_port(cfg)
    # Every worker tags a backend alike in x-kvgate-backend (the default key is per process).
    args.workers_salt = secrets.token_hex(32)
    held = []
    try:
        args.port, sockets = reserve(server.host, server.port)
        held += sockets
        if server.admin_port is not None:
            args.admin_port, sockets = reserve(server.admin_host or server.host, server.admin_port)
            held += sockets
    except OSError as exc:
        for s in held:
            s.close()
        raise ListenError(f"cannot listen on {server.host}: {exc}") from None
    host = f"[{server.host}]" if ":" in server.host else server.host
    scheme = "https" if server.tls_cert_file else "http"
    master = Master(
        args.workers,
        functools.partial(_serve_worker, args),
        label=f"{scheme}://{host}:{args.port}",
        close_in_workers=held,
    )
    try:
        return master.run()
    finally:
        for s in held:
            s.close()


def _check_routing(cfg: GatewayConfig) -> None:
    """ConfigError if the routing profiles cannot be built (pure: no thread, no socket)."""
    import random
    import time

    from routing.registry import PluginError
    from scoring.stack import build_routing_stack

    try:
        build_routing_stack(cfg.routing, time.monotonic, random.Random())
    except (PluginError, ValueError) as exc:
        raise ConfigError(f"routing: {exc}") from None


def _serve_worker(args: argparse.Namespace, ctx: WorkerContext) -> int:
    """One worker of `serve --workers N` (in the forked process): its gateway, on its own
    socket of the shared port."""
    from gateway.log_format import tag_worker
    from gateway.serve import run_gateway
    from gateway.workers.listen import listening_sockets

    tag_worker(ctx.index)
    try:
        app = _reloadable_app(args, ctx)
        server = app.runtime.config.server
        sockets = listening_sockets(server.host, server.port)
    except ConfigError as exc:
        print(f"kvgate: worker {ctx.index}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvgate: worker {ctx.index}: cannot listen: {exc}", file=sys.stderr)
        return 1
    return run_gateway(app, server, args.log_level, sockets=sockets, on_started=ctx.notify_started)


def check_admin_port(cfg: GatewayConfig) -> None:
    """ListenError if the admin listener's port is taken (it binds in the app's start-up)."""
    server = cfg.server
    if server.admin_port:
        if server.admin_port == server.port and (server.admin_host or server.host) == server.host:
            raise ListenError(f"server.admin_port {server.admin_port} is server.port")
        check_can_listen(server.admin_host or server.host, [server.admin_port])


def _hash_key(args: argparse.Namespace) -> int:
    from gateway.auth import hash_key

    key = sys.stdin.readline().rstrip("\r\n")
    if not key:
        raise ConfigError("hash-key: no key on standard input")
    print(hash_key(key))
    return 0


def _epp(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("grpc") is None or importlib.util.find_spec("envoy") is None:
        raise ConfigError("kvgate epp needs the epp extra: pip install 'kvgate[epp]'")
    import asyncio

    from gateway.epp.server import serve_epp
    from gateway.epp.settings import EppSettings

    configure_logging(args)
    app = _reloadable_app(args)
    cfg = app.runtime.config
    ports = [p for p in (args.grpc_port, args.health_port, args.metrics_port) if p]
    check_can_listen(cfg.server.host, ports)
    settings = EppSettings(cfg.server.host, args.grpc_port, args.health_port, args.metrics_port)
    asyncio.run(serve_epp(app.runtime, settings))
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
    _check_kv_event_ports(args)
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
        kv_events_port=args.kv_events_port,
        kv_events_replay_port=args.kv_events_replay_port,
        kv_events_topic=args.kv_events_topic,
    )
    ports = list(range(args.port, args.port + args.replicas)) if args.port else []
    if args.kv_events_port:  # port 0: every socket picks a free one
        for i in range(args.replicas):
            ports += [args.kv_events_port + i, settings.replay_port(i)]
    if len(set(ports)) < len(ports):
        raise ConfigError("--port, --kv-events-port and --kv-events-replay-port ranges overlap")
    check_can_listen(args.host, ports)
    uvloop.run(serve(settings))
    return 0


def _check_kv_event_ports(args: argparse.Namespace) -> None:
    """ConfigError unless the KV-event port ranges (publishers, replay sockets) fit."""
    port, replay = args.kv_events_port, args.kv_events_replay_port
    if port is None:
        if replay is not None:
            raise ConfigError("--kv-events-replay-port needs --kv-events-port")
        return
    if replay is not None and (replay == 0) != (port == 0):
        raise ConfigError(
            "--kv-events-port, --kv-events-replay-port: both 0 (free ports) or neither"
        )
    last = port + (2 if replay is None else 1) * args.replicas - 1
    for flag, first, end in (
        ("--kv-events-port", port, last),
        ("--kv-events-replay-port", replay, (replay or 0) + args.replicas - 1),
    ):
        if first is not None and (first < 0 or (first and end > 65535)):
            raise ConfigError(f"{flag}: ports {first}-{end} out of 0-65535")


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
    from sim.replay.sweep.runners import SweepRunError

    try:
        if args.sim_mode == "sweep":
            from sim.replay.sweep import run_sweep

            return run_sweep(args)
        if args.trace is None:
            raise ValueError("sim: --trace is required (or: kvgate sim sweep --trace ...)")
        return run_sim(args)
    except (ValueError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    except SweepRunError as exc:  # a run lost on a Ray cluster, after its retries
        print(f"kvgate: {exc}", file=sys.stderr)
        return 3


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run `kvgate ARGV`; `environ` (default `os.environ`) holds the `KVGATE_*` variables."""
    args = build_parser(environ).parse_args(argv)
    commands = {"serve": _serve, "emulate": _emulate, "demo": _demo, "check-config": _check_config}
    commands["epp"] = _epp
    commands["sim"] = _sim
    commands["hash-key"] = _hash_key
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
