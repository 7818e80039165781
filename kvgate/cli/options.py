"""What several commands' parsers share: the parser that reads `KVGATE_*` variables, the
flag groups of `serve` and `epp` (routing, discovery, process), the variables' epilog and
the version `--version` prints (with which compiled extensions the install built)."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from gateway.version import installed_version as gateway_version
from kvgate.cli.env import apply_env
from routing.config.profiles import BUILTIN_PROFILES, RoutingSection
from routing.config.schema import ConfigError

if TYPE_CHECKING:
    SubParsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

ENV_EPILOG = """
Every flag has an environment variable, named in [env ...] above: a flag given wins over it,
and it wins over the config file. KVGATE_BACKEND lists backends separated by spaces, or by
commas before http:// or https://. Secrets have variables only: KVGATE_API_KEYS,
KVGATE_ADMIN_KEY, KVGATE_UPSTREAM_API_KEY. OpenTelemetry tracing reads the standard OTEL_*
variables: OTEL_TRACES_EXPORTER=otlp turns it on (kvgate[otel]), OTEL_EXPORTER_OTLP_ENDPOINT
and OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf) say where, OTEL_TRACES_SAMPLER how
many; see the docs' "Dashboard and tracing" page (docs/operate/observability.md).
"""


def installed_version() -> str:
    """The installed distribution's version (what `kvgate --version` prints)."""
    return gateway_version() or "unknown (not installed)"  # run from a source tree


# The optional compiled modules (setup.py): each has a pure-Python reference that runs when
# the install found no C compiler, with the same results, more slowly.
COMPILED = {
    "sim.engine.kv_cache_native": "the simulator's KV cache",
    "gateway.tracing.otlp_native": "the tracing encoder",
    "routing.columns_native": "the scheduler's weighted sum",
    "scoring.fused_native": "the default profile's scoring pass",
    "scoring.state.displaced_native": "the eviction term's walks",
    "scoring.state.prefix_hash_native": "the prompt's prefix hashes",
}


def compiled_extensions() -> str:
    """One line: which compiled modules this install has, and which run in pure Python."""
    built = [what for name, what in COMPILED.items() if importlib.util.find_spec(name)]
    missing = [what for name, what in COMPILED.items() if what not in built]
    if not missing:
        return f"compiled: {', '.join(built)}"
    line = f"pure Python (no C compiler or header at install): {', '.join(missing)}"
    return line + (f"; compiled: {', '.join(built)}" if built else "")


class VersionAction(argparse.Action):
    """`--version`: the installed version, then the compiled extensions' line."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version and which extensions are compiled, and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        sys.stdout.write(f"{parser.prog} {installed_version()}\n{compiled_extensions()}\n")
        parser.exit()


class EnvParser(argparse.ArgumentParser):
    """`kvgate`'s parser: flags its command line leaves out come from `KVGATE_*` variables
    (`kvgate.cli.env`); a bad value fails as a bad flag does."""

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


def _policy_help() -> str:
    default = RoutingSection.model_fields["policy"].default
    return (
        f"default routing policy: a built-in profile ({', '.join(BUILTIN_PROFILES)}) or one "
        f"from the config file (default: the config's routing.policy, else {default})"
    )


def add_routing_args(s: argparse.ArgumentParser, *, backend_help: str) -> None:
    """What `serve` and `epp` both take: config, static backends, policy, listen address."""
    s.add_argument("--config", metavar="FILE", help="YAML config file (default: built-in defaults)")
    s.add_argument("--backend", metavar="URL", action="append", default=[], help=backend_help)
    s.add_argument("--policy", metavar="NAME", help=_policy_help())
    s.add_argument("--host", help="address to listen on (default: config server.host, 127.0.0.1)")
    s.add_argument(
        "--pd-protocol",
        choices=["vllm", "sglang"],
        help="prefill/decode pools (backends with role=prefill): vllm (NixlConnector "
        "kv_transfer_params) or sglang (bootstrap rooms) (config disaggregation.protocol, "
        "default vllm)",
    )
    s.add_argument(
        "--pd-mode",
        choices=["conditional", "always", "never"],
        help="when requests go through a prefill backend (config disaggregation.mode, "
        "default conditional: when D's uncached part is long and P is predicted faster)",
    )


def add_discovery_args(s: argparse.ArgumentParser, *, reference_names: bool = False) -> None:
    """The InferencePool to take backends from (`serve` and `epp`); `reference_names`: also
    the reference endpoint picker's flag names (`--pool-name`, `--pool-namespace`)."""
    pool: tuple[str, ...] = ("--pool-name",) if reference_names else ()
    namespace: tuple[str, ...] = ("--pool-namespace",) if reference_names else ()
    s.add_argument(
        "--pool",
        *pool,
        metavar="NAME",
        help="add the ready pods of this Kubernetes InferencePool as backends, kept current "
        "(config discovery.pool)",
    )
    s.add_argument(
        "--namespace",
        *namespace,
        metavar="NS",
        help="the InferencePool's namespace (config discovery.namespace, default 'default')",
    )
    s.add_argument(
        "--kube-api",
        metavar="URL",
        help="Kubernetes API server URL, used without credentials, e.g. `kubectl proxy`'s "
        "(default: in-cluster service account, else KUBECONFIG)",
    )


def add_process_args(s: argparse.ArgumentParser) -> None:
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
