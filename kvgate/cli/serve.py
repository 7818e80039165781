"""`kvgate serve`: the gateway in front of a pool of engines, in one process or, with
`--workers N`, in N forked ones that share the port and their routing state."""

from __future__ import annotations

import argparse
import functools
import secrets
import sys
from typing import TYPE_CHECKING

from kvgate.cli.effective import effective_config
from kvgate.cli.env import add_env_vars
from kvgate.cli.listen import ListenError, check_admin_port, check_can_listen
from kvgate.cli.options import (
    ENV_EPILOG,
    add_discovery_args,
    add_process_args,
    add_routing_args,
)
from kvgate.cli.startup import configure_logging, reloadable_runtime
from kvgate.cli.tune import beside_gateway
from routing.config.schema import ConfigError, GatewayConfig

if TYPE_CHECKING:
    from gateway.workers.context import WorkerContext
    from kvgate.cli.options import SubParsers

MAX_WORKERS = 256

EPILOG = (
    """\
examples:
  kvgate serve --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002
  kvgate serve --config kvgate.yaml --policy session --port 8080
  kvgate serve --backend 'http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5'
  kvgate serve --pool llama --namespace llm --host 0.0.0.0   # in a Kubernetes pod
  KVGATE_API_KEYS="$KEY" kvgate serve --config kvgate.yaml --admin-port 9090

--backend takes URL[,engine=vllm|sglang|trtllm|openai][,models=a|b][,id=NAME]
[,kv_events=ENDPOINT][,kv_replay=ENDPOINT]; without models= the backend's models are
discovered from its GET /v1/models; kv_events= follows the engine's KV-cache events (ZMQ,
e.g. tcp://10.0.0.5:5557; kv_replay= its replay socket) into the precise index, which the
precise-prefix policy reads with a tokenizer from config `tokenizers:`. Flags are added to
the backends of --config. deploy/kvgate.yaml in kvgate's source tree documents every config field.

--pool adds, as backends, the ready pods of that Kubernetes InferencePool
(inference.networking.k8s.io/v1), one per target port, engine from the pod label
kvgate.dev/engine (default vllm), kept current by watching the API: in a pod with its
service account (RBAC: get/list/watch on pods and inferencepools), else KUBECONFIG.

With API keys (config security.api_keys, security.api_keys_file, env KVGATE_API_KEYS) every
request but /health and /ready needs `Authorization: Bearer KEY`, else 401; `kvgate hash-key`
prints a key's SHA-256 for the config. --admin-port moves /admin/* and /metrics to their
own listener (404 on --port), which also serves the admin API's OpenAPI page, /docs (never
on --port); without it they need the admin key (KVGATE_ADMIN_KEY)
if one is set, and are closed when API keys are set without one. With neither, /admin/*
answers clients on this machine only (loopback, not relayed by a proxy; others get 403)
and /metrics, read-only, answers anyone. A documented example key is refused at start-up.

SIGTERM drains: /ready answers 503 while requests are served for server.drain_delay_s
(5 s), then no new connections; responses in flight get server.shutdown_grace_s (30 s),
and streams still open then end with an SSE error event; exit status 0. Ctrl+C skips the
delay. Set terminationGracePeriodSeconds above the sum of the two.

--workers N forks N gateway processes that each bind --port (SO_REUSEPORT: the kernel
spreads connections over them) and route as one: placements, failover withdrawals, backend
forgets, TTFT lines, in-flight requests and queued prefill go between them through Redis
with --redis, else over Unix sockets between the workers. /metrics on any of them is the
whole gateway's (counters summed, gauges per worker), an admin change through one is made
by all, and SIGTERM, SIGINT and SIGHUP to the master reach every worker. Per-key rate
limits apply per worker (admission's in-flight cap counts every worker's requests). --record
cannot be combined with it.

At runtime, the admin API adds (POST /admin/backends, a backends: entry as JSON), drains
(POST /admin/backends/ID/drain) and removes (DELETE /admin/backends/ID) backends without
dropping requests; /docs on --admin-port describes it. SIGHUP, POST /admin/reload or a
change seen by --watch-config reloads the config file, flags and variables applied again:
backends, routing.policy and profiles, and health (but its timeouts) apply at once; other
fields need a restart (a warning names them). A bad file is rejected, an error names the
field, and the running config stays.
"""
    + ENV_EPILOG
)


def add_parser(sub: SubParsers) -> None:
    s = sub.add_parser(
        "serve",
        help="run the gateway (OpenAI API on /v1/*, /metrics, /health, /ready, /admin/*)",
        description="Run the gateway in front of a pool of engines.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_routing_args(s, backend_help="an engine replica; repeat for each (see below)")
    s.add_argument(
        "--port",
        type=int,
        help="port to listen on; 0 picks a free one (default: config server.port, 8000)",
    )
    s.add_argument(
        "--admin-port",
        type=int,
        help="serve /admin/* and /metrics on this port only, not on --port, with the admin "
        "API's OpenAPI page at /docs, served only here (config "
        "server.admin_port; default: on --port, behind security.admin_key_sha256 if set, "
        "else /admin/* for this machine's clients only)",
    )
    add_discovery_args(s)
    s.add_argument(
        "--record",
        metavar="FILE",
        help="append a replayable trace of the traffic to FILE (config server.record_path): "
        "arrivals, token counts, prefix block hashes, never prompt text",
    )
    s.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="serve HTTPS with this PEM certificate chain, reloaded when it changes "
        "(config server.tls_cert_file; needs --tls-key)",
    )
    s.add_argument("--tls-key", metavar="FILE", help="its PEM key (config server.tls_key_file)")
    s.add_argument(
        "--redis",
        metavar="URL",
        help="share routing state with the other gateways using this Redis server, e.g. "
        "redis://10.0.0.9:6379/0 (config state.backend redis, state.url)",
    )
    s.add_argument(
        "--workers",
        type=int,
        metavar="N",
        default=1,
        help="run N gateway processes on the port, e.g. one per core (default 1); they share "
        "routing state through --redis if set, else between themselves (see below)",
    )
    add_process_args(s)
    add_env_vars(s)


def run(args: argparse.Namespace) -> int:
    from gateway.app import GatewayApp
    from gateway.serve import run_gateway

    if not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError(f"--workers: {args.workers} is not between 1 and {MAX_WORKERS}")
    configure_logging(args)
    if args.workers > 1:
        return _serve_workers(args)
    app = GatewayApp(reloadable_runtime(args))
    cfg = app.runtime.config
    app.runtime.tuner = beside_gateway(args, cfg)  # `kvgate tune`, with tuning.spawn
    if cfg.server.port:  # port 0 is always free
        check_can_listen(cfg.server.host, [cfg.server.port])  # just before uvicorn binds it
    check_admin_port(cfg)
    return run_gateway(app, cfg.server, args.log_level)


def _serve_workers(args: argparse.Namespace) -> int:
    """`serve --workers N`: check the config, hold the ports, fork the workers."""
    from gateway.workers.listen import reserve
    from gateway.workers.master import Master

    cfg = effective_config(args)  # a bad file fails here, once, not in every worker
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
    from gateway.app import GatewayApp
    from gateway.log_format import tag_worker
    from gateway.serve import run_gateway
    from gateway.workers.listen import listening_sockets

    tag_worker(ctx.index)
    try:
        app = GatewayApp(reloadable_runtime(args, ctx), reuse_port=True)
        server = app.runtime.config.server
        sockets = listening_sockets(server.host, server.port)
    except ConfigError as exc:
        print(f"kvgate: worker {ctx.index}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kvgate: worker {ctx.index}: cannot listen: {exc}", file=sys.stderr)
        return 1
    return run_gateway(app, server, args.log_level, sockets=sockets, on_started=ctx.notify_started)
