"""The effective config of `serve` and `epp`: the config file with the command line's flags
(and their `KVGATE_*` variables) applied, validated again; `--backend URL,...` parsed as a
`backends:` entry."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from routing.config.schema import (
    BackendEntry,
    ConfigError,
    GatewayConfig,
    format_validation_error,
    load_config,
    parse_config,
)

_BACKEND_KEYS = frozenset(
    {"engine", "models", "id", "role", "bootstrap_port", "dp_size", "dp_rank_field"}
)


def parse_backend_arg(arg: str) -> BackendEntry:
    """Parse `--backend URL[,engine=vllm][,models=a|b][,id=name][,kv_events=ENDPOINT]
    [,kv_replay=ENDPOINT][,role=prefill|decode|both][,bootstrap_port=N][,dp_size=N]
    [,dp_rank_field=NAME]` (the engine's KV-event publisher and replay socket; its part in a
    P/D pool; its data-parallel ranks)."""
    url, *opts = arg.split(",")
    fields: dict[str, object] = {"url": url}
    events: dict[str, str] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if key in {"kv_events", "kv_replay"} and sep:
            events["endpoint" if key == "kv_events" else "replay"] = value
            continue
        if not sep or key not in _BACKEND_KEYS:
            raise ConfigError(
                f"--backend {arg!r}: expected key=value with key "
                "engine|models|id|kv_events|kv_replay|role|bootstrap_port|dp_size|dp_rank_field"
            )
        fields[key] = [m for m in value.split("|") if m] if key == "models" else value
    if events:
        fields["kv_events"] = events
    try:
        return BackendEntry.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, f"--backend {arg!r}")) from None


def effective_config(args: argparse.Namespace) -> GatewayConfig:
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
    for flag, key in (("pd_protocol", "protocol"), ("pd_mode", "mode")):
        if getattr(args, flag, None):
            raw.setdefault("disaggregation", {})[key] = getattr(args, flag)
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
