"""`kvgate epp`: the gateway's routing as a Gateway API Inference Extension endpoint picker
(Envoy ext_proc over gRPC), with a gRPC health service and Prometheus metrics."""

from __future__ import annotations

import argparse
import importlib.util
from typing import TYPE_CHECKING

from kvgate.cli.env import add_env_vars
from kvgate.cli.listen import check_can_listen
from kvgate.cli.options import (
    ENV_EPILOG,
    add_discovery_args,
    add_process_args,
    add_routing_args,
)
from kvgate.cli.startup import configure_logging, reloadable_runtime
from routing.config.schema import ConfigError

if TYPE_CHECKING:
    from kvgate.cli.options import SubParsers

EPILOG = """\
examples:
  kvgate epp --backend http://10.0.0.5:8000 --backend http://10.0.0.6:8000
  kvgate epp --config kvgate.yaml --host 0.0.0.0
  kvgate epp --backend http://10.0.0.5:8000,role=prefill \\
             --backend http://10.0.0.6:8000,role=decode --pd-protocol vllm --pd-mode always

Envoy (or a Gateway built on it) calls it over ext_proc for each request; it answers with
header x-gateway-destination-endpoint: ip:port and the same value in dynamic metadata
envoy.lb: one endpoint, what an ORIGINAL_DST cluster reads. Behind a proxy that walks a list
(Envoy's override_host load-balancing policy), --max-endpoints N adds up to N-1 fallbacks
(ip:port,ip:port...), tried in order on retry. Backends are given as for `kvgate serve`, by
IP address and port (what Envoy connects to). No ready backend: an immediate 503; a bad
body: 400 (OpenAI-shaped JSON).
On a prefill/decode pool (backends with role=prefill and role=decode) the destination is a
decode backend, and a split request names its prefill backend in x-prefiller-host-port, for
llm-d's routing sidecar in front of the decode engine (a client's own header is removed).
Inference calls wait for their place in admission first, Envoy holding them (band from the
InferenceObjective named in x-llm-d-inference-objective, tenant from
x-llm-d-inference-fairness-id); a shed one gets 429 with x-llm-d-request-dropped-reason.
InferenceModelRewrite rules (`rewrites:`, and the pool's objects with --pool) rewrite the
model (docs/flow-control.md). deploy/envoy/ in kvgate's source tree has Envoy configs that
use it (envoy-original-dst.yaml at the defaults, envoy.yaml with fallbacks);
docs/endpoint-picker.md wires it into Envoy Gateway, kgateway, Istio and GKE. SIGHUP (or a
change seen by --watch-config) reloads the config file as for `kvgate serve`.

ext_proc is served over TLS by default, with a self-signed certificate (gateways dial it
without verifying, as they do the reference picker) or --cert-path's, reloaded when its files
change; health and metrics are plaintext. Several pickers can serve one pool side by side
when they share routing state through --redis (Envoy spreads its ext_proc streams over them).
"""


def add_parser(sub: SubParsers) -> None:
    s = sub.add_parser(
        "epp",
        help="run as a Gateway API Inference Extension endpoint picker (Envoy ext_proc)",
        description="Run the gateway's routing as an endpoint picker: an Envoy ext_proc gRPC "
        "server that picks the backend for each request, with a gRPC health service "
        "(liveness, readiness) and Prometheus metrics. Needs kvgate[epp].",
        epilog=EPILOG + ENV_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_routing_args(s, backend_help="an engine replica (static endpoints); repeat for each")
    s.add_argument("--grpc-port", type=int, default=9002, help="ext_proc port (default 9002)")
    s.add_argument(
        "--health-port",
        "--grpc-health-port",
        type=int,
        default=9003,
        help="gRPC health port (default 9003)",
    )
    s.add_argument(
        "--metrics-port", type=int, default=9090, help="Prometheus /metrics port (default 9090)"
    )
    s.add_argument(
        "--secure-serving",
        type=parse_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="serve ext_proc over TLS (default true; --secure-serving=false: plaintext); "
        "without --cert-path, with a self-signed certificate made at start",
    )
    s.add_argument(
        "--cert-path",
        metavar="DIR",
        help="serve the certificate DIR/tls.crt with its key DIR/tls.key (a Kubernetes TLS "
        "Secret mounted there), reloaded when they change (default: self-signed)",
    )
    s.add_argument(
        "--redis",
        metavar="URL",
        help="share routing state with the other pickers (and gateways) using this Redis "
        "server, e.g. redis://10.0.0.9:6379/0, so that several pickers serve one pool "
        "(config state.backend redis, state.url)",
    )
    s.add_argument(
        "--max-endpoints",
        type=int,
        default=1,
        metavar="N",
        help="endpoints per answer: the pick, then up to N-1 fallbacks; more than 1 only for "
        "a proxy that walks the list (Envoy's override_host policy), not an ORIGINAL_DST "
        "cluster (default 1)",
    )
    add_discovery_args(s, reference_names=True)
    add_process_args(s)
    add_env_vars(s)


def parse_bool(text: str) -> bool:
    """A flag's true or false, as Go's flags spell them (true/false, t/f, 1/0, yes/no)."""
    value = text.strip().lower()
    if value in {"true", "t", "1", "yes", "y", "on"}:
        return True
    if value in {"false", "f", "0", "no", "n", "off"}:
        return False
    raise ValueError(f"not a boolean: {text!r}")


def run(args: argparse.Namespace) -> int:
    if any(importlib.util.find_spec(m) is None for m in ("grpc", "grpc_health", "cryptography")):
        raise ConfigError("kvgate epp needs the epp extra: pip install 'kvgate[epp]'")
    if args.max_endpoints < 1:
        raise ConfigError(f"--max-endpoints: {args.max_endpoints} is not at least 1")
    if args.cert_path and not args.secure_serving:
        raise ConfigError("--cert-path is for TLS: drop it or --secure-serving=false")
    import asyncio

    from gateway.epp.server import serve_epp
    from gateway.epp.settings import EppSettings

    configure_logging(args)
    runtime = reloadable_runtime(args)  # no ASGI app: the picker drives the runtime alone
    cfg = runtime.config
    ports = [p for p in (args.grpc_port, args.health_port, args.metrics_port) if p]
    check_can_listen(cfg.server.host, ports)
    settings = EppSettings(
        cfg.server.host,
        args.grpc_port,
        args.health_port,
        args.metrics_port,
        args.max_endpoints,
        secure_serving=args.secure_serving,
        cert_path=args.cert_path,
    )
    asyncio.run(serve_epp(runtime, settings))
    return 0
