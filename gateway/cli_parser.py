"""The `kvgate` command line's parsers: subcommands, flags, help and epilogs (`gateway.cli`
runs them)."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.cli_env import add_env_vars, apply_env
from routing.config.profiles import BUILTIN_PROFILES, RoutingSection
from routing.config.schema import ConfigError
from sim.emulator.lora import LoraSettings
from sim.replay.arguments import add_sim_parser

DESCRIPTION = """\
kvgate: a KV-cache- and prefix-aware gateway for pools of OpenAI-compatible LLM engines
(vLLM, SGLang, ...). It relays OpenAI API requests to the replica that should serve them.
"""

MAIN_EPILOG = """\
Every flag of `kvgate serve` and `kvgate epp` can also be set by a KVGATE_* environment
variable (--port: KVGATE_PORT), named in their --help; a flag given wins over it.
"""

ENV_EPILOG = """
Every flag has an environment variable, named in [env ...] above: a flag given wins over it,
and it wins over the config file. KVGATE_BACKEND lists backends separated by spaces, or by
commas before http:// or https://. Secrets have variables only: KVGATE_API_KEYS,
KVGATE_ADMIN_KEY, KVGATE_UPSTREAM_API_KEY. OpenTelemetry tracing reads the standard OTEL_*
variables: OTEL_TRACES_EXPORTER=otlp turns it on (kvgate[otel]), OTEL_EXPORTER_OTLP_ENDPOINT
and OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf) say where, OTEL_TRACES_SAMPLER how
many; see README "Observability".
"""


SERVE_EPILOG = (
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
prints a key's SHA-256 for the config. --admin-port moves /admin/*, /metrics and /docs to
their own listener (404 on --port); without it they need the admin key (KVGATE_ADMIN_KEY)
if one is set, and are closed when API keys are set without one.

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


class _Parser(argparse.ArgumentParser):
    """`kvgate`'s parser: flags its command line leaves out come from `KVGATE_*` variables
    (`gateway.cli_env`); a bad value fails as a bad flag does."""

    def __init__(self, environ: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._environ = environ

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        try:
            apply_env(parsed, self._environ)
        except ConfigError as exc:
            self.error(str(exc))
        return parsed, rest


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The parser; `environ` (default `os.environ`) holds the `KVGATE_*` variables."""
    p = _Parser(
        os.environ if environ is None else environ,
        prog="kvgate",
        description=DESCRIPTION,
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=argparse.ArgumentParser
    )
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
    sub.add_parser(
        "hash-key",
        help="print the SHA-256 of an API key read from stdin (for security.api_keys)",
        description="Read one API key from standard input (a trailing newline is ignored) and "
        "print its hex SHA-256: the `sha256` of a security.api_keys entry, or "
        "security.admin_key_sha256. The config then holds no key. Example: "
        'printf %s "$KEY" | kvgate hash-key',
    )
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
    _add_routing_args(s, backend_help="an engine replica; repeat for each (see below)")
    s.add_argument(
        "--port",
        type=int,
        help="port to listen on; 0 picks a free one (default: config server.port, 8000)",
    )
    s.add_argument(
        "--admin-port",
        type=int,
        help="serve /admin/*, /metrics and /docs on this port only, not on --port (config "
        "server.admin_port; default: on --port, behind security.admin_key_sha256 if set)",
    )
    _add_discovery_args(s)
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
    _add_process_args(s)
    add_env_vars(s)


def _add_routing_args(s: argparse.ArgumentParser, *, backend_help: str) -> None:
    """What `serve` and `epp` both take: config, static backends, policy, listen address."""
    s.add_argument("--config", metavar="FILE", help="YAML config file (default: built-in defaults)")
    s.add_argument("--backend", metavar="URL", action="append", default=[], help=backend_help)
    s.add_argument("--policy", metavar="NAME", help=_policy_help())
    s.add_argument("--host", help="address to listen on (default: config server.host, 127.0.0.1)")


def _add_discovery_args(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--pool",
        metavar="NAME",
        help="add the ready pods of this Kubernetes InferencePool as backends, kept current "
        "(config discovery.pool)",
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


def _add_process_args(s: argparse.ArgumentParser) -> None:
    """What `serve` and `epp` both take about the process: logging, config reloads."""
    s.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    s.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text: `TIME LEVEL LOGGER [REQUEST_ID] MESSAGE` lines; json: each line one JSON "
        "object (ts, level, logger, message, request_id, the record's fields; the access "
        "log's fields on the line itself) (default text)",
    )
    s.add_argument(
        "--watch-config",
        type=float,
        metavar="SECONDS",
        help="check the --config file this often and reload it when it changes (default: "
        "reload on SIGHUP or POST /admin/reload only)",
    )


EPP_EPILOG = """\
examples:
  kvgate epp --backend http://10.0.0.5:8000 --backend http://10.0.0.6:8000
  kvgate epp --config kvgate.yaml --host 0.0.0.0

Envoy (or a Gateway built on it) calls it over ext_proc for each request; it answers with
header x-gateway-destination-endpoint: ip:port[,fallback...] and the same value in dynamic
metadata envoy.lb. Backends are given as for `kvgate serve`, by IP address and port (what
Envoy connects to). No ready backend: an immediate 503; a bad body: 400 (OpenAI-shaped JSON).
deploy/envoy/ in kvgate's source tree has an Envoy config that uses it. SIGHUP (or a change
seen by --watch-config) reloads the config file as for `kvgate serve`.
"""


def _add_epp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "epp",
        help="run as a Gateway API Inference Extension endpoint picker (Envoy ext_proc)",
        description="Run the gateway's routing as an endpoint picker: an Envoy ext_proc gRPC "
        "server that picks the backend for each request, with a gRPC health service "
        "(liveness, readiness) and Prometheus metrics. Needs kvgate[epp].",
        epilog=EPP_EPILOG + ENV_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_routing_args(s, backend_help="an engine replica (static endpoints); repeat for each")
    s.add_argument("--grpc-port", type=int, default=9002, help="ext_proc port (default 9002)")
    s.add_argument("--health-port", type=int, default=9003, help="gRPC health port (default 9003)")
    s.add_argument(
        "--metrics-port", type=int, default=9090, help="Prometheus /metrics port (default 9090)"
    )
    _add_discovery_args(s)
    _add_process_args(s)
    add_env_vars(s)


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
    e.add_argument(
        "--kv-events-port",
        type=int,
        metavar="P",
        help="publish vLLM KV-cache events (ZMQ PUB, vLLM 0.32's wire format): replica N on "
        "tcp://HOST:P+N; 0 picks free ports (printed as `replica N kv-events: ...`). Off by "
        "default",
    )
    e.add_argument(
        "--kv-events-replay-port",
        type=int,
        metavar="R",
        help="replica N answers vLLM replay requests (ZMQ ROUTER) on R+N (default: the ports "
        "after the publishers', P+replicas+N; free ports when P is 0)",
    )
    e.add_argument(
        "--kv-events-topic",
        default="",
        metavar="TOPIC",
        help="topic frame of every event message (default empty, as vLLM's)",
    )
